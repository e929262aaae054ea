"""Progress lines of a training run (every ``period`` rounds, the first and the last), logged."""
from __future__ import annotations

import contextlib
import contextvars
import logging
import numbers
import sys
import time

import numpy as np

LOGGER = logging.getLogger("gbflow")
# XGBoost's verbosity of the training running in this context (0 silent, 1 warnings, 2 info,
# 3 debug): 0 drops gbflow's warnings. Progress lines are ``verbose``'s, never dropped here.
VERBOSITY = contextvars.ContextVar("gbflow_verbosity", default=1)


class _VerbosityFilter(logging.Filter):
    """Drops the "gbflow" logger's warnings while a training runs with verbosity 0 (a context
    variable: concurrent trainings in threads each keep their own)."""

    def filter(self, record: logging.LogRecord) -> bool:
        return record.levelno != logging.WARNING or VERBOSITY.get() >= 1


LOGGER.addFilter(_VerbosityFilter())


@contextlib.contextmanager
def verbosity(level: int):
    """Run a block with XGBoost's ``verbosity`` ``level`` (see ``VERBOSITY``)."""
    token = VERBOSITY.set(int(level))
    try:
        yield
    finally:
        VERBOSITY.reset(token)


def log_line(line: str) -> None:
    """Log one line of progress at INFO on the ``gbflow`` logger. While nothing in the process
    has configured logging (no handler on the way to the root, no level set on the "gbflow"
    logger) the line goes to stderr, as logging's own last resort does for warnings, so
    ``verbose`` output shows by default; once the application configures logging, its handlers
    and levels decide. The logger itself is never changed."""
    if LOGGER.hasHandlers() or LOGGER.level != logging.NOTSET:
        LOGGER.info(line)
    else:
        print(line, file=sys.stderr, flush=True)


BAR = "bar"  # verbose="bar": a progress bar (tqdm) instead of lines


def _bar(n_rounds: int):
    """A tqdm progress bar of ``n_rounds`` (tqdm.auto: a widget in notebooks), or None with a
    warning when tqdm is not installed."""
    try:
        from tqdm.auto import tqdm
    except ImportError:
        LOGGER.warning("verbose='bar' needs tqdm (pip install tqdm): printing lines instead")
        return None
    return tqdm(total=n_rounds, desc="gbflow", unit="round", leave=True)


def check_verbose(verbose) -> None:
    """ValueError unless ``verbose`` is a bool, a non-negative int or "bar"."""
    ok = isinstance(verbose, (bool, np.bool_)) or (isinstance(verbose, str) and verbose == BAR) \
        or (isinstance(verbose, numbers.Integral) and verbose >= 0)
    if not ok:
        raise ValueError(f"verbose must be True, False, a number of rounds (>= 0) or 'bar', "
                         f"got {verbose!r}")


class Progress:
    """Per-round log lines: every ``period`` rounds, the first and the last; or a bar.

    Lines are logged (``log_line``: INFO on the ``gbflow`` logger, on stderr unless the
    application configured logging), or go to ``emit`` (a callable taking one line) when given:
    on a Dask worker they are sent to the client, which logs them. ``verbose="bar"``: a tqdm bar
    advanced every round, the metrics as its postfix (where an ``emit`` is given, a line every
    round instead: the Dask client draws the bar from them, ``relay``). ``verbose=True``
    without metrics (no evaluation set: ``has_metrics`` False) prints no round lines, as in
    XGBoost; an explicit period still does.
    """

    def __init__(self, verbose, n_rounds: int, emit=None, has_metrics: bool = True):
        self.bar = None
        # the period of the lines a client relays from a worker (a bar without tqdm: True's)
        self.relay_period = 1
        if verbose == BAR:
            self.bar = _bar(n_rounds) if emit is None else None
            period = 1 if self.bar is not None or emit is not None else max(1, n_rounds // 20)
            self.relay_period = 1 if self.bar is not None else max(1, n_rounds // 20)
        elif verbose is True:  # without metrics the lines would say nothing: XGBoost is silent
            period = max(1, n_rounds // 20) if has_metrics else 0
        else:
            period = int(verbose) if verbose else 0
        self.period, self.n_rounds, self.start = period, n_rounds, time.perf_counter()
        self.emit = emit or log_line

    def _shown(self, done: int, period: int) -> bool:
        """Whether the line of ``done`` rounds is shown at ``period``: the first, every
        period-th and the last."""
        return bool(period) and (done == 1 or done % period == 0 or done >= self.n_rounds)

    def round(self, i: int, scores: list[tuple[str, str, float]]) -> None:
        if not self._shown(i + 1, self.period):
            return
        text = "  ".join(f"{name}-{metric}:{value:.6f}" for name, metric, value in scores)
        if self.bar is not None:
            self._advance(i + 1, text)
            return
        elapsed = time.perf_counter() - self.start
        width = len(str(self.n_rounds))
        self.emit(f"[{i + 1:>{width}}/{self.n_rounds}] " + (f"{text}  " if text else "")
                  + f"({elapsed:.1f}s)")

    def _advance(self, done: int, text: str) -> None:
        self.bar.update(max(0, done - self.bar.n))
        if text:
            self.bar.set_postfix_str(text, refresh=False)
        if done >= self.n_rounds:
            self.close()

    def relay(self, line: str) -> None:
        """A line of a worker's ``Progress`` (on the Dask client): logged, or drawn on the bar
        when it is a round's line ("[i/n] metrics (seconds)")."""
        is_round = line.startswith("[") and "/" in line.split("]")[0]
        done = int(line[1:].split("/")[0]) if is_round else 0
        if self.bar is not None and is_round:
            text = line.split("] ", 1)[1].rsplit("(", 1)[0].strip() if "] " in line else ""
            self._advance(done, text)
        elif self.bar is not None:
            self.bar.write(line)
        elif not is_round or self._shown(done, self.relay_period):
            log_line(line)

    def say(self, text: str) -> None:
        if self.bar is not None:
            self.bar.write(text)
        elif self.period:
            self.emit(text)

    def close(self) -> None:
        """End the bar (training stopped early, or ended): nothing without one."""
        if self.bar is not None:
            self.bar.close()
            self.bar = None
