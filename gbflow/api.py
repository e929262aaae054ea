"""The public entry point ``gbflow.train``: arguments checked, Dask collections handed on."""
from __future__ import annotations

import numpy as np

from . import boosting, inputs
from .backend import get_backend, on_gpu
from .booster import Booster
from .params import make_params


def _eval_dataset(entry, label, weight, train: inputs.DataSet, index: int):
    data, name, what = inputs.eval_pair(entry, index)
    if isinstance(data, tuple):
        if len(data) not in (2, 3):
            raise TypeError(f"{what}: give (X, y) or (X, y, weight) as data")
        X, y, w = data if len(data) == 3 else (*data, None)
        return inputs.load(X, y, w, what, feature_names=train.feature_names), name
    if not isinstance(label, str):
        raise TypeError(f"{what}: the training label was an array, so give this evaluation set "
                        f"as ((X, y), {name!r}) or ((X, y, weight), {name!r})")
    return inputs.load(data, label, weight if isinstance(weight, str) else None, what,
                         feature_names=train.feature_names), name


def train(data, label=None, params: dict | None = None, num_boost_round: int = 100,
          evals=None, early_stopping_rounds: int | None = None, weight=None,
          verbose=True, client=None) -> Booster:
    """Train a gradient-boosted tree model.

    data: pandas DataFrame or 2-D NumPy array (features; float32 is used internally, NaN and
    nulls are missing values), or a Dask DataFrame (then label/weight name columns, evals hold
    Dask DataFrames, and training runs on the workers of the active ``distributed.Client``, or in
    this process over the partitions without one: see ``gbflow.dask``; ``client`` names a
    ``distributed.Client`` explicitly). label: column name of ``data`` (then not a feature) or
    an array with one value per row. weight: likewise, optional, non-negative. params:
    XGBoost-style parameters (see ``gbflow.params.Params``); an unknown name is an error. evals:
    list of (data, name) pairs evaluated after every round (frames holding the label column, or
    (X, y[, w]) tuples); with early_stopping_rounds, training stops when the last metric of the
    last pair has not improved for that many rounds and the model keeps the trees up to the best
    round.
    verbose: True for about 20 progress lines on stderr, an int for a line every that many rounds,
    False for none. Returns a ``Booster``; nothing is computed before every input has been checked.
    """
    params = make_params(params)
    if isinstance(num_boost_round, bool) or not isinstance(num_boost_round, (int, np.integer)) \
            or num_boost_round < 0:
        raise ValueError(f"num_boost_round must be a non-negative integer, got {num_boost_round!r}")
    if early_stopping_rounds is not None and (
            isinstance(early_stopping_rounds, bool)
            or not isinstance(early_stopping_rounds, (int, np.integer))
            or early_stopping_rounds < 1):
        raise ValueError(f"early_stopping_rounds must be a positive integer, "
                         f"got {early_stopping_rounds!r}")
    if evals is not None and not isinstance(evals, list):
        raise TypeError(f"evals must be a list of (data, name) pairs, got {type(evals).__name__}"
                        + ("; wrap a single pair in a list" if isinstance(evals, tuple) else ""))
    if early_stopping_rounds and not evals:
        raise ValueError("early_stopping_rounds needs at least one evaluation set in evals")
    if label is None:
        raise ValueError("train needs a label: a column name of data or an array")
    if inputs.is_dask_collection(data):  # trained where its partitions live: gbflow.dask
        from .dask import driver
        return driver.train(data, label, params, int(num_boost_round), evals,
                            early_stopping_rounds, weight, verbose, client=client)
    if client is not None:
        raise TypeError(f"client= is for Dask collections; the training data is a "
                        f"{type(data).__name__}, trained in this process")
    dataset = inputs.load(data, label, weight, "training data")
    objective = params.loss
    objective.check_label(dataset.label, f"label column {dataset.label_name!r}"
                          if dataset.label_name else "the training label")
    if dataset.weight is not None and not dataset.weight.sum() > 0:
        raise ValueError("weight: all training weights are zero")
    eval_sets = [_eval_dataset(e, label, weight, dataset, i) for i, e in enumerate(evals or [])]
    for d, name in eval_sets:
        objective.check_label(d.label, f"evaluation set {name!r}")
        if "auc" in params.metrics and len(np.unique(d.label)) < 2:
            raise ValueError(f"evaluation set {name!r} holds only one class: auc is undefined "
                             f"there (early stopping could never see it improve)")
    backend = get_backend(params.device, data_on_gpu=on_gpu(dataset.X))
    return boosting.fit(backend, [dataset], params, int(num_boost_round), eval_sets,
                        early_stopping_rounds, verbose, drop_features=True)
