"""Device selection: the only package that knows about devices and hands out array namespaces.

A ``Backend`` bundles an array namespace ``xp`` (NumPy, or CuPy for the CUDA backend) with the
kernels that work on its arrays. Core modules receive a backend and never test for a device. CuPy is
imported only when the CUDA backend is asked for, so ``import gbflow`` needs no GPU stack.
"""
from __future__ import annotations

import contextlib
import dataclasses
import threading
import types

import numpy as np

from ..csr import CSR
from . import cpu_kernels, numpy_kernels

DEVICES = ("auto", "cpu", "cuda")


@dataclasses.dataclass(frozen=True)
class Backend:
    """An array namespace and the kernels for its arrays.

    name: "cpu" or "cuda". xp: the array module. kernels: a module with the functions of
    ``numpy_kernels`` (same names and signatures). sketch_block_values: values per block of rows
    in the quantile sketch's passes (small on the CPU, where large temporaries are slow to fault
    in; large on the GPU, where each block costs launches and a synchronisation).
    """

    name: str
    xp: types.ModuleType
    kernels: types.ModuleType
    sketch_block_values: int = 1 << 20

    def to_host(self, array):
        """The array as a NumPy array (a copy from the GPU; a no-op on the CPU)."""
        return to_host(array)

    def to_host_all(self, arrays) -> list:
        """Several arrays as NumPy arrays, the device ones in one device-to-host copy on the GPU
        (each copy waits for the device, and a tree level needs its split results and the
        previous partition's left counts); host arrays pass through."""
        if self.name != "cuda" or not any(on_gpu(a) for a in arrays):
            return [to_host(a) for a in arrays]
        return _cuda_to_host_all(self.xp, arrays)

    def to_host_later(self, arrays) -> "Later":
        """Several arrays as NumPy arrays, fetched without waiting: on the GPU, the copies are
        queued on the current stream now (into page-locked memory of their own; one copy per
        allocation that the arrays follow each other in) and ``Later.wait()`` waits for them
        alone, not for the work queued after them. The arrays must not change before the
        copies run (stream order sees to that for work queued later on the same stream)."""
        if self.name != "cuda" or not any(on_gpu(a) for a in arrays):
            host = [np.array(to_host(a)) for a in arrays]  # copies: as on the GPU, the arrays
            return Later(lambda: host)  # may be written again before wait()
        return _cuda_copies(self.xp, arrays, pinned=None)

    def free_cached_memory(self) -> None:
        """Give the device memory that CuPy's pool holds but no array uses back to the GPU (a
        no-op on the CPU). Called between stages whose temporaries differ in size (sketch,
        routing, training), so that cached blocks of one stage do not add to the next one's
        peak; other users of the GPU (cuDF, other processes) get it back too."""
        if self.name == "cuda":
            self.xp.get_default_memory_pool().free_all_blocks()

    @contextlib.contextmanager
    def own_memory_pool(self):
        """Within this block, this thread's GPU arrays come from CuPy's memory pool, whatever
        allocator the process set (a no-op on the CPU). Dask-CUDA workers hand CuPy to RMM's
        allocator, by default without a pool: every array then costs a cudaMalloc and a
        cudaFree (which waits for the device), and training in a worker ran 3.5x slower than
        in-process. The pool's cached blocks are given back at the end."""
        if self.name != "cuda":
            yield
            return
        pool = self.xp.get_default_memory_pool()
        try:
            with self.xp.cuda.using_allocator(pool.malloc):
                yield
        finally:
            pool.free_all_blocks()

    @contextlib.contextmanager
    def limited_threads(self, n: int):
        """Within this block, this thread's CPU kernels use at most ``n`` threads (a Dask
        worker's share of the cores: a LocalCluster of several workers, each with numba's
        default of every core, ran 4x to 40x slower from oversubscription). Yields the thread count
        used, or None on the GPU (nothing changes there)."""
        if self.name != "cpu":
            yield None
            return
        with cpu_kernels.limited_threads(n) as used:
            yield used

    def asarray(self, array):
        """The array (or ``gbflow.csr.CSR``, array by array) on this backend's device (host data
        is copied to the GPU, GPU data to the host for the CPU backend); no copy when it is
        already there."""
        if isinstance(array, CSR):
            return CSR(indptr=self.asarray(array.indptr), indices=self.asarray(array.indices),
                       data=self.asarray(array.data), n_cols=array.n_cols)
        return self.xp.asarray(array) if self.name == "cuda" else to_host(array)


