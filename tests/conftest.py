"""Shared fixtures: the device under test and small synthetic tables."""
from __future__ import annotations

import hashlib
import json
import os

import numpy as np
import pandas as pd
import pytest

from gbflow.backend import cpu_kernels, cuda_available


@pytest.fixture(params=["cpu", pytest.param("cuda", marks=pytest.mark.gpu)])
def device(request):
    """Each device test runs on the CPU, and on the GPU where one is present (marked ``gpu``)."""
    if request.param == "cuda" and not cuda_available():
        pytest.skip("no CUDA GPU with CuPy on this machine")
    return request.param


class _OnDevice:
    """A kernel module called with NumPy arrays: each array argument (positional or keyword) is
    copied to the GPU, the kernel runs there, and every array argument (in-place outputs) and
    result is copied back. A result that is one of the argument copies (an ``out`` returned)
    comes back as the caller's own array, so tests can check that ``out`` is returned."""

    def __init__(self, module):
        self.module = module

    def __getattr__(self, name):
        import cupy
        function = getattr(self.module, name)

        def call(*args, **kwargs):
            def device(a):
                if not isinstance(a, np.ndarray):
                    return a
                if a.ndim == 2 and not a.flags.c_contiguous and a.T.flags.c_contiguous:
                    return cupy.asarray(a.T).T  # a transposed view stays one on the device
                return cupy.asarray(a)

            on_device = [device(a) for a in args]
            kw_device = {k: device(v) for k, v in kwargs.items()}
            result = function(*on_device, **kw_device)
            pairs = [(a, d) for a, d in zip(list(args) + list(kwargs.values()),
                                            on_device + list(kw_device.values()))
                     if isinstance(a, np.ndarray)]
            for a, d in pairs:
                a[...] = cupy.asnumpy(d)

            def host(value):
                if isinstance(value, tuple):
                    return tuple(host(v) for v in value)
                for a, d in pairs:
                    if value is d:
                        return a
                return cupy.asnumpy(value) if isinstance(value, cupy.ndarray) else value
            return host(result)
        return call


@pytest.fixture(params=["numba", pytest.param("cuda", marks=pytest.mark.gpu)])
def kernels(request):
    """The fast kernels under test (compared with the NumPy twins): numba on the CPU, and CUDA
    where a GPU is present (called through ``_OnDevice`` with host arrays)."""
    if request.param == "numba":
        return cpu_kernels
    if not cuda_available():
        pytest.skip("no CUDA GPU with CuPy on this machine")
    from gbflow.backend import cuda_kernels
    return _OnDevice(cuda_kernels)


def make_table(n_rows=3000, n_features=6, task="regression", seed=0, missing=0.05):
    """A DataFrame with a nonlinear target, some missing values and a low-cardinality column."""
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n_rows, n_features)).astype(np.float32)
    X[:, 1] = rng.integers(0, 4, size=n_rows)  # low cardinality
    signal = 1.5 * X[:, 0] + np.sin(2 * X[:, 2]) + 0.7 * (X[:, 1] == 2) + 0.5 * X[:, 3] * X[:, 0]
    if missing:
        X[rng.random(n_rows) < missing, 3] = np.nan
        X[rng.random(n_rows) < missing, 0] = np.nan
    df = pd.DataFrame(X, columns=[f"x{i}" for i in range(n_features)])
    df["y"] = label_from_signal(rng, signal, task, noise=0.3, class_noise=0.5, edges=(-0.8, 0.8))
    return df


def present_or_missing(n_rows=20_000, seed=0, share=0.3, noise=0.1):
    """The one-hot bug's table (issue F15): X (n, 2) float32 whose column 0 is 1.0 or missing
    (NaN) and column 1 noise, and a binary label that is "column 0 present" flipped for a
    ``noise`` share of the rows. The only useful split is present versus missing."""
    rng = np.random.default_rng(seed)
    present = rng.random(n_rows) < share
    x = np.where(present, 1.0, np.nan).astype(np.float32)
    X = np.stack([x, rng.standard_normal(n_rows).astype(np.float32)], 1)
    y = (present ^ (rng.random(n_rows) < noise)).astype(np.float64)
    return X, y


def label_from_signal(rng, signal, task, noise, class_noise, edges):
    """A float64 label from a (n,) signal: signal + noise (regression), a Bernoulli draw of
    sigmoid(signal) (binary), or the signal plus noise binned at ``edges`` into classes."""
    n = len(signal)
    if task == "regression":
        return signal + noise * rng.normal(size=n)
    if task == "binary":
        return (rng.random(n) < 1 / (1 + np.exp(-signal))).astype(np.float64)
    return np.digitize(signal + class_noise * rng.normal(size=n), list(edges)).astype(np.float64)


