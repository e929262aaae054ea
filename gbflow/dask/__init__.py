"""Dask integration (F3): training where the partitions live, lazy prediction; the only package that
imports dask or distributed.

``gbflow.train(ddf, label="y")`` on a Dask DataFrame lands here (``driver.train``): with an active
``distributed.Client`` one training task per worker trains on the partitions that worker holds,
summing histograms with the other workers through ``collective`` (Dask's worker-to-worker
communication); without a client, training runs in this process over the partitions. Either way
the model file is the same bit for bit. ``Booster.predict``/``transform`` on a Dask DataFrame are
lazy ``map_partitions`` (``predict``).
"""
from __future__ import annotations

from .collective import CollectiveAborted, CollectiveError, CollectiveTimeout, WorkerLostError

__all__ = ["CollectiveAborted", "CollectiveError", "CollectiveTimeout", "WorkerLostError", "train"]


def train(data, label, params: dict | None = None, num_boost_round: int = 100, evals=None,
          early_stopping_rounds: int | None = None, weight=None, verbose=True, client=None):
    """``gbflow.train`` on a Dask DataFrame with an explicit ``client`` (None: the active client,
    or in-process training without one). Arguments and result as ``gbflow.train``."""
    from .. import training
    if client is None:
        return training.train(data, label, params, num_boost_round, evals,
                              early_stopping_rounds, weight, verbose)
    with client.as_current():
        return training.train(data, label, params, num_boost_round, evals,
                              early_stopping_rounds, weight, verbose)
