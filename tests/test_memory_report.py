"""``Booster.memory_report`` (issue F8 item 1): the memory a training held per stage, and what
holds it after binning."""
from __future__ import annotations

import threading

import numpy as np
import pytest

import gbflow
import gbflow.memory_report
from gbflow.binning import padded_width
from gbflow.memory_report import StageMemory
from gbflow.timers import Timers


def _data(n=20_000, n_features=10, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, n_features)).astype(np.float32)
    y = (X[:, 0] + rng.normal(size=n) > 0).astype(np.float64)
    return X, y


def test_what_training_holds_is_counted_by_store(device):
    X, y = _data()
    n, width = len(y), padded_width(10, 1)  # uint8 bins, 10 features padded to 16 bytes
    booster = gbflow.train(X, y, {"max_depth": 4, "device": device}, 5, verbose=False,
                           evals=[((X[:5000], y[:5000]), "held")])
    report = booster.memory_report
    # the rows' bins and their column-major copy; labels and margins (float64 each)
    assert report["held"] == {"bins": n * width + n * 10, "pages": 0, "rows": n * 16,
                              "evaluation": 5000 * (width + 16)}
    paged = gbflow.train(X, y, {"max_depth": 4, "device": device, "device_memory_limit": 50_000},
                         5, verbose=False)
    assert paged.memory_report["held"] == {"bins": 0, "pages": n * width, "rows": n * 16,
                                           "evaluation": 0}
    host = report["host"]
    # (the CPU's whole-tree grower adds each tree to the margins in its own call)
    assert {"quantize", "gradients", "whole trees" if device == "cpu" else "margins"} <= \
        set(host["by_stage"])
    assert host["peak"] == max(host["by_stage"].values()) >= host["start"] > 0
    if device == "cpu":
        assert report["device"] is None
    else:  # the bins are on the device while the trees grow
        stages = report["device"]["by_stage"]
        assert min(stages["gradients"], stages["margins"]) >= n * width


class CountingBackend:
    """A backend whose device holds ``in_use`` bytes, counting the readings."""
    in_use, readings = 10, 0

    def device_memory_reader(self):
        def read():
            self.readings += 1
            return self.in_use
        return read


def test_readings_go_to_the_innermost_stage(monkeypatch):
    monkeypatch.setattr(gbflow.memory_report, "EDGE_GAP", 0.0)  # every edge read
    backend, timers = CountingBackend(), Timers()
    memory = StageMemory(backend, timers, interval=60.0)  # readings at stage edges only
    with timers("outer"):
        backend.in_use = 300
        with timers("inner"):
            backend.in_use = 700
        backend.in_use = 50
    memory.stop()
    # "inner" started at 300 and ended at 700 (inside "outer" too); "outer" read 10 at its
    # start, 50 at its end
    assert memory.device == {"outer": 700, "inner": 700, "other": 50}
    assert memory.device_start == 10 and timers.on_stage is None


def test_short_stages_are_read_once_each(monkeypatch):
    """Edges coming fast after a reading are read only for a stage without a reading yet:
    small data's microsecond stages would otherwise pay a reading each."""
    monkeypatch.setattr(gbflow.memory_report, "EDGE_GAP", 3600.0)
    backend, timers = CountingBackend(), Timers()
    memory = StageMemory(backend, timers, interval=3600.0)  # no thread readings
    for _ in range(100):
        with timers("gradients"):
            pass
        with timers("trees"):
            backend.in_use += 1
    memory.stop()
    # the start, each stage's first edge, the stop
    assert backend.readings == 4
    assert set(memory.device) == {"gradients", "trees", "other"}
    assert memory.device["other"] == 110  # the stop reads the end whatever the gap


def test_the_reading_thread_ends_when_training_fails():
    X, y = _data(n=2000)

    class Stop(gbflow.callback.TrainingCallback):
        def after_iteration(self, model, epoch, evals_log):
            raise RuntimeError("stop here")

    with pytest.raises(RuntimeError, match="stop here"):
        gbflow.train(X, y, {"max_depth": 3}, 5, verbose=False, callbacks=[Stop()])
    assert not [t for t in threading.enumerate() if t.name == "gbflow-memory"]


def test_only_rmms_default_allocator_is_bypassed(monkeypatch):
    """In-process GPU training leaves the process's allocator alone unless it is RMM's over
    RMM's default resource (a cudaMalloc per array, what ``import cudf`` sets): an RMM pool or
    managed memory the user set up, and any other allocator, are kept. (The decision alone:
    runs without a GPU, with a stand-in ``rmm`` module.)"""
    import sys
    import types

    from gbflow.backend.cuda import _rmm_default

    def rmm_cupy_allocator(size):
        return size
    rmm_cupy_allocator.__module__ = "rmm.allocators.cupy"

    def other_allocator(size):
        return size

    resource = {"current": None}
    fake = types.SimpleNamespace(mr=types.SimpleNamespace(
        get_current_device_resource=lambda: resource["current"]))
    monkeypatch.setitem(sys.modules, "rmm", fake)
    for name, bypassed in (("CudaMemoryResource", True), ("PoolMemoryResource", False),
                           ("ManagedMemoryResource", False), ("CudaAsyncMemoryResource", False)):
        resource["current"] = type(name, (), {})()
        assert _rmm_default(rmm_cupy_allocator) is bypassed, name
        assert not _rmm_default(other_allocator)
        # CuPy's default, its pool's malloc, is a built-in method: __module__ is None
        assert not _rmm_default([].append)
    monkeypatch.delitem(sys.modules, "rmm")
    assert not _rmm_default(rmm_cupy_allocator)  # no rmm imported: nothing to judge
