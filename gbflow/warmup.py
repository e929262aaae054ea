"""Compiling the kernels ahead of the first training: small trainings that fill the disk caches.

numba compiles gbflow's CPU kernels at their first use and keeps them in its disk cache
(``__pycache__`` beside the modules, or numba's per-user cache where that is read-only), so only
the first training in an environment pays the 10-30 s; CuPy does the same for the CUDA kernels
(NVRTC, its kernel cache in ``~/.cupy/kernel_cache`` or ``CUPY_CACHE_DIR``; about 5-20 s once per
GPU architecture). ``compile_kernels`` (the command ``gbflow compile [--device cuda]``) pays it
ahead, where a Docker build or an install script can: it trains a few tiny models that take the
common paths (whole trees and the level loop, dense, sparse and categorical columns,
multiclass, a line-searched objective, evaluation metrics, prediction), and runs once the
kernels that only large data takes (a large evaluation set's, the features' check, the
quantile sketch's passes).
"""
from __future__ import annotations

import logging
import time

import numpy as np

from . import api
from .backend import get_backend, sketch_tallies


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
    binary_metrics = {**depth, "objective": "binary:logistic", "eval_metric": ["auc", "logloss"]}
    return [
        ("dense binary (whole trees), auc and logloss", X, binary, binary_metrics,
         {"evals": [((X, binary), "train"), ((X[::-1], binary[::-1]), "valid")]}),
        ("dense, one sample a node (the level loop)", X, binary,
         {**depth, "objective": "binary:logistic", "colsample_bynode": 0.8}, {}),
        ("multiclass", X, classes, {**depth, "objective": "multi:softprob", "num_class": 3},
         {}),
        ("absolute error (leaves line-searched)", X, np.nan_to_num(X[:, 1]),
         {**depth, "objective": "reg:absoluteerror"}, {}),
        ("sparse columns (CSR)", wide, binary, {**depth, "objective": "binary:logistic"}, {}),
        ("categorical column", frame, binary, {**depth, "objective": "binary:logistic"}, {}),
    ]


def _gpu_tables(rng) -> list:
    """The GPU's extra warm-up trainings: rows enough for the quantile sketch's passes (fewer
    values take the direct path), and 16-bit bins (``max_bin`` above 256)."""
    from .sketch.direct import DIRECT_VALUES

    X = rng.standard_normal((DIRECT_VALUES // 4 + 1, 4)).astype(np.float32)
    y = (X[:, 0] + rng.standard_normal(len(X)) > 0).astype(np.float32)
    params = {"max_depth": 3, "objective": "binary:logistic"}
    return [("dense binary, sketched", X, y, params, {}),
            ("dense binary, 16-bit bins", X[:600], y[:600], {**params, "max_bin": 1024}, {})]


def compile_kernels(device: str = "cpu") -> float:
    """Train and predict with a few tiny models on ``device`` ("cpu" or "cuda") so that numba
    or CuPy compiles (or loads) the kernels they use; each step logged on the "gbflow" logger
    at INFO. Side effect: numba's (CPU) or CuPy's (CUDA) disk cache holds the kernels
    afterwards. Returns the seconds taken (on the CPU about 30 s on two cores the first time in
    an environment, 1-2 s once cached)."""
    if device not in ("cpu", "cuda"):
        raise ValueError(f"compile: device must be 'cpu' or 'cuda', got {device!r}")
    log = logging.getLogger("gbflow")
    start = time.perf_counter()
    rng = np.random.default_rng(0)
    tables = _tables(rng) + (_gpu_tables(rng) if device == "cuda" else [])
    for name, X, y, params, extra in tables:
        step = time.perf_counter()
        booster = api.train(X, y, {**params, "device": device}, num_boost_round=3,
                            verbose=False, **extra)
        if device == "cpu":
            booster.predict(X)
        elif isinstance(X, np.ndarray):  # predicted on the data's device: put it on the GPU
            booster.predict(get_backend("cuda").xp.asarray(X))
        log.info("compiled: %s (%.1f s)", name, time.perf_counter() - step)
    step = time.perf_counter()
    _large_data_kernels(get_backend(device), rng)
    log.info("compiled: large data's kernels (evaluation, checks, sketch) (%.1f s)",
             time.perf_counter() - step)
    return time.perf_counter() - start


def _large_data_kernels(backend, rng) -> None:
    """Run once what only data larger than the tiny trainings' takes: the sigmoid, auc's
    prediction keys and buckets and binary:logistic's gradients on numba's threads (the
    CPU's, from 2**15 rows; the sigmoid where the machine's exp allows), the dense buckets'
    tally (from 2**16 rows), the features' check for infinities (from 2**15 rows), and the
    quantile sketch's block tallies (from 2**22 values; on whole rows and on a group of a
    wider matrix's columns). Multi-class auc's strided class columns compile at their first
    use."""
    from .metrics import tallies
    xp, kernels = backend.xp, backend.kernels
    n = tallies.EXACT_ROWS + 1
    probability = kernels.sigmoid(xp.asarray(rng.standard_normal(n)), xp.empty(n))
    keys = kernels.prediction_keys(probability)
    low = keys.min()
    buckets = kernels.key_buckets(keys, low, keys.max() - low + 1, tallies.DENSE_BITS)
    label = xp.asarray((rng.random(n) < 0.5).astype(np.float64))
    kernels.auc_bucket_words(buckets, label, None, 1.0, 1 << tallies.DENSE_BITS)
    kernels.logistic_gradients(xp.asarray(rng.standard_normal(n)), label, None)
    kernels.any_infinite(xp.zeros((1 << 15, 2), dtype=np.float32))  # the features' check
    matrix = xp.asarray(rng.standard_normal((64, 4)).astype(np.float32))
    weight = xp.ones((64, 1))
    for block in (matrix, matrix[:, 1:3]):
        g = block.shape[1]
        feature = xp.arange(g)[None, :]
        slot_of = xp.full(g * sketch_tallies.N_BUCKETS, -1, dtype=xp.int32)
        slot_of[xp.arange(g) * sketch_tallies.N_BUCKETS] = xp.arange(g, dtype=xp.int32)
        for w in (None, weight):
            kernels.sketch_counts(block, feature, 0, w, None,
                                  xp.zeros(g * sketch_tallies.N_BUCKETS, dtype=xp.int64))
            kernels.sketch_counts(block, feature, 0, w, slot_of,
                                  xp.zeros(g * sketch_tallies.N_SUB, dtype=xp.int64))
        kernels.sketch_selected(block, feature, 0, slot_of,
                                xp.ones(g * sketch_tallies.N_SUB, dtype=bool),
                                xp.empty(block.shape, dtype=bool))
