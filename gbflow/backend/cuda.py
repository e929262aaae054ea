"""The CUDA backend: CuPy arrays, the CUDA kernels, copies to and from page-locked memory."""
from __future__ import annotations

import collections
import contextlib
import logging
import mmap
import os
import sys
import threading

import numpy as np

from . import cuda_pages
from .arrays import on_gpu
from .base import Backend, PendingCopies
from .common import aligned_slots

logger = logging.getLogger("gbflow")


# Host arrays smaller than this are copied from pageable memory: registering and releasing them
# (some 0.05 ms a MB, plus a call each) would save little on copies of a few milliseconds.
_REGISTER_BYTES = 1 << 24


def _registrable(a) -> bool:
    """Whether a host array may be page-locked in place: a large contiguous NumPy array whose
    memory is not a file mapping (locking a writable map pins the whole file in memory)."""
    if not isinstance(a, np.ndarray) or a.nbytes < _REGISTER_BYTES or \
            not (a.flags.c_contiguous or a.flags.f_contiguous):
        return False
    base, seen = a, set()
    while base is not None and id(base) not in seen:  # what owns the memory, to the end
        seen.add(id(base))
        if isinstance(base, (np.memmap, mmap.mmap)):
            return False
        base = base.obj if isinstance(base, memoryview) else getattr(base, "base", None)
    return True


class _Registry:
    """The host ranges this process has registered with the driver, with how many blocks use
    each: a range is registered by its first user and released by its last. Two trainings on
    one array, in two threads, share its registration; a block whose array overlaps ranges
    registered already (a row slice of another block's array) holds those instead, since CuPy
    copies from them directly: the first block to finish does not unpin memory another still
    copies from. (A thread copying such an array outside any block is not counted.)"""

    def __init__(self):
        self._lock = threading.Lock()
        self._users: dict = {}  # (address, bytes) -> blocks using the registration

    def acquire(self, cupy, a) -> list:
        """The registered ranges the block now holds for ``a`` (a registration of its own, or
        those it overlaps; none where the driver refuses it and nothing overlaps)."""
        start, size = a.ctypes.data, a.nbytes
        with self._lock:
            held = [k for k in self._users if k[0] < start + size and start < k[0] + k[1]]
            if not held:
                try:
                    cupy.cuda.runtime.hostRegister(start, size, 0)
                except cupy.cuda.runtime.CUDARuntimeError:  # not pinnable (read-only maps)
                    return []
                held = [(start, size)]
                self._users[held[0]] = 0
            for key in held:
                self._users[key] += 1
            return held

    def release(self, cupy, keys: list) -> None:
        with self._lock:
            for key in keys:
                self._users[key] -= 1
                if self._users[key] == 0:
                    del self._users[key]
                    try:
                        cupy.cuda.runtime.hostUnregister(key[0])
                    except cupy.cuda.runtime.CUDARuntimeError:
                        pass  # the driver keeps it registered: nothing more to do here


_registry = _Registry()


