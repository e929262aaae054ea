"""Seconds spent per stage of a training run (``Booster.timings``)."""
from __future__ import annotations

import collections
import contextlib
import time


class Timers:
    """Seconds per stage, accumulated over a training run: ``with timers("splits"): ...``."""

    def __init__(self):
        self.seconds = collections.defaultdict(float)
        self._stages: list[str] = []  # the stages entered and not left, innermost last
        # called (no arguments) as each stage starts and ends, inside it (``memory_report``)
        self.on_stage = None

    @property
    def current(self) -> tuple:
        """The stages being timed now, outermost first (empty between stages)."""
        return tuple(self._stages)

    @contextlib.contextmanager
    def __call__(self, stage: str):
        start = time.perf_counter()
        self._stages.append(stage)
        if self.on_stage is not None:
            self.on_stage()
        try:
            yield
        finally:
            if self.on_stage is not None:
                self.on_stage()
            self._stages.pop()
            self.seconds[stage] += time.perf_counter() - start
