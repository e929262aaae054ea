"""Time spent compiling kernels (numba's, CUDA modules), kept out of the stage timers."""
from __future__ import annotations

import contextlib
import logging
import threading
import time

_local = threading.local()  # per thread: kernels compile on the thread that first calls them
_lock = threading.Lock()
_announced: set = set()  # the announcements made (once per process each)
_spent: dict = {}  # announcement -> seconds compiled under it so far, in every thread

# A compile announces itself once the compiles under its message have taken this long (a real
# compile: loading a kernel from a disk cache takes milliseconds).
ANNOUNCE_AFTER = 1.0
# Blocks shorter than this are disk-cache loads, not compiles: they do not bring the
# announcement nearer (a long-lived process loads many kernels over its life).
_LOAD_SECONDS = 0.02
CPU_NOTE = ("gbflow: compiling the CPU kernels for this machine (first use after installing; "
            "about 10-45 s, cached on disk for later runs; `gbflow compile` does it ahead)")


def compile_seconds() -> float:
    """Seconds this thread has spent compiling kernels since the process started: numba's
    compilations and waits on its compiler lock (a disk-cache load holds it too: milliseconds),
    and CUDA modules (gbflow's and CuPy's: NVRTC, or CuPy's disk cache). ``Timers`` subtracts
    what a stage spent here from that stage."""
    return getattr(_local, "seconds", 0.0)


def _announce(message: str) -> None:
    with _lock:
        if message in _announced:
            return
        _announced.add(message)
    logging.getLogger("gbflow").warning(message)


def _enter(announcement: str | None) -> None:
    depth = getattr(_local, "depth", 0)
    if depth == 0:
        _local.start, _local.announcement, _local.timer = time.perf_counter(), None, None
    _local.depth = depth + 1
    # the first block that names an announcement arms it, nested or not (numba's compile
    # event comes inside its compiler-lock event, which names none)
    if announcement is None or _local.announcement is not None:
        return
    _local.announcement = announcement
    if announcement in _announced:
        return
    remaining = ANNOUNCE_AFTER - _spent.get(announcement, 0.0)
    if remaining <= 0:
        _announce(announcement)
        return
    timer = threading.Timer(remaining, _announce, (announcement,))  # said while it compiles
    timer.daemon = True
    try:
        timer.start()
    except RuntimeError:  # no thread to spare: say it now rather than not at all
        _announce(announcement)
    else:
        _local.timer = timer


def _leave() -> None:
    depth = getattr(_local, "depth", 0)
    if depth <= 0:  # an end whose start came before watch_numba registered its listener
        return
    _local.depth = depth - 1
    if depth > 1:  # nested compilations (a kernel's callees) count once
        return
    seconds = time.perf_counter() - _local.start
    _local.seconds = compile_seconds() + seconds
    if _local.timer is not None:
        _local.timer.cancel()
    if _local.announcement is not None and seconds >= _LOAD_SECONDS:
        with _lock:
            _spent[_local.announcement] = _spent.get(_local.announcement, 0.0) + seconds


@contextlib.contextmanager
def compiling(announcement: str | None = None):
    """Count the block as compilation in this thread's ``compile_seconds``. Once the blocks
    under ``announcement`` have taken ``ANNOUNCE_AFTER`` seconds in all (counting only blocks
    of at least ``_LOAD_SECONDS``: real compiles, not disk-cache loads), log it at WARNING on
    the "gbflow" logger, once per process: from a timer thread when that moment falls inside
    a block, so the line appears while it compiles."""
    _enter(announcement)
    try:
        yield
    finally:
        _leave()


def watch_numba() -> None:
    """Count numba's compilations in ``compile_seconds`` (its "numba:compile" events, raised
    on the compiling thread around each compile that its disk cache did not answer, and its
    "numba:compiler_lock" events: a thread waiting for another's compile waits on that lock),
    and announce gbflow's own (``CPU_NOTE``). Once per process; side effect: listeners
    registered with numba."""
    with _lock:
        if getattr(watch_numba, "done", False):
            return
        watch_numba.done = True
    from numba.core import event

    class _Compiles(event.Listener):
        def on_start(self, event):
            function = getattr(event.data.get("dispatcher"), "py_func", None)
            ours = getattr(function, "__module__", "").startswith("gbflow.")
            _enter(CPU_NOTE if ours else None)

        def on_end(self, _event):
            _leave()

    class _LockHeld(event.Listener):
        def on_start(self, _event):
            _enter(None)

        def on_end(self, _event):
            _leave()

    event.register("numba:compile", _Compiles())
    event.register("numba:compiler_lock", _LockHeld())
