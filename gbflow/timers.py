"""Seconds spent per stage of a training run (``Booster.timings``)."""
from __future__ import annotations

import collections
import contextlib
import time


class Timers:
    """Seconds per stage, accumulated over a training run: ``with timers("splits"): ...``."""

    def __init__(self):
        self.seconds = collections.defaultdict(float)

    @contextlib.contextmanager
    def __call__(self, stage: str):
        start = time.perf_counter()
        try:
            yield
        finally:
            self.seconds[stage] += time.perf_counter() - start
