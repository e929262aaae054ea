"""NCCL between GPUs (CuPy's NCCL binding) for the Dask collective: integer sums, max, all-gathers.

gbflow.dask hands every training task the same unique id (made by rank 0 with ``unique_id`` and
sent through the Dask collective), then each task opens a ``Communicator`` on its GPU
(``open_in_background``, while the task loads its partitions). Histograms
are int64, so NCCL's ring or tree order cannot change a sum: the model stays the same as with the
host (Dask) path. Everything here needs CuPy with NCCL and a GPU per rank; it is not exercised by
the CPU test suite.
"""
from __future__ import annotations


def available() -> bool:
    """True when CuPy's NCCL binding imports and a GPU is visible."""
    try:
        import cupy
        from cupy.cuda import nccl  # noqa: F401
        return cupy.cuda.runtime.getDeviceCount() > 0
    except Exception:  # ImportError, or a CUDA runtime error without a driver/GPU
        return False


def unique_id():
    """A fresh NCCL unique id (a picklable tuple), made once by rank 0."""
    from cupy.cuda import nccl
    return nccl.get_unique_id()


class Communicator:
    """One rank's NCCL communicator on the current GPU.

    Construction is collective: every rank must create its communicator with the same
    ``unique_id`` (it blocks until all ``n_ranks`` have joined).
    """

    def __init__(self, n_ranks: int, unique_id, rank: int):
        import cupy
        from cupy.cuda import nccl
        self._nccl = nccl
        self._n_ranks = n_ranks
        self._device = cupy.cuda.Device().id  # close_later's thread must use it too
        self._comm = nccl.NcclCommunicator(n_ranks, unique_id, rank)

    def allreduce_sum(self, array):
        """Elementwise sum over the ranks of a CuPy int64/int32 array (a new array, same shape):
        ``allreduce_sum_inplace`` on a C-ordered copy."""
        import cupy
        out = cupy.array(array, order="C")
        self.allreduce_sum_inplace([out])
        return out

    def allreduce_sum_inplace(self, arrays: list) -> None:
        """Sum each C-contiguous CuPy int64/int32 array over the ranks, in place (NCCL's in-place
        allreduce: no copies, no new arrays), all in one NCCL group. Queued on the current
        stream, no wait: the kernels that read the sums are queued after it, and the grower's
        next device-to-host copy waits for all of them. Every rank passes arrays of the same
        shapes."""
        import cupy
        types = {cupy.dtype(cupy.int64): self._nccl.NCCL_INT64,
                 cupy.dtype(cupy.int32): self._nccl.NCCL_INT32}
        for array in arrays:
            if array.dtype not in types:
                raise TypeError(f"NCCL allreduce_sum takes int32/int64 arrays (exact sums), "
                                f"got {array.dtype}")
            if not array.flags.c_contiguous:
                raise ValueError("NCCL allreduce_sum_inplace needs C-contiguous arrays")
        stream = cupy.cuda.get_current_stream().ptr
        self._nccl.groupStart()
        try:
            for array in arrays:
                self._comm.allReduce(array.data.ptr, array.data.ptr, array.size,
                                     types[array.dtype], self._nccl.NCCL_SUM, stream)
        finally:
            self._nccl.groupEnd()

    def allreduce_max(self, value):
        """Elementwise max over the ranks of a float or a host float64 array, through the GPUs
        (a copy up, the reduction, a copy down: far quicker than a round trip through Dask's
        event loop and TCP, which each boosting round paid for its gradient scale). Returns a
        float or a host float64 array, like the value."""
        import cupy
        import numpy as np
        host = np.asarray(value, dtype=np.float64)
        if host.size == 0:
            return host
        source = cupy.asarray(host.reshape(-1))
        out = cupy.empty_like(source)
        stream = cupy.cuda.get_current_stream()
        self._comm.allReduce(source.data.ptr, out.data.ptr, source.size,
                             self._nccl.NCCL_FLOAT64, self._nccl.NCCL_MAX, stream.ptr)
        result = cupy.asnumpy(out, stream=stream).reshape(host.shape)
        return float(result) if np.ndim(value) == 0 else result

    def allgather(self, value) -> list:
        """Every rank's ``value`` (any picklable object), in rank order, through the GPUs: the
        pickled lengths, then the pickles padded to the longest, in two NCCL all-gathers (the
        quantile sketch's summaries, tens of MB: a Dask round trip cost 10 ms and more each).
        Waits for both; the results are the ranks' own objects, unpickled."""
        import pickle

        import cupy
        import numpy as np
        data = np.frombuffer(pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL),
                             dtype=np.uint8)
        stream = cupy.cuda.get_current_stream()
        lengths = cupy.empty(self._n_ranks, dtype=np.int64)
        self._comm.allGather(cupy.asarray(np.array([data.size], dtype=np.int64)).data.ptr,
                             lengths.data.ptr, 1, self._nccl.NCCL_INT64, stream.ptr)
        lengths = cupy.asnumpy(lengths, stream=stream)
        width = max(int(lengths.max()), 1)
        send = cupy.zeros(width, dtype=np.uint8)
        send[: data.size] = cupy.asarray(data)
        gathered = cupy.empty(self._n_ranks * width, dtype=np.uint8)
        self._comm.allGather(send.data.ptr, gathered.data.ptr, width, self._nccl.NCCL_UINT8,
                             stream.ptr)
        host = cupy.asnumpy(gathered, stream=stream)
        return [pickle.loads(host[r * width: r * width + int(lengths[r])].tobytes())
                for r in range(self._n_ranks)]

    def warm_up(self) -> None:
        """One small all-reduce and all-gather on a stream of its own, waited for. NCCL connects
        the GPUs of a new communicator during its first collectives (0.15 s on two H200s):
        ``open_in_background`` pays that off the caller's thread."""
        import cupy
        stream = cupy.cuda.Stream(non_blocking=True)
        with stream:
            self.allreduce_sum(cupy.zeros(1, dtype=cupy.int64))
            gathered = cupy.empty(self._n_ranks, dtype=cupy.int64)
            self._comm.allGather(cupy.zeros(1, dtype=cupy.int64).data.ptr, gathered.data.ptr, 1,
                                 self._nccl.NCCL_INT64, stream.ptr)
        stream.synchronize()

    def close(self) -> None:
        """Destroy the communicator now (waits for NCCL's teardown: about 0.2 s on two H200s)."""
        self._comm.destroy()

    def close_later(self) -> None:
        """Destroy the communicator on a background thread, so that the caller does not wait
        for NCCL's teardown. Only once every collective on it has completed (the caller has
        fetched a result that depends on the last one)."""
        import threading

        import cupy

        def destroy():
            with cupy.cuda.Device(self._device):
                self._comm.destroy()
        threading.Thread(target=destroy, name="gbflow-nccl-close", daemon=True).start()


