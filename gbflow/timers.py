"""Seconds spent per stage of a training run (``Booster.timings``)."""
from __future__ import annotations

import collections
import time

from .backend.compiling import compile_seconds


class Timers:
    """Seconds per stage, accumulated over a training run: ``with timers("splits"): ...``.
    Kernels compiled during a stage (the first use of a kernel in an environment: numba's,
    gbflow's CUDA kernels or CuPy's; ``backend.compiling``) are not the stage's time: their
    seconds go to the "compile" entry, once however deeply the stages nest (compiles outside
    every stage count nowhere but in the run's total)."""

    def __init__(self):
        self.seconds = collections.defaultdict(float)
        self._stages: list[str] = []  # the stages entered and not left, innermost last
        # called (no arguments) as each stage starts and ends, inside it (``memory_report``)
        self.on_stage = None

    @property
    def current(self) -> tuple:
        """The stages being timed now, outermost first (empty between stages)."""
        return tuple(self._stages)

    def __call__(self, stage: str) -> "_Stage":
        """A context manager timing ``stage`` (a plain object, not a generator: a small
        training enters some ten thousand of them)."""
        return _Stage(self, stage)


class _Stage:
    """One timed stage of ``Timers``: entered once."""

    __slots__ = ("timers", "stage", "start", "compiled")

    def __init__(self, timers: Timers, stage: str):
        self.timers, self.stage = timers, stage

    def __enter__(self) -> None:
        timers = self.timers
        self.start = time.perf_counter()
        self.compiled = compile_seconds()
        timers._stages.append(self.stage)
        if timers.on_stage is not None:
            timers.on_stage()

    def __exit__(self, *exc) -> None:
        timers = self.timers
        if timers.on_stage is not None:
            timers.on_stage()
        timers._stages.pop()
        compiled = compile_seconds() - self.compiled
        timers.seconds[self.stage] += time.perf_counter() - self.start - compiled
        if compiled and not timers._stages:  # an outer stage counts its inner ones' compiles
            timers.seconds["compile"] += compiled
