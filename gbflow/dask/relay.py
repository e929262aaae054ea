"""What the Dask driver does with its tasks' events: rank 0's progress lines logged in order, and
a topic handler that lets go of the run when it ends."""
from __future__ import annotations

import threading

from ..progress import log_line


class OrderedLines:
    """Rank 0's progress lines logged (``progress.log_line``) in its order, each once, whether
    its event or its result brings a line first: events may arrive out of order, and the
    result's copy of the lines may come while events are still being delivered (on another
    thread)."""

    def __init__(self, sink=log_line):
        self._lock = threading.Lock()
        self.sink = sink  # takes each line, in order
        self.printed = -1  # sequence number of the last line printed
        self._ahead: dict[int, str] = {}  # lines that arrived before an earlier one

    def put(self, seq: int, line: str) -> None:
        """Line number ``seq`` (0, 1, ...): printed now if every earlier one has been."""
        with self._lock:
            if seq <= self.printed:
                return
            self._ahead[seq] = line
            while self.printed + 1 in self._ahead:
                self.printed += 1
                self.sink(self._ahead.pop(self.printed))


class Relay:
    """A run's event handler: passes the events on to ``target`` until the run sets it to None.
    distributed keeps a topic's handler after ``unsubscribe_topic`` (2026.8 only tells the
    scheduler), so the handler must not hold the run, and through it the user's collections (a
    persisted frame's futures, a ``from_pandas`` frame's data), for the client's lifetime."""

    def __init__(self, target):
        self.target = target

    def __call__(self, event) -> None:
        target = self.target
        if target is not None:
            target(event)
