"""Compilation kept out of the stage timers and announced while it runs; `gbflow compile`."""
from __future__ import annotations

import logging
import time

import numba
import numpy as np
import pytest

from gbflow.backend import compiling
from gbflow.timers import Timers


def test_a_compile_inside_stages_is_the_compile_entry_not_the_stages():
    timers = Timers()
    with timers("tree"):
        with timers("splits"):
            with compiling.compiling():
                time.sleep(0.2)
        time.sleep(0.05)
    assert timers.seconds["compile"] >= 0.2  # once, though two stages held it
    assert timers.seconds["compile"] < 0.4
    assert timers.seconds["splits"] < 0.05
    assert 0.05 <= timers.seconds["tree"] < 0.2
    with timers("gradients"):
        time.sleep(0.01)
    assert timers.seconds["compile"] < 0.4  # no compile, nothing added


def test_nested_compiles_count_once_and_threads_apart():
    import threading
    before = compiling.compile_seconds()
    with compiling.compiling():
        with compiling.compiling():
            time.sleep(0.1)
    spent = compiling.compile_seconds() - before
    assert 0.1 <= spent < 0.2
    other = []
    thread = threading.Thread(target=lambda: other.append(compiling.compile_seconds()))
    thread.start()
    thread.join()
    assert other == [0.0]  # another thread's stages are not charged for this one's compiles


def test_a_long_compile_is_announced_once_while_it_runs(monkeypatch, caplog):
    monkeypatch.setattr(compiling, "ANNOUNCE_AFTER", 0.05)
    message = f"compiling the test's kernels {time.time()}"
    with caplog.at_level(logging.WARNING, logger="gbflow"):
        with compiling.compiling(message):
            pass  # a disk-cache load: too quick to announce
        assert caplog.records == []
        with compiling.compiling(message):
            time.sleep(0.3)
            assert [r.getMessage() for r in caplog.records] == [message]  # during, not after
        with compiling.compiling(message):
            time.sleep(0.1)
    assert len(caplog.records) == 1


def test_numba_compiling_gbflows_kernels_is_announced_and_others_are_not(monkeypatch, caplog):
    """The CPU's announcement comes from numba's own compile events: a GPU training that
    only loads (or never uses) the CPU kernels says nothing."""
    compiling.watch_numba()
    monkeypatch.setattr(compiling, "ANNOUNCE_AFTER", 0.0)
    monkeypatch.setattr(compiling, "_announced", set())

    def user_function(x):
        return x + 1

    def gbflow_kernel(x):
        return x + 2

    gbflow_kernel.__module__ = "gbflow.backend.cpu_kernels"
    with caplog.at_level(logging.WARNING, logger="gbflow"):
        assert numba.njit(user_function)(1) == 2
        assert caplog.records == []
        assert numba.njit(gbflow_kernel)(1) == 3
        assert numba.njit(lambda x: x * 3)(1) == 3
    assert [r.getMessage() for r in caplog.records] == [compiling.CPU_NOTE]


def test_numbas_compiles_are_counted():
    compiling.watch_numba()

    @numba.njit(cache=False)
    def fresh(x):  # a new function: numba compiles it at its first call
        return x * 2 + 1

    timers = Timers()
    with timers("gradients"):
        assert fresh(np.float64(2.0)) == 5.0
    assert timers.seconds["compile"] > 0
    assert timers.seconds["gradients"] < timers.seconds["compile"]


def test_compile_refuses_an_unknown_device_before_any_work():
    from gbflow.warmup import compile_kernels
    with pytest.raises(ValueError, match="'tpu'"):
        compile_kernels("tpu")


def test_an_end_whose_start_came_before_the_listener_is_ignored():
    """numba's listener, registered while another thread is inside a compile, sees that
    thread's end without its start: nothing may fail, and its later compiles still count."""
    import threading
    errors, spent = [], []

    def thread():
        try:
            compiling._leave()
            before = compiling.compile_seconds()
            with compiling.compiling():
                time.sleep(0.05)
            spent.append(compiling.compile_seconds() - before)
        except Exception as error:  # noqa: BLE001 - the test reports any failure
            errors.append(error)

    worker = threading.Thread(target=thread)
    worker.start()
    worker.join()
    assert errors == [] and spent[0] >= 0.05
