"""Which transport a training task's reductions take: NCCL between GPUs, else Dask's."""
from __future__ import annotations

import numpy as np

from ..timers import Timers
from .collective import DaskCollective
from .errors import CollectiveError


class WorkerCollective:
    """The ``gbflow.collective.Collective`` of a Dask training task: reaches the other workers'
    training tasks.

    With ``nccl`` (a ``gbflow.backend.nccl.Communicator``) everything goes through it: device
    arrays in place, host integer arrays and ``allgather``'s objects through a copy to the GPU
    (a Dask round trip costs 10 ms and more; fitting makes about twenty before the first tree).
    Without it, host arrays go through the Dask collective, and device arrays are copied to the
    host and back. With
    one worker every reduction returns its input, so Dask adds nothing per level. The time spent
    in reductions is ``timers.seconds["communication"]`` (also counted in the stage that called:
    give it the shard set's timers).
    """

    def __init__(self, backend, collective: DaskCollective, nccl=None, timers: Timers = None):
        self.backend, self.collective, self.nccl = backend, collective, nccl
        self.size, self.rank = collective.size, collective.rank
        self.timers = Timers() if timers is None else timers

    @property
    def sums_on_device(self) -> bool:
        return self.nccl is not None

    def allreduce_sum(self, array):
        self.collective.check_cancelled()
        if self.collective.size == 1:
            return array
        with self.timers("communication"):
            if isinstance(array, np.ndarray):
                if self.nccl is not None and array.dtype in (np.int64, np.int32):
                    # a new C-ordered device array: summed in place
                    on_device = self.backend.xp.array(array, order="C")
                    self.nccl.allreduce_sum_inplace([on_device])
                    return self.backend.to_host(on_device)
                return self.collective.allreduce_sum(array)
            if self.nccl is not None:
                return self.nccl.allreduce_sum(array)
            host = self.collective.allreduce_sum(self.backend.to_host(array))
            return self.backend.asarray(host)

    def allreduce_sum_inplace(self, arrays: list) -> None:
        self.collective.check_cancelled()
        if self.collective.size == 1:
            return
        with self.timers("communication"):
            if self.nccl is not None:  # NCCL's in-place reduction: no copies
                self.nccl.allreduce_sum_inplace(arrays)
                return
            xp = self.backend.xp  # one host round trip for all of them
            host = self.backend.to_host(xp.concatenate([a.reshape(-1) for a in arrays]))
            total = self.backend.asarray(self.collective.allreduce_sum(host))
            offset = 0
            for a in arrays:
                a[...] = total[offset: offset + a.size].reshape(a.shape)
                offset += a.size

    def allreduce_max(self, value):
        self.collective.check_cancelled()
        if self.collective.size == 1:
            return value
        with self.timers("communication"):
            if self.nccl is not None:
                return self.nccl.allreduce_max(value)
            return self.collective.allreduce_max(value)

    def allgather(self, value) -> list:
        self.collective.check_cancelled()
        if self.collective.size == 1:
            return [value]
        with self.timers("communication"):
            if self.nccl is not None:
                return self.nccl.allgather(value)
            return self.collective.allgather(value)


def open_nccl(backend, collective: DaskCollective, rank: int):
    """Start opening an NCCL communicator among the ranks when every rank runs on a GPU of its
    own with NCCL: a future of it (``nccl.open_in_background``), else None (two workers on one
    GPU, which NCCL refuses, sum through the Dask collective). The ranks agree through the
    Dask collective here; opening and connecting go on in the background."""
    if collective.size == 1:
        return None
    from ..backend import nccl
    ranks = collective.allgather((backend.supports_nccl, backend.device_key))
    if not all(usable for usable, _ in ranks) or \
            len({device for _, device in ranks}) < collective.size:
        return None
    unique_id = collective.allgather(nccl.unique_id() if rank == 0 else None)[0]
    return nccl.open_in_background(collective.size, unique_id, rank)


def opened_nccl(opening, timeout: float):
    """The communicator of ``open_nccl``'s future (None for None), once open: raises
    CollectiveError after ``timeout`` seconds (a rank that never joined)."""
    import concurrent.futures
    if opening is None:
        return None
    try:
        return opening.result(timeout=timeout)
    except concurrent.futures.TimeoutError:
        raise CollectiveError(f"the NCCL communicator among the GPU workers did not open within "
                              f"{timeout:g} s (did a worker die?)") from None
