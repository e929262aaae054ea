"""A tree whose arrays may still be on their way from the device, built when asked for."""
from __future__ import annotations

from ..timers import Timers
from ..tree import Tree


class PendingTree:
    """A tree whose arrays may still be on their way from the device (planned trees):
    ``result()`` waits for them and builds the ``Tree`` (once; timed as "tree")."""

    def __init__(self, build, timers: Timers):
        self._build, self._timers, self._tree = build, timers, None

    def result(self) -> Tree:
        if self._tree is None:
            with self._timers("tree"):
                self._tree = self._build()
            self._build = None
        return self._tree


def finished_tree(tree) -> Tree:
    """A ``Tree`` from ``grow_tree``'s first result (a ``Tree`` or a ``PendingTree``)."""
    return tree.result() if isinstance(tree, PendingTree) else tree