def open_in_background(n_ranks: int, unique_id, rank: int):
    """Start opening this rank's ``Communicator`` on the current GPU, warmed up, on a background
    thread (construction blocks until every rank has joined, and the first collectives connect
    the GPUs: about 0.2 s on two H200s that the caller can spend loading its data).

    Returns a ``concurrent.futures.Future`` of the Communicator (or of the error that opening
    raised). Every rank must call this with the same ``unique_id``. A caller that gives up on it
    calls ``discard``.
    """
    import concurrent.futures
    import threading

    import cupy
    device = cupy.cuda.Device().id
    future = concurrent.futures.Future()

    def open_():
        try:
            with cupy.cuda.Device(device):
                communicator = Communicator(n_ranks, unique_id, rank)
                communicator.warm_up()
        except BaseException as error:  # noqa: BLE001 - handed to the caller through the future
            future.set_exception(error)
        else:
            future.set_result(communicator)
    threading.Thread(target=open_, name="gbflow-nccl-open", daemon=True).start()
    return future


def discard(future) -> None:
    """Close the communicator of an ``open_in_background`` future the caller no longer waits for,
    once (if ever) it is open, without waiting for it (a rank that never joins leaves the
    opening thread blocked; it is a daemon thread)."""
    def close(done):
        if done.exception() is None:
            done.result().close_later()
    future.add_done_callback(close)
