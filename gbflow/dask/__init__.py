"""Dask integration: training where the partitions live, lazy prediction.

The only package that imports dask or distributed.

``gbflow.train(ddf, label="y")`` on a Dask DataFrame lands in ``driver``: with an active (or a
given, ``client=``) ``distributed.Client`` one training task per worker (``task``) trains on the
partitions that worker holds, summing histograms with the other workers through NCCL or Dask's
worker-to-worker communication (``transport``, ``collective``); without a client, training runs
in this process over the partitions. Either way the model file is the same bit for bit.
``Booster.predict``/``transform`` on a Dask DataFrame are lazy ``map_partitions`` (``predict``).
"""
from __future__ import annotations

from .errors import CollectiveAborted, CollectiveError, CollectiveTimeout, WorkerLostError

__all__ = ["CollectiveAborted", "CollectiveError", "CollectiveTimeout", "WorkerLostError"]