# ---------------------------------------------------------------------------------------------
# Model-file record: with GBFLOW_RECORD_MODELS=path, every Booster a test makes (trained here,
# loaded, or unpickled from a Dask worker) has the SHA-256 of its model file recorded under the
# test's id, and the record is written to ``path`` (JSON) when the session ends. Two records,
# from the code before and after a change, show which tests' models the change altered
# (``python tests/compare_models.py before.json after.json``).
_RECORD_PATH = os.environ.get("GBFLOW_RECORD_MODELS")
# GBFLOW_RECORD_IGNORE=name,name: parameters left out of the recorded files (a change that adds a
# parameter writes it, at its default, into every file: its models are compared without it)
_RECORD_IGNORE = [n for n in os.environ.get("GBFLOW_RECORD_IGNORE", "").split(",") if n]
_recorded: dict = {}
_current_test = ["(collection)"]


def same_model_everywhere(device, df, params: dict, rounds: int = 8):
    """Train ``params`` on df's "y" and assert the engine's promises: the same model on 1 or 5
    shards (one of a single row), with every feature in the sparse store, and (CPU) with the
    NumPy twins; training margins equal predicted ones. Returns the one-shard booster."""
    from gbflow import boosting, inputs
    from gbflow.backend import get_backend, reference_kernels
    from gbflow.params import make_params
    backend = get_backend(device)

    def fit(parts, extra=None):
        return boosting.fit(backend, parts, make_params({**params, **(extra or {})}), rounds,
                            verbose=False, keep_training_margins=True)
    one = fit([inputs.load(df, "y")])
    cut = [0, 1, 700, 701, 2000, len(df)]
    parts = [inputs.load(df.iloc[a:b], "y") for a, b in zip(cut[:-1], cut[1:])]
    assert fit(parts).to_json() == one.to_json()
    sparse = fit([inputs.load(df, "y")], {"sparse_threshold": 0.0})
    assert [t.to_dict() for t in sparse.trees] == [t.to_dict() for t in one.trees]
    predicted = np.asarray(one.predict(df, output_margin=True)).reshape(len(df), -1)
    assert np.array_equal(predicted, one.training_margins[0])
    if device == "cpu":
        with reference_kernels():
            assert fit([inputs.load(df, "y")]).to_json() == one.to_json()
    return one


def _record_booster(booster) -> None:
    try:
        text = booster.to_json()
        if _RECORD_IGNORE:
            model = json.loads(text)
            for name in _RECORD_IGNORE:
                model["params"].pop(name, None)
            text = json.dumps(model)
    except Exception as e:  # a half-made booster (a test of a bad file): recorded as such
        text = f"unwritable: {type(e).__name__}"
    digest = hashlib.sha256(text.encode()).hexdigest()
    _recorded.setdefault(_current_test[0], []).append(digest)


if _RECORD_PATH:
    from gbflow.booster import Booster as _Booster

    _booster_init = _Booster.__init__

    def _recording_init(self, *args, **kwargs):
        _booster_init(self, *args, **kwargs)
        _record_booster(self)

    def _recording_setstate(self, state):
        self.__dict__.update(state)
        _record_booster(self)

    _Booster.__init__ = _recording_init
    _Booster.__setstate__ = _recording_setstate


@pytest.fixture(autouse=True)
def _name_recorded_models(request):
    _current_test[0] = request.node.nodeid
    yield
    _current_test[0] = "(between tests)"


def pytest_sessionfinish(session, exitstatus):
    if _RECORD_PATH:
        record = {test: sorted(digests) for test, digests in sorted(_recorded.items())}
        with open(_RECORD_PATH, "w") as f:
            json.dump(record, f, indent=1)


def pytest_terminal_summary(terminalreporter):
    """Skipped tests counted by reason, one line each (-ra listed every location)."""
    reasons: dict = {}
    for report in terminalreporter.stats.get("skipped", []):
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
        reason = reason.removeprefix("Skipped: ")
        reasons[reason] = reasons.get(reason, 0) + 1
    if reasons:
        terminalreporter.section("skipped, by reason")
        for reason, count in sorted(reasons.items(), key=lambda kv: -kv[1]):
            terminalreporter.line(f"{count:5d}  {reason}")


def record_backends(monkeypatch):
    """The names of the backends ``gbflow.train`` picks from now on, in a list."""
    import gbflow.backend as backends
    from gbflow import api
    chosen = []

    def recording(*args, **kwargs):
        backend = backends.get_backend(*args, **kwargs)
        chosen.append(backend.name)
        return backend

    monkeypatch.setattr(api, "get_backend", recording)
    return chosen

