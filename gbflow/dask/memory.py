"""A training task's memory: what it will need (checked against the workers' limits before
training), resident-memory samples, and glibc's settings while training."""
from __future__ import annotations

import contextlib
import ctypes
import os
import platform
import resource
import sys
import threading


class MemoryWatch:
    """Resident memory of this process: now, and the peak while watching (sampled every 25 ms:
    often enough to see the sketch's short peak, rarely enough not to disturb the kernels'
    threads on a busy machine)."""

    def __init__(self):
        import psutil  # a dependency of distributed
        self._process = psutil.Process()
        self._lock = threading.Lock()
        self.peak = 0
        self.start = self.now()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="gbflow-memory")
        self._thread.start()

    def now(self) -> int:
        """The resident memory now; every reading counts towards the peak (under a lock: the
        sampling thread and the training thread both read)."""
        rss = int(self._process.memory_info().rss)
        with self._lock:
            self.peak = max(self.peak, rss)
        return rss

    def _run(self):
        while not self._stop.wait(0.025):
            self.now()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()
        self.now()


def lifetime_peak_rss() -> int:
    # ru_maxrss is in KiB on Linux, bytes on macOS.
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return int(peak if sys.platform == "darwin" else peak * 1024)


# Bytes per training row besides its features: label, weight, row number, float64 margins and
# float32 gradients and hessians per output, their int64 fixed-point copies.
_ROW_BYTES, _ROW_BYTES_PER_OUTPUT = 24, 8 + 8 + 16


def training_bytes(rows: int, eval_rows: int, n_features: int, n_groups: int,
                   bin_bytes: int) -> int:
    """A lower bound of the host memory a CPU training task adds to its worker: the float32
    matrix of its rows (the raw partitions are in memory already) and their bins, the per-row
    arrays, and its evaluation rows (float32, then bins). Histograms and kernel buffers come on
    top: the bound errs on the side of training."""
    per_row = n_features * (4 + bin_bytes) + _ROW_BYTES + _ROW_BYTES_PER_OUTPUT * n_groups
    return int(rows * per_row + eval_rows * (n_features * (4 + bin_bytes) + 8 * n_groups))


def check_worker_memory(needs: dict, workers: dict, pause_fraction) -> None:
    """MemoryError before training when a worker's task needs more than the worker has below
    Dask's pause threshold (``distributed.worker.memory.pause`` of ``memory_limit``, less what
    the worker holds now): Dask would pause it, and training would wait. needs: {address:
    (bytes, rows)}; workers: the scheduler's worker info. Workers without a memory limit, or
    with pausing off, are not checked."""
    short = []
    for address, (need, rows) in needs.items():
        info = workers.get(address, {})
        room = _room(info, pause_fraction)
        if room is not None and need > room:
            limit, used = info["memory_limit"], int(info.get("metrics", {}).get("memory", 0))
            short.append(f"{address} needs about {_mb(need)} for its {rows:,} rows but has "
                         f"{_mb(max(room, 0))} (memory_limit {_mb(limit)} x pause fraction "
                         f"{float(pause_fraction):g} - {_mb(used)} in use)")
    if short:
        raise MemoryError("not enough worker memory to train: " + "; ".join(short) + ". Dask "
                          "would pause these workers and training would wait: give the workers "
                          "more memory (memory_limit), the data more workers, or fewer "
                          "features")


def room_to_keep(needs: dict, workers: dict, pause_fraction) -> bool:
    """Whether every training worker can keep its raw partitions while it trains (``kept``):
    its task's need (``needs`` as ``check_worker_memory``'s) at most half of what it has below
    Dask's pause threshold, the other half for the raw partitions beside the bins and what the
    estimate leaves out. A worker without a memory limit, or with pausing off, gives no room
    to judge: the partitions are not kept (they go once copied, as before restarts kept
    them)."""
    rooms = [(_room(workers.get(a, {}), pause_fraction), need) for a, (need, _) in needs.items()]
    return all(room is not None and 2 * need <= room for room, need in rooms)


def _room(info: dict, pause_fraction) -> int | None:
    """Bytes a worker (the scheduler's info) has below Dask's pause threshold (``memory_limit``
    x ``pause_fraction`` less what it holds now); None without a limit or with pausing off."""
    limit = info.get("memory_limit") or 0
    if not limit or not pause_fraction:
        return None
    return int(limit * float(pause_fraction)) - int(info.get("metrics", {}).get("memory", 0))


def _mb(n: int) -> str:
    return f"{n / 2**20:,.0f} MiB"


# glibc's mallopt parameters (malloc.h)
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3
_GLIBC_DEFAULT_MMAP_THRESHOLD = 128 * 1024


@contextlib.contextmanager
def malloc_for_training():
    """Let glibc keep freed memory for reuse while training, in a Dask worker process.

    Dask's nanny starts workers with MALLOC_TRIM_THRESHOLD_=65536, which also freezes glibc's mmap
    threshold at 128 KiB: every temporary array above that (gradients, histograms, the kernels'
    per-thread buffers) is then mapped and unmapped on each use, and its pages faulted in again,
    which doubled training time in a worker (benchmarks/cpu_dask.py). While the task runs, glibc
    gets thresholds like the ones it would reach by itself (32 MiB mmap, 64 MiB trim); afterwards
    Dask's settings come back and the free memory is returned to the system (malloc_trim).
    Nothing happens outside glibc or when MALLOC_TRIM_THRESHOLD_ is not set.
    """
    trim = os.environ.get("MALLOC_TRIM_THRESHOLD_")
    libc = None
    if trim is not None and platform.libc_ver()[0] == "glibc":
        try:
            libc = ctypes.CDLL("libc.so.6")
        except OSError:
            libc = None
    if libc is None:
        yield
        return
    libc.mallopt(_M_MMAP_THRESHOLD, 32 * 2**20)
    libc.mallopt(_M_TRIM_THRESHOLD, 64 * 2**20)
    try:
        yield
    finally:
        libc.mallopt(_M_TRIM_THRESHOLD, int(trim))
        libc.mallopt(_M_MMAP_THRESHOLD, _GLIBC_DEFAULT_MMAP_THRESHOLD)
        libc.malloc_trim(0)
