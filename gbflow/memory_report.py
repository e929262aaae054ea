"""The memory a training held per stage, and what holds it (``Booster.memory_report``)."""
from __future__ import annotations

import os
import threading
import time

from .stores import nbytes_of

# Seconds between readings: often enough for the sketch's and a level's short peaks on large
# data, rarely enough that the reading thread (it takes the GIL) costs the training nothing
# measurable. Every stage's start and end are read too, but for an edge that comes less than
# EDGE_GAP seconds after the last reading while every stage training is in has one already:
# small data's stages last microseconds (6,000 of them in 1,000 trees of sklearn's digits), and
# reading each edge (2 us) cost those trainings 10%.
INTERVAL = 0.005
EDGE_GAP = 0.001


class ResidentMemory:
    """This process's resident memory (Linux's /proc/self/statm), read through a descriptor
    kept open: a reading is a ``pread`` of about 1 us where opening the file each time took
    10 us, which every stage's start and end paid (6,000 times in 1,000 small trees).
    ``read`` gives None where it cannot be read. Side effect: one open file until ``close``."""

    def __init__(self):
        try:
            self._fd, self._page = os.open("/proc/self/statm", os.O_RDONLY), \
                os.sysconf("SC_PAGE_SIZE")
        except (OSError, ValueError, AttributeError):
            self._fd = None

    def read(self) -> int | None:
        if self._fd is None:
            return None
        try:
            return int(os.pread(self._fd, 128, 0).split()[1]) * self._page
        except (OSError, ValueError, IndexError):
            return None

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


class StageMemory:
    """Reads the device memory in use (``Backend.device_memory_reader``: the bytes CuPy's pool
    has given to arrays on the training's device; None on the CPU) and the process's resident
    memory every ``INTERVAL`` seconds in a thread, and at stages' starts and ends
    (``Timers.on_stage``: ``edge``), and keeps the largest of each per stage (every stage
    training is in at the reading; "other" between stages).

    Side effects: a daemon thread and an open file while watching (``stop`` ends both);
    ``timers.on_stage`` set."""

    def __init__(self, backend, timers, interval: float | None = None):
        self.backend, self.timers = backend, timers
        self.interval = INTERVAL if interval is None else interval
        self._lock = threading.Lock()
        self._device_bytes = backend.device_memory_reader()  # the training's device
        self._resident = ResidentMemory()
        self.device_start, self.host_start = self._device_bytes(), self._resident.read()
        self.device: dict = {}  # stage -> peak bytes in use
        self.host: dict = {}
        self._read_stages: set = set()  # the stages that have a reading
        self._last = time.perf_counter()  # the last reading's time
        self._stop = threading.Event()
        timers.on_stage = self.edge
        self._thread = threading.Thread(target=self._run, daemon=True, name="gbflow-memory")
        self._thread.start()

    def read(self) -> None:
        """One reading, counted for every stage training is in now (an outer stage's peak
        includes its inner ones'), or for "other" between stages."""
        stages = self.timers.current or ("other",)
        device, host = self._device_bytes(), self._resident.read()
        self._last = time.perf_counter()
        self._read_stages.update(stages)
        with self._lock:
            for table, value in ((self.device, device), (self.host, host)):
                if value is not None:
                    for name in stages:
                        table[name] = max(table.get(name, 0), value)

    def edge(self) -> None:
        """A stage's start or end: a reading, unless the last one was under ``EDGE_GAP``
        seconds ago and every stage training is in has one."""
        if time.perf_counter() - self._last < EDGE_GAP and \
                self._read_stages.issuperset(self.timers.current or ("other",)):
            return
        self.read()

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self.read()

    def stop(self) -> None:
        """End the watching (the thread, the stage hook, the file) with a last reading; a
        second call does nothing."""
        if self._stop.is_set():
            return
        self._stop.set()
        self._thread.join()
        self.timers.on_stage = None
        self.read()
        self._resident.close()

    def report(self, shardset, eval_sets: list) -> dict:
        """{"device": {"start", "peak", "by_stage"} (bytes in use; None on the CPU), "host":
        the same for resident memory, "held": bytes of what training kept after binning}:
        "bins" (the dense and sparse stores on the device, column copies included),
        "pages" (paged bins in host memory), "rows" (the training rows' labels, weights and
        margins), "evaluation" (the held-out sets' binned rows, labels, weights, margins)."""
        def table(start, peaks):
            if start is None or not peaks:
                return None
            return {"start": int(start), "peak": int(max(peaks.values())),
                    "by_stage": {k: int(v) for k, v in peaks.items()}}
        paged = bool(shardset.stores) and shardset.dense.paged
        stores = sum(store.nbytes(s) for store in shardset.stores
                     for s in range(len(shardset.shards)))
        dense_pages = sum(shardset.dense.nbytes(s) for s in range(len(shardset.shards))) \
            if paged else 0
        rows = sum(int(a.nbytes) for shard in shardset.part_shards
                   for a in (shard.label, shard.weight, shard.margin) if a is not None)
        evaluation = 0
        for s in eval_sets:
            if s.X is None:  # the training data itself
                continue
            evaluation += sum(nbytes_of(x.bins if hasattr(x, "bins") else x) for x in s.X)
            evaluation += sum(int(a.nbytes) for a in s.margin + s.labels + (s.weights or []))
        return {"device": table(self.device_start, self.device),
                "host": table(self.host_start, self.host),
                "held": {"bins": int(stores - dense_pages), "pages": int(dense_pages),
                         "rows": int(rows), "evaluation": int(evaluation)}}

