"""Recorded level loops (``Backend.recorder``): the GPU's CUDA graphs replay the planned trees'
launches and give the models of launch-by-launch queuing; the recorder's policy (queued once,
recorded once, replayed after; a failed recording never retried)."""
from __future__ import annotations

import contextlib

import numpy as np
import pandas as pd
import pytest

import gbflow
from gbflow.backend import cuda_available
from gbflow.backend.base import Unrecorded
from gbflow.backend.cuda import GraphRecorder


class _FakeGraph:
    def __init__(self, log):
        self.log = log

    def launch(self, stream=None):
        self.log.append(("launch", stream))


class _FakeStream:
    def __init__(self, log, fail_end: bool):
        self.log, self.fail_end = log, fail_end

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def begin_capture(self):
        self.log.append("begin")

    def end_capture(self):
        self.log.append("end")
        if self.fail_end:
            raise RuntimeError("operation not permitted when stream is capturing")
        return _FakeGraph(self.log)


class _FakeCupy:
    """The few ``cupy.cuda`` calls the recorder makes, logged."""

    def __init__(self, fail_end: bool = False):
        self.log = []
        self.allocated = []
        outer = self

        class cuda:  # noqa: N801 - the module's name
            @staticmethod
            def Stream(non_blocking):  # noqa: N802 - CuPy's name
                return _FakeStream(outer.log, fail_end)

            @staticmethod
            def get_allocator():
                return lambda size: outer.allocated.append(size) or f"memory {size}"

            @staticmethod
            @contextlib.contextmanager
            def using_allocator(malloc):
                outer.malloc = malloc
                yield

            @staticmethod
            def get_current_stream():
                return "current"
        self.cuda = cuda


class _FakeKernels:
    @staticmethod
    @contextlib.contextmanager
    def holding(held):
        yield


def test_the_recorder_queues_once_records_once_then_replays():
    cupy = _FakeCupy()
    recorder = GraphRecorder(cupy, _FakeKernels())
    calls = []

    def queue():
        calls.append("queued")
        if "begin" in cupy.log and "end" not in cupy.log:
            cupy.malloc(64)  # an allocation while recording: held with the graph
        return ("result", len(calls))

    assert not recorder.holds("key")
    assert recorder.run("key", queue) == ("result", 1)  # first: queued as it is
    assert cupy.log == [] and not recorder.holds("key")
    assert recorder.run("key", queue) == ("result", 2)  # second: recorded, then launched
    assert cupy.log == ["begin", "end", ("launch", "current")]
    assert recorder.holds("key")
    assert recorder.run("key", queue) == ("result", 2)  # third: the recording's result
    assert calls == ["queued", "queued"]
    assert cupy.log[-1] == ("launch", "current") and len(cupy.log) == 4
    assert cupy.allocated == [64]
    assert recorder._graphs["key"][2] == ["memory 64"]
    assert recorder.run(None, queue) == ("result", 3)  # no key: never recorded
    recorder.clear()  # training over: the graph and its memory go
    assert not recorder.holds("key") and recorder.run("key", queue) == ("result", 4)


def test_the_recorder_keeps_its_newest_graphs_and_never_retries_a_failed_recording():
    cupy = _FakeCupy()
    recorder = GraphRecorder(cupy, _FakeKernels(), most=2)
    for key in ("a", "b", "c"):
        recorder.run(key, lambda: key)
        recorder.run(key, lambda: key)
    assert [recorder.holds(k) for k in "abc"] == [False, True, True]

    failing = _FakeCupy(fail_end=True)
    recorder = GraphRecorder(failing, _FakeKernels())
    calls = []
    for _ in range(4):
        assert recorder.run("key", lambda: calls.append(1) or len(calls)) == len(calls)
    # queued, a recording that failed (then queued as it is), then queued as it is twice
    assert len(calls) == 5 and failing.log == ["begin", "end"]
    assert not recorder.holds("key")


def test_host_backends_queue_every_time():
    recorder = gbflow.backend.get_backend("cpu").recorder()
    assert isinstance(recorder, Unrecorded) and not recorder.records
    assert [recorder.run("key", lambda: 7) for _ in range(3)] == [7, 7, 7]


def _table(n_rows: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n_rows, 6)).astype(np.float32)
    X[rng.random(X.shape) < 0.05] = np.nan
    Z = np.nan_to_num(X)
    signal = Z[:, 0] - 0.5 * Z[:, 1] + 0.3 * Z[:, 2] ** 2
    return pd.DataFrame(X, columns=[f"f{i}" for i in range(6)]), signal + rng.normal(size=n_rows)


_CASES = {
    "logistic": ({"objective": "binary:logistic"}, "binary"),
    "squared error (scales change)": ({"objective": "reg:squarederror"}, "regression"),
    "levels sampled": ({"objective": "binary:logistic", "colsample_bylevel": 0.5}, "binary"),
    "trees sampled": ({"objective": "binary:logistic", "colsample_bytree": 0.5,
                       "subsample": 0.7}, "binary"),
    "max_delta_step": ({"objective": "reg:squarederror", "max_delta_step": 0.3}, "regression"),
    "three classes": ({"objective": "multi:softprob", "num_class": 3}, "classes"),
}


@pytest.mark.gpu
@pytest.mark.parametrize("case", list(_CASES))
def test_recorded_trees_are_the_trees_queued_launch_by_launch(case, monkeypatch):
    if not cuda_available():
        pytest.skip("no CUDA GPU with CuPy on this machine")
    params, kind = _CASES[case]
    X, signal = _table(3000)
    y = {"binary": signal > 0, "regression": signal,
         "classes": np.digitize(signal, [-0.5, 0.7])}[kind].astype(np.float32)
    params = {**params, "device": "cuda", "max_depth": 4, "learning_rate": 0.3, "seed": 3}
    evals = [((X[:500], y[:500]), "valid")]
    models, timings = {}, {}
    for graphs in ("1", "0"):
        monkeypatch.setenv("GBFLOW_CUDA_GRAPHS", graphs)
        booster = gbflow.train(X, y, params=params, num_boost_round=12, evals=evals,
                               verbose=False)
        models[graphs], timings[graphs] = booster.to_json(), booster.timings
    assert models["1"] == models["0"]
    # the recorded run replayed trees; the other never did
    assert timings["1"].get("replayed levels", 0) > 0
    assert "replayed levels" not in timings["0"]


@pytest.mark.gpu
def test_recorded_trees_of_several_partitions_in_one_process(monkeypatch):
    if not cuda_available():
        pytest.skip("no CUDA GPU with CuPy on this machine")
    dd = pytest.importorskip("dask.dataframe")
    X, signal = _table(3000, seed=1)
    frame = dd.from_pandas(X.assign(y=(signal > 0).astype(np.float32)), npartitions=3)
    params = {"objective": "binary:logistic", "device": "cuda", "max_depth": 5}
    models, timings = {}, {}
    for graphs in ("1", "0"):
        monkeypatch.setenv("GBFLOW_CUDA_GRAPHS", graphs)
        booster = gbflow.train(frame, "y", params=params, num_boost_round=10, verbose=False)
        models[graphs], timings[graphs] = booster.to_json(), booster.timings
    assert models["1"] == models["0"]
    assert timings["1"].get("replayed levels", 0) > 0
