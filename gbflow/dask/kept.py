"""The computed partitions a Dask training keeps between a run and its restarts after lost workers.

A run computes every partition (``client.compute``), places them and lets each go once its task
has copied it, so that Dask frees the raw frames while training runs. A restart would then
compute every partition again, though only the lost worker's were gone. Where the workers have
room, the training keeps the futures of the partitions a run computed instead: Dask recomputes
the keys a lost worker held from their lineage (it does so for any key a client still holds),
and the restart waits for those alone (and counts the rows again: a pipeline may compute a
partition differently).
"""
from __future__ import annotations


class KeptPartitions:
    """The partition futures a run computed (training, then each evaluation set's, in
    ``_Cluster._compute``'s order) and their row counts, when kept (``keep``); ``release``
    lets them go. Empty until a run chooses to keep them."""

    def __init__(self):
        self.futures: list | None = None
        self.rows: list[int] | None = None
        self._keys: set = set()

    def keep(self, futures: list, rows: list[int]) -> None:
        """Hold ``futures`` (with their ``rows``) until ``release``."""
        self.futures, self.rows = list(futures), list(rows)
        self._keys = {f.key for f in futures}

    def owns(self, future) -> bool:
        """Whether ``future``'s key is one of the kept partitions (a run must not release it)."""
        return future.key in self._keys

    def forget(self) -> list:
        """Stop keeping the partitions and return their futures, not released (a run that
        lets them go once copied takes them)."""
        futures, self.futures, self.rows, self._keys = self.futures or [], None, None, set()
        return futures

    def release(self) -> None:
        """Let every kept partition go (training ended, however it ended)."""
        futures, self.futures, self.rows, self._keys = self.futures or [], None, None, set()
        for f in futures:
            f.release()
