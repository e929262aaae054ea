"""Progress lines of a training run: every ``period`` rounds, the first and the last."""
from __future__ import annotations

import sys
import time


class Progress:
    """Per-round log lines: every ``period`` rounds, the first and the last.

    Lines go to stderr, or to ``emit`` (a callable taking one line) when given: on a Dask worker
    they are sent to the client, which prints them.
    """

    def __init__(self, verbose, n_rounds: int, emit=None):
        if verbose is True:
            period = max(1, n_rounds // 20)
        else:
            period = int(verbose) if verbose else 0
        self.period, self.n_rounds, self.start = period, n_rounds, time.perf_counter()
        self.emit = emit or (lambda line: print(line, file=sys.stderr, flush=True))

    def round(self, i: int, scores: list[tuple[str, str, float]]) -> None:
        if not self.period or not (i == 0 or (i + 1) % self.period == 0 or i + 1 == self.n_rounds):
            return
        text = "  ".join(f"{name}-{metric}:{value:.6f}" for name, metric, value in scores)
        elapsed = time.perf_counter() - self.start
        width = len(str(self.n_rounds))
        self.emit(f"[{i + 1:>{width}}/{self.n_rounds}] " + (f"{text}  " if text else "")
                  + f"({elapsed:.1f}s)")

    def say(self, text: str) -> None:
        if self.period:
            self.emit(text)
