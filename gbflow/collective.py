"""How training processes reach each other: the ``Collective`` protocol, and the local one.

Training makes every cross-process reduction through a collective, in the same order on every
process: integer sums (exact in any order), maxima, and gathers of small objects. In one process
each of them returns its input (``LocalCollective``); the Dask integration supplies one that
reaches the other workers' training tasks (``gbflow.dask.transport``). A collective never changes
a model: every sum it makes is an integer sum.
"""
from __future__ import annotations

from typing import Protocol


class Collective(Protocol):
    """Reductions over every process taking part in training, called by all of them in the same
    order. Results may be the argument itself: never modify them in place."""

    @property
    def size(self) -> int:
        """Number of processes."""

    @property
    def sums_on_device(self) -> bool:
        """Whether ``allreduce_sum_inplace`` sums device arrays without copying them to the host
        (NCCL): then a fixed-size table is cheap to sum; else it travels whole."""

    def allreduce_sum(self, array):
        """Elementwise sum over all processes of an integer array (host or device)."""

    def allreduce_sum_inplace(self, arrays: list) -> None:
        """Sum each C-contiguous integer device array over all processes, in place (every process
        passes arrays of the same shapes, in the same order)."""

    def allreduce_max(self, value):
        """Elementwise max over all processes of a float or a host float64 array."""

    def allgather(self, value) -> list:
        """Every process's ``value`` (any picklable object), in process order; read-only."""


class LocalCollective:
    """The collective of one process: every reduction is the identity (``allgather`` -> [value])."""

    size = 1
    sums_on_device = False

    def allreduce_sum(self, array):
        return array

    def allreduce_sum_inplace(self, arrays: list) -> None:
        """Nothing to add: the arrays already hold the sums."""

    def allreduce_max(self, value):
        return value

    def allgather(self, value) -> list:
        return [value]


LOCAL = LocalCollective()