def on_gpu(array) -> bool:
    """True for arrays (and frames) whose data lives on a GPU: CuPy, cuDF, anything exposing
    ``__cuda_array_interface__``, and a ``gbflow.csr.CSR`` of such arrays. Checked without
    importing CuPy."""
    if isinstance(array, CSR):
        return on_gpu(array.data)
    module = type(array).__module__.split(".")[0]
    return module in ("cupy", "cupyx", "cudf", "dask_cudf") or \
        hasattr(array, "__cuda_array_interface__")


def to_host(array):
    """Any array (NumPy, CuPy, a scalar) as a NumPy array; device arrays are copied to the host."""
    if on_gpu(array):
        import cupy
        return cupy.asnumpy(array)
    return np.asarray(array)


def aligned_slots(nbytes: list) -> tuple[list, int]:
    """(offsets, total bytes) of arrays of ``nbytes`` bytes laid one after the other in 8-byte
    aligned slots. The one layout of packed uploads, of the split search's results and of
    ``to_host_all``'s buffer: device views laid out by it are fetched in one copy."""
    offsets, total = [], 0
    for n in nbytes:
        offsets.append(total)
        total += -(-int(n) // 8) * 8
    return offsets, total


def packed_empty(xp, layout: list) -> list:
    """Uninitialised arrays of ``layout``'s (shape, dtype) pairs, in ``xp``: views of one
    allocation in ``aligned_slots``' layout, so that ``Backend.to_host_all`` and
    ``to_host_later`` fetch device ones given in this order with one copy."""
    nbytes = [int(np.prod(shape)) * np.dtype(dtype).itemsize for shape, dtype in layout]
    offsets, size = aligned_slots(nbytes)
    memory = xp.empty(max(size, 8), dtype=np.uint8)
    return [memory[offset: offset + n].view(dtype).reshape(shape)
            for (shape, dtype), offset, n in zip(layout, offsets, nbytes)]


class Later:
    """Host copies that may still be on their way (``Backend.to_host_later``)."""

    def __init__(self, finish):
        self._finish = finish

    def wait(self) -> list:
        """The NumPy arrays, once their copies are done."""
        return self._finish()


_pinned = threading.local()  # per thread: training tasks of one process may run side by side


def _cuda_to_host_all(cupy, arrays) -> list:
    """``Backend.to_host_all`` on the GPU: every device array copied asynchronously into one
    reused page-locked buffer (8-byte aligned slots), one wait for the stream, then host copies
    of the slots (the buffer is reused by the next call)."""
    offsets, total = aligned_slots([a.nbytes if on_gpu(a) else 0 for a in arrays])
    total = max(total, 8)
    if getattr(_pinned, "size", 0) < total:
        _pinned.size = max(total, 2 * getattr(_pinned, "size", 0), 1 << 16)
        _pinned.memory = cupy.cuda.alloc_pinned_memory(_pinned.size)
    return _cuda_copies(cupy, arrays, _pinned.memory).wait()


def _cuda_copies(cupy, arrays, pinned) -> Later:
    """Every device array of ``arrays`` copied asynchronously into ``pinned`` (page-locked
    memory large enough for their 8-byte aligned slots; None: a new block from CuPy's pinned
    pool), an event after the copies; ``wait`` waits for the event and returns host copies of
    the slots (host arrays pass through)."""
    device = [cupy.ascontiguousarray(a) if on_gpu(a) else None for a in arrays]
    offsets, total = aligned_slots([0 if d is None else d.nbytes for d in device])
    if pinned is None:
        pinned = cupy.cuda.alloc_pinned_memory(max(total, 8))
    buffer = np.frombuffer(pinned, dtype=np.uint8, count=max(total, 8))
    stream = cupy.cuda.get_current_stream()
    runtime = cupy.cuda.runtime
    base = buffer.ctypes.data
    views = []
    copies = []  # [host offset, device pointer, bytes, allocation]: views of one allocation
    # that follow each other there as they do in the buffer share one copy (a copy must not
    # span two allocations, even adjacent ones: the runtime rejects it)
    for d, offset in zip(device, offsets):
        view = None
        if d is not None:
            view = buffer[offset:offset + d.nbytes].view(d.dtype).reshape(d.shape)
            if d.size:
                last = copies[-1] if copies else None
                # joined when the gap before it (padding to 8 bytes) is the same on both sides
                if last is not None and d.data.mem is last[3] and \
                        offset - last[0] - last[2] < 8 and d.data.ptr - last[1] == offset - last[0]:
                    last[2] = offset - last[0] + d.nbytes
                else:
                    copies.append([offset, d.data.ptr, d.nbytes, d.data.mem])
        views.append(view)
    for host_offset, pointer, nbytes, _ in copies:
        # the runtime call itself: ndarray.get cost 35 us of host time a copy
        runtime.memcpyAsync(base + host_offset, pointer, nbytes, runtime.memcpyDeviceToHost,
                            stream.ptr)
    done = stream.record()

    def finish():
        done.synchronize()
        return [np.asarray(a) if v is None else v.copy() for a, v in zip(arrays, views)]
    return Later(finish)


_reference_only = False


@contextlib.contextmanager
def reference_kernels():
    """Within this block the CPU backend runs the plain NumPy twins (slow; for tests)."""
    global _reference_only
    previous, _reference_only = _reference_only, True
    try:
        yield
    finally:
        _reference_only = previous


def cuda_available() -> bool:
    """True when CuPy imports and sees at least one GPU."""
    try:
        import cupy
        return cupy.cuda.runtime.getDeviceCount() > 0
    except Exception:  # ImportError, or a CUDA runtime error when no driver/GPU is present
        return False


def get_backend(device: str = "auto", data_on_gpu: bool = False) -> Backend:
    """The backend for ``device`` ("auto", "cpu" or "cuda").

    "auto" is the GPU when the data is already there (``data_on_gpu``) or a GPU is present, else
    the CPU. "cuda" without a usable GPU and CuPy is an error that says what is missing.
    """
    if device not in DEVICES:
        raise ValueError(f"device={device!r} is not one of {DEVICES}")
    if device == "auto":
        device = "cuda" if data_on_gpu or cuda_available() else "cpu"
    if device == "cuda":
        return _cuda_backend()
    kernels = numpy_kernels if _reference_only else cpu_kernels
    return Backend(name="cpu", xp=np, kernels=kernels)


def _cuda_backend() -> Backend:
    try:
        import cupy
    except ImportError as e:
        raise RuntimeError(
            "device='cuda' needs CuPy (pip install 'gbflow[cuda13]', or the conda environment in "
            "environment.yml); use device='cpu' otherwise") from e
    if not cuda_available():
        raise RuntimeError("device='cuda': CuPy is installed but sees no usable CUDA GPU; "
                           "use device='cpu'")
    from . import cuda_kernels
    # 2**24 values per sketch block: few enough blocks that launches do not matter, small enough
    # that the passes' temporaries (keys, ids, masks: about 20 bytes a value) stay near 0.3 GB.
    return Backend(name="cuda", xp=cupy, kernels=cuda_kernels, sketch_block_values=1 << 24)
