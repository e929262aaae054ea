"""Compiling the CPU kernels ahead of the first training: small trainings that fill numba's cache.

numba compiles gbflow's CPU kernels at their first use and keeps them in its disk cache
(``__pycache__`` beside the modules, or numba's per-user cache where that is read-only), so only
the first training in an environment pays the 10-30 s. ``compile_cpu_kernels`` (the command
``gbflow compile``) pays it ahead, where a Docker build or an install script can: it trains a
few tiny models that take the common paths (whole trees and the level loop, dense, sparse and
categorical columns, multiclass, a line-searched objective, evaluation metrics, prediction).
"""
from __future__ import annotations

import logging
import time

import numpy as np

from . import api


def _tables(rng) -> list:
    """(name, X, y, params, extra train keyword arguments) of the warm-up trainings."""
    import pandas as pd
    import scipy.sparse as sp

    n = 600
    X = rng.standard_normal((n, 6)).astype(np.float32)
    X[rng.random(X.shape) < 0.05] = np.nan
    binary = (np.nan_to_num(X[:, 0]) + rng.standard_normal(n) > 0).astype(np.float32)
    classes = rng.integers(0, 3, n).astype(np.float32)
    one_hot = sp.random(n, 300, density=0.02, format="csr", random_state=0, dtype=np.float32)
    one_hot.data[:] = 1.0
    wide = sp.hstack([one_hot, sp.csr_matrix(X)]).tocsr()
    frame = pd.DataFrame(X, columns=[f"x{i}" for i in range(6)]).assign(
        colour=pd.Categorical(rng.choice(["red", "green", "blue", "grey", "black"], n)))
    depth = {"max_depth": 3}
    # 8 features fill their padded rows (a C-contiguous matrix), 6 do not: numba compiles the
    # kernels that read the bins once for each layout
    X8 = rng.standard_normal((n, 8)).astype(np.float32)
    binary_metrics = {**depth, "objective": "binary:logistic", "eval_metric": ["auc", "logloss"]}
    return [
        ("dense binary (whole trees), auc and logloss", X, binary, binary_metrics,
         {"evals": [((X, binary), "train"), ((X[::-1], binary[::-1]), "valid")]}),
        ("dense binary, rows filling their padding", X8, binary, binary_metrics,
         {"evals": [((X8, binary), "train"), ((X8[::-1], binary[::-1]), "valid")]}),
        ("dense, one sample a node (the level loop)", X, binary,
         {**depth, "objective": "binary:logistic", "colsample_bynode": 0.8}, {}),
        ("multiclass", X, classes, {**depth, "objective": "multi:softprob", "num_class": 3},
         {}),
        ("absolute error (leaves line-searched)", X, np.nan_to_num(X[:, 1]),
         {**depth, "objective": "reg:absoluteerror"}, {}),
        ("sparse columns (CSR)", wide, binary, {**depth, "objective": "binary:logistic"}, {}),
        ("categorical column", frame, binary, {**depth, "objective": "binary:logistic"}, {}),
    ]


def compile_cpu_kernels() -> float:
    """Train and predict with a few tiny models on the CPU so that numba compiles (or loads)
    the kernels they use; each step logged on the "gbflow" logger at INFO. Side effect: numba's
    disk cache holds the kernels afterwards. Returns the seconds taken (about 30 s on two cores
    the first time in an environment, 1-2 s once cached)."""
    log = logging.getLogger("gbflow")
    start = time.perf_counter()
    for name, X, y, params, extra in _tables(np.random.default_rng(0)):
        step = time.perf_counter()
        booster = api.train(X, y, {**params, "device": "cpu"}, num_boost_round=3,
                            verbose=False, **extra)
        booster.predict(X)
        log.info("compiled: %s (%.1f s)", name, time.perf_counter() - step)
    return time.perf_counter() - start