class CudaBackend(Backend):
    """CuPy arrays on the current GPU and ``cuda_kernels``. The device runs asynchronously
    (``queues_ahead``): the host queues work and waits only where it reads results."""

    name = "cuda"
    queues_ahead = True
    # 2**23 values per sketch block: few enough blocks that launches do not matter, small enough
    # that the passes' temporaries (keys, ids, masks: about 25 bytes a value) stay near 0.2 GB
    # (2**24 blocks made the sketch the stage of training's peak device memory).
    sketch_block_values = 1 << 23

    def __init__(self):
        import cupy

        from . import cuda_kernels
        super().__init__(cupy, cuda_kernels)
        cuda_kernels.watch_cupy()  # CuPy's own compiles timed apart from the stages too

    @property
    def supports_nccl(self) -> bool:
        from . import nccl
        return nccl.available()

    @property
    def device_key(self) -> str:
        return self.xp.cuda.Device().pci_bus_id

    def plan_rows_per_block(self, n_rows: int) -> int:
        return self.kernels.rows_per_block(n_rows)

    def _asarray(self, array):
        return self.xp.asarray(array)

    def fused(self, function, name: str):
        """``cupy.fuse``: compiled at the first call for its argument types, then cached."""
        return self.xp.fuse(kernel_name=name)(function)

    def to_host_all(self, arrays) -> list:
        """Several arrays as NumPy arrays, the device ones in one device-to-host copy (each copy
        waits for the device, and a tree level needs its split results and the previous
        partition's left counts) through a reused page-locked buffer; host arrays pass
        through."""
        if not any(on_gpu(a) for a in arrays):
            return [np.asarray(a) for a in arrays]
        offsets, total = aligned_slots([a.nbytes if on_gpu(a) else 0 for a in arrays])
        total = max(total, 8)
        if getattr(_pinned, "size", 0) < total:
            _pinned.size = max(total, 2 * getattr(_pinned, "size", 0), 1 << 16)
            _pinned.memory = self.xp.cuda.alloc_pinned_memory(_pinned.size)
        return _copies(self.xp, arrays, _pinned.memory).wait()

    def to_host_later(self, arrays) -> PendingCopies:
        """Several arrays as NumPy arrays, fetched without waiting: the copies are queued on the
        current stream now (into page-locked memory of their own; one copy per allocation that
        the arrays follow each other in) and ``wait()`` waits for them alone, not for the work
        queued after them. The arrays must not change before the copies run (stream order sees
        to that for work queued later on the same stream)."""
        if not any(on_gpu(a) for a in arrays):
            return super().to_host_later(arrays)
        return _copies(self.xp, arrays, pinned=None)

    def to_page(self, array):
        """``array`` copied into page-locked host memory of its own (a NumPy array of the same
        shape and dtype): the host-to-device copies of paged training run at the bus's speed
        from there, and asynchronously."""
        host = np.frombuffer(self.xp.cuda.alloc_pinned_memory(max(int(array.nbytes), 1)),
                             dtype=array.dtype, count=int(array.size)).reshape(array.shape)
        if on_gpu(array):
            self.xp.ascontiguousarray(array).get(out=host)
        else:
            host[...] = array
        return host

    def page_reader(self, pages: list):
        return cuda_pages.StreamedPages(self.xp, pages)

    def scatter_page_rows(self, pages: list, places: list, room: int, out) -> None:
        """See ``Backend.scatter_page_rows``. Pages of ``to_page``'s page-locked memory are
        read by one kernel where they lie (unified addressing maps page-locked host memory into
        the device's address space): only the kept rows cross the bus. 20% of 10M 32-byte
        rows in 43 pages: 2.6 ms in one launch against 7.8 ms a launch a page (H200). Other
        host pages, and places that are not C-contiguous, go through the copying path."""
        if not cuda_pages.scatter_rows(self.kernels, pages, places, room, out):
            super().scatter_page_rows(pages, places, room, out)

    def predict_pages_binned(self, pages: list, n_features: int, feature, bin_threshold,
                             default_left, left, right, value, tree_root, tree_group,
                             outs: list, cat_start=None, cat_bits=None) -> None:
        """See ``Backend.predict_pages_binned``. Pages of ``to_page``'s page-locked memory are
        walked by one kernel where they lie, each row read once (a block stages its rows in
        shared memory); others, and rows over 1 KB, page by page."""
        arrays = [feature, bin_threshold, default_left, left, right, value, tree_root,
                  tree_group]
        if not cuda_pages.predict_rows(self.kernels, pages, n_features, arrays, outs,
                                       (cat_start, cat_bits)):
            super().predict_pages_binned(pages, n_features, *arrays, outs, cat_start, cat_bits)

    @contextlib.contextmanager
    def host_registered(self, arrays):
        """Host arrays of at least ``_REGISTER_BYTES`` page-locked in place for the block
        (cudaHostRegister, ``_registry``), so that their copies to the device (the sketch's and
        binning's blocks, a whole copy: CuPy copies page-locked memory directly, other host
        memory through a pinned buffer of its own at about 9 GB/s on an H200 host) run at the
        bus's speed (55 GB/s there); registering 1.1 GB took 0.04 s and releasing it 0.02 s.
        Memory maps (a writable one would be locked whole), arrays the driver refuses and
        arrays that are not contiguous are copied as before. Each block waits for its stream's
        copies before it releases; a range stays registered while any block in the process
        uses it (``_Registry``)."""
        held = []
        try:
            for a in arrays:
                if _registrable(a):
                    held += _registry.acquire(self.xp, a)
            yield
        finally:
            try:
                if held:
                    self.xp.cuda.get_current_stream().synchronize()
            finally:
                _registry.release(self.xp, held)

    def row_numbers(self, out) -> None:
        """0, 1, ..., len(out) - 1 written into ``out`` (a C-contiguous CuPy integer array) by
        one kernel: no temporary (a recorded level loop would hold it)."""
        if out.size:
            _row_numbers(self.xp)(out)

    def recorder(self, most: int = 8):
        """A ``GraphRecorder`` (CUDA graphs), or the plain one where the environment's
        GBFLOW_CUDA_GRAPHS is 0 (to compare)."""
        if os.environ.get("GBFLOW_CUDA_GRAPHS", "") == "0":
            return super().recorder(most)
        return GraphRecorder(self.xp, self.kernels, most)

    def device_memory_reader(self):
        """Bytes of the GPU current now that CuPy's memory pool has given to arrays (not what
        it keeps cached for later ones), readable from another thread (whose current device
        is its own: the reading switches to this one). Where another allocator serves this
        thread (one the user chose, ``own_memory_pool``), the pool holds nothing: the device's
        memory in use as the driver reports it instead (every user's, cached blocks too)."""
        cupy, device = self.xp, self.xp.cuda.runtime.getDevice()
        pool = cupy.get_default_memory_pool()
        pooled = cupy.cuda.get_allocator() == pool.malloc

        def read() -> int:
            with cupy.cuda.Device(device):
                if pooled:
                    return int(pool.used_bytes())
                free, total = cupy.cuda.runtime.memGetInfo()
                return int(total - free)
        return read

    def device_free_bytes(self) -> int | None:
        """Free bytes of the current GPU, counting what CuPy's pool holds unused."""
        free, _ = self.xp.cuda.runtime.memGetInfo()
        pool = self.xp.get_default_memory_pool()
        return int(free + pool.total_bytes() - pool.used_bytes())

    def free_cached_memory(self) -> None:
        """Give the device memory that CuPy's pool holds but no array uses back to the GPU
        (other users of the GPU, cuDF and other processes, get it back too)."""
        self.xp.get_default_memory_pool().free_all_blocks()

    @contextlib.contextmanager
    def own_memory_pool(self, unless_chosen: bool = False):
        """Within this block, this thread's GPU arrays come from CuPy's memory pool, whatever
        allocator the process set. Dask-CUDA workers hand CuPy to RMM's allocator, by default
        without a pool, and so does ``import cudf`` in any process: every array then costs a
        cudaMalloc and a cudaFree (which waits for the device); training in a worker ran 3.5x
        slower than in-process, and in-process 1M x 28 rows 1.8-2.2x slower once cuDF was
        imported. The pool's cached blocks are freed to the device at the end.
        unless_chosen: only RMM's allocator over its default resource (that cudaMalloc per
        array) is bypassed; CuPy's pool already serving, an RMM pool or managed memory the
        user set up, or any other allocator, is kept (nothing is done)."""
        pool = self.xp.get_default_memory_pool()
        if unless_chosen and not _rmm_default(self.xp.cuda.get_allocator()):
            yield
            return
        try:
            with self.xp.cuda.using_allocator(pool.malloc):
                yield
        finally:
            pool.free_all_blocks()


