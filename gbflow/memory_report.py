"""The memory a training held per stage, and what holds it (``Booster.memory_report``)."""
from __future__ import annotations

import os
import threading

from .stores import nbytes_of

# Seconds between readings: often enough for the sketch's and a level's short peaks on large
# data, rarely enough that the reading thread (it takes the GIL) costs the training nothing
# measurable. Every stage's start and end are read too.
INTERVAL = 0.005


def resident_bytes() -> int | None:
    """This process's resident memory now (Linux's /proc), or None where it cannot be read."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError, AttributeError):
        return None


class StageMemory:
    """Reads the device memory in use (``Backend.device_memory_reader``: the bytes CuPy's pool
    has given to arrays on the training's device; None on the CPU) and the process's resident
    memory every ``INTERVAL`` seconds in a thread, and at every stage's start and end
    (``Timers.on_stage``), and keeps the
    largest of each per stage (every stage training is in at the reading; "other" between
    stages).

    Side effects: a daemon thread while watching (``stop`` ends it); ``timers.on_stage`` set."""

    def __init__(self, backend, timers, interval: float | None = None):
        self.backend, self.timers = backend, timers
        self.interval = INTERVAL if interval is None else interval
        self._lock = threading.Lock()
        self._device_bytes = backend.device_memory_reader()  # the training's device
        self.device_start, self.host_start = self._device_bytes(), resident_bytes()
        self.device: dict = {}  # stage -> peak bytes in use
        self.host: dict = {}
        self._stop = threading.Event()
        timers.on_stage = self.read
        self._thread = threading.Thread(target=self._run, daemon=True, name="gbflow-memory")
        self._thread.start()

    def read(self) -> None:
        """One reading, counted for every stage training is in now (an outer stage's peak
        includes its inner ones'), or for "other" between stages."""
        stages = self.timers.current or ("other",)
        device, host = self._device_bytes(), resident_bytes()
        with self._lock:
            for table, value in ((self.device, device), (self.host, host)):
                if value is not None:
                    for name in stages:
                        table[name] = max(table.get(name, 0), value)

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self.read()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()
        self.timers.on_stage = None
        self.read()

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