def _rmm_default(allocator) -> bool:
    """Whether ``allocator`` (CuPy's current) is RMM's over RMM's default resource, a
    cudaMalloc and a synchronising cudaFree per array: what ``import cudf`` and Dask-CUDA set
    when nobody configured RMM."""
    # CuPy's own pool's malloc is a built-in method: its __module__ is None
    if not (getattr(allocator, "__module__", None) or "").startswith("rmm"):
        return False
    rmm = sys.modules.get("rmm")
    try:
        resource = rmm.mr.get_current_device_resource()
    except Exception:  # noqa: BLE001 - an RMM gbflow does not know: keep its choice
        return False
    return type(resource).__name__ == "CudaMemoryResource"


_ROW_NUMBERS = {}


def _row_numbers(cupy):
    """The kernel writing each element's index into it (one, made at first use)."""
    if "kernel" not in _ROW_NUMBERS:
        _ROW_NUMBERS["kernel"] = cupy.ElementwiseKernel("", "T out", "out = (T)i",
                                                        "gbflow_row_numbers")
    return _ROW_NUMBERS["kernel"]


class GraphRecorder:
    """Device work recorded once as a CUDA graph and replayed: ``run(key, queue)``.

    A planned tree of small data is some fifty small kernels whose launches cost the host more
    than the device spends on them (CuPy's argument handling and gbflow's checks, about 20 us
    each). The first ``run`` of a key calls ``queue()`` as it is (compiling kernels, sizing
    reused buffers); the second records what it queues (stream capture) into a graph and
    launches it; later runs of the key launch the graph alone, on the current stream, and
    return the first recording's result (the same arrays, written again). The key must name
    everything ``queue`` reads from the host (sizes, scalars, the device arrays it reads or
    writes: ``address``): the same key must mean the same launches with the same arguments.
    ``queue`` may read nothing back from the device and copy nothing from the host. Memory
    allocated while recording is held as long as its graph is (the graph reads and writes it
    at every launch). At most ``most`` graphs are kept, the least recently launched dropped.
    If recording fails (an operation that cannot be recorded), the key's work is queued as it
    is from then on.
    """

    records = True

    def __init__(self, cupy, kernels, most: int = 8):
        self._cupy, self._kernels = cupy, kernels
        self._most = most
        self._graphs = collections.OrderedDict()  # key -> (graph, result, held memory)
        self._seen = collections.OrderedDict()  # keys run once, or that could not be recorded
        self._stream = None

    @staticmethod
    def address(array) -> tuple:
        """What identifies a device array in a key: its pointer, shape, strides and dtype."""
        return (array.data.ptr, array.shape, array.strides, array.dtype.str)

    def holds(self, key) -> bool:
        """Whether ``run(key, ...)`` would launch a recorded graph."""
        return key is not None and key in self._graphs

    def clear(self) -> None:
        """Drop every graph and the memory it holds (training is over: nothing replays them)."""
        self._graphs.clear()
        self._seen.clear()

    def run(self, key, queue):
        """``queue()``'s result, its work queued on the current stream: replayed, recorded or
        queued as it is (class docstring). key None: queued as it is."""
        if key is None:
            return queue()
        if key in self._graphs:
            self._graphs.move_to_end(key)
            graph, result, _ = self._graphs[key]
            graph.launch(stream=self._cupy.cuda.get_current_stream())
            return result
        if key not in self._seen:
            self._remember(self._seen, key, False)
            return queue()
        if self._seen[key]:  # recording it failed before
            return queue()
        try:
            graph, result, held = self._record(queue)
        except Exception as error:  # noqa: BLE001 - any failure: queue it as it is
            logger.debug("gbflow: could not record device work as a CUDA graph (%s); queued "
                         "launch by launch", error)
            self._seen[key] = True
            return queue()
        self._remember(self._graphs, key, (graph, result, held))
        graph.launch(stream=self._cupy.cuda.get_current_stream())
        return result

    def _remember(self, table, key, value) -> None:
        table[key] = value
        while len(table) > self._most:
            table.popitem(last=False)

    def _record(self, queue):
        cupy = self._cupy
        if self._stream is None:
            self._stream = cupy.cuda.Stream(non_blocking=True)
        stream = self._stream
        allocate = cupy.cuda.get_allocator()
        held = []

        def malloc(size):
            memory = allocate(size)
            held.append(memory)
            return memory

        with cupy.cuda.using_allocator(malloc), self._kernels.holding(held), stream:
            stream.begin_capture()
            try:
                result = queue()
            except BaseException:
                with contextlib.suppress(Exception):
                    stream.end_capture()
                raise
            graph = stream.end_capture()
        return graph, result, held


_pinned = threading.local()  # per thread: training tasks of one process may run side by side


def _copies(cupy, arrays, pinned) -> PendingCopies:
    """Every device array of ``arrays`` copied asynchronously into ``pinned`` (page-locked
    memory large enough for their 8-byte aligned slots; None: a new block from CuPy's pinned
    pool), an event after the copies; ``wait`` waits for the event and returns host arrays of
    the slots, views of one host copy of the buffer (host arrays pass through)."""
    device = [cupy.ascontiguousarray(a) if on_gpu(a) else None for a in arrays]
    offsets, total = aligned_slots([0 if d is None else d.nbytes for d in device])
    if pinned is None:
        pinned = cupy.cuda.alloc_pinned_memory(max(total, 8))
    buffer = np.frombuffer(pinned, dtype=np.uint8, count=max(total, 8))
    stream = cupy.cuda.get_current_stream()
    runtime = cupy.cuda.runtime
    base = buffer.ctypes.data
    copies = []  # [host offset, device pointer, bytes, allocation]: views of one allocation
    # that follow each other there as they do in the buffer share one copy (a copy must not
    # span two allocations, even adjacent ones: the runtime rejects it)
    for d, offset in zip(device, offsets):
        if d is not None and d.size:
            last = copies[-1] if copies else None
            # joined when the gap before it (padding to 8 bytes) is the same on both sides
            if last is not None and d.data.mem is last[3] and \
                    offset - last[0] - last[2] < 8 and d.data.ptr - last[1] == offset - last[0]:
                last[2] = offset - last[0] + d.nbytes
            else:
                copies.append([offset, d.data.ptr, d.nbytes, d.data.mem])
    for host_offset, pointer, nbytes, _ in copies:
        # the runtime call itself: ndarray.get cost 35 us of host time a copy
        runtime.memcpyAsync(base + host_offset, pointer, nbytes, runtime.memcpyDeviceToHost,
                            stream.ptr)
    done = stream.record()
    # what the host views need, not the device arrays (their memory may go once copied)
    slots = [None if d is None else (offset, d.nbytes, d.dtype, d.shape)
             for d, offset in zip(device, offsets)]
    del device, copies

    def finish():
        done.synchronize()
        host = buffer[:total].copy()  # one copy: a planned tree fetches some seventy arrays
        return [np.asarray(a) if slot is None else
                host[slot[0]:slot[0] + slot[1]].view(slot[2]).reshape(slot[3])
                for a, slot in zip(arrays, slots)]
    return PendingCopies(finish)
