"""What a backend is: an array namespace, the kernels for its arrays, and the device's habits."""
from __future__ import annotations

import contextlib
import types

import numpy as np

from ..csr import CSR


class PendingCopies:
    """Host copies that may still be on their way from the device (``Backend.to_host_later``)."""

    def __init__(self, finish):
        self._finish = finish

    def wait(self) -> list:
        """The NumPy arrays, once their copies are done."""
        return self._finish()


class HostPages:
    """Pages of binned rows read where they lie (the CPU: host memory is the device's)."""

    def __init__(self, pages: list):
        self.pages = pages

    def get(self, i: int):
        """Page ``i`` as the kernels read it."""
        return self.pages[i]


class Unrecorded:
    """``Backend.recorder`` where nothing is recorded: every run queues its work again."""

    records = False

    def holds(self, key) -> bool:
        return False

    def clear(self) -> None:
        """Nothing is recorded."""

    def run(self, key, queue):
        return queue()


class Backend:
    """An array namespace ``xp`` (NumPy or CuPy) and ``kernels``, a module with the functions of
    ``numpy_kernels`` (same names and signatures) for its arrays. Core modules receive one and
    never test for a device: what differs between devices is a method or a flag here.

    Flags: ``name`` ("cpu" or "cuda", for reports); ``queues_ahead``: the device runs the kernels
    asynchronously, so a loop that queues a whole tree without reading anything back pays
    (planned trees); ``supports_nccl``: NCCL can sum its arrays across processes;
    ``indexes_sparse_columns``: the sparse store also keeps its entries by feature, for the
    kernels' ``split_column`` (the CPU's walks a feature's entries; a GPU thread searches its own
    row's); ``sketch_block_values``: values per block of rows in the quantile sketch's
    passes (small on the CPU, where large temporaries are slow to fault in; large on the GPU,
    where each block costs launches and a synchronisation); ``grow_whole_tree``: None, or a
    function growing a whole depthwise tree of one shard's dense bins and sparse entries in one
    call, finished and added to the training margins (the ``numpy_kernels.grow_whole_tree``
    signature; the CPU's, where the host's work between levels costs more than the levels do on
    small data); ``grow_whole_round``: with it, a round's trees grown so in one call
    (``numpy_kernels.grow_whole_round``'s signature).
    """

    name = ""
    queues_ahead = False
    grow_whole_tree = None
    grow_whole_round = None
    indexes_sparse_columns = False
    sketch_block_values = 1 << 20

    def __init__(self, xp: types.ModuleType, kernels: types.ModuleType):
        self.xp, self.kernels = xp, kernels

    def __repr__(self) -> str:
        return f"<gbflow {self.name} backend, kernels {self.kernels.__name__}>"

    def plan_rows_per_block(self, n_rows: int) -> int:
        """Rows per block of the level plans' work lists for a shard of ``n_rows`` rows (any
        choice gives the same model: integer sums, stable partition)."""
        from .common import rows_per_block
        return rows_per_block(n_rows)

    @property
    def supports_nccl(self) -> bool:
        """Whether NCCL can sum this backend's arrays across processes."""
        return False

    @property
    def device_key(self) -> str | None:
        """Which physical device this process computes on (a GPU's PCI bus id), or None for
        the host: NCCL takes at most one rank a GPU."""
        return None

    def to_host(self, array):
        """The array as a NumPy array (a copy from the device; a no-op for host arrays)."""
        from .arrays import to_host
        return to_host(array)

    def to_host_all(self, arrays) -> list:
        """Several arrays as NumPy arrays; host arrays pass through."""
        return [self.to_host(a) for a in arrays]

    def to_host_later(self, arrays) -> PendingCopies:
        """Several arrays as NumPy arrays, fetched without waiting where the device allows it.
        The arrays may be written again before ``wait()``: the copies are taken now."""
        host = [np.array(self.to_host(a)) for a in arrays]
        return PendingCopies(lambda: host)

    def asarray(self, array):
        """The array (or ``gbflow.csr.CSR``, array by array) on this backend's device; no copy
        when it is already there."""
        if isinstance(array, CSR):
            return CSR(indptr=self.asarray(array.indptr), indices=self.asarray(array.indices),
                       data=self.asarray(array.data), n_cols=array.n_cols)
        return self._asarray(array)

    def _asarray(self, array):
        return self.to_host(array)

    def to_page(self, array):
        """A page of paged training data (``stores.DenseStore``): ``array`` (host or device) in
        host memory the device reads fastest from (page-locked on the GPU); on the CPU the host
        array itself (no copy when it is one)."""
        return self.to_host(array)

    def scatter_page_rows(self, pages: list, places: list, room: int, out) -> None:
        """Row i of ``pages[j]`` (each an (n_j, W) ``to_page`` page) written to row
        ``places[j][i]`` of ``out`` ((room + 1, W) on the device, the pages' dtype) where
        ``0 <= places[j][i] < room``; other rows are not kept. ``places[j]``: (n_j,) int64 on
        the device. Row ``room`` of ``out`` is a spare: what it holds afterwards is unspecified.
        Here each page is read whole (``asarray``) and every row written (those not kept to the
        spare): no wait for the device."""
        for page, place in zip(pages, places, strict=True):
            check_scatter(page, place, room, out)
        xp = self.xp
        for page, place in zip(pages, places):
            place = xp.where((place >= 0) & (place < room), place, room)
            word = row_word(page)  # rows copied as whole words, not value by value
            out.view(word)[place] = self.asarray(page).view(word)

    def predict_pages_binned(self, pages: list, n_features: int, feature, bin_threshold,
                             default_left, left, right, value, tree_root, tree_group,
                             outs: list, cat_start=None, cat_bits=None) -> None:
        """``kernels.predict_margins_binned`` on every page: ``outs[j]`` ((n_j, G) float64 on
        the device, any strides) += the trees walked on the first ``n_features`` bins of
        ``pages[j]`` (an (n_j, W) ``to_page`` page); the other arguments as that kernel's. The
        same float64 additions in the same order as the kernel on each page. Here page by
        page, each page read whole (``asarray``); a margin matrix that is not C-contiguous is
        walked in a C-contiguous copy, written back."""
        check_page_walk(pages, n_features, outs)
        for page, out in zip(pages, outs):
            bins = self.asarray(page)[:, :n_features]
            target = self.xp.ascontiguousarray(out)  # (out itself when C-contiguous)
            self.kernels.predict_margins_binned(bins, feature, bin_threshold, default_left,
                                                left, right, value, tree_root, tree_group,
                                                target, cat_start, cat_bits)
            if target is not out:
                out[...] = target

    @contextlib.contextmanager
    def host_registered(self, arrays):
        """Within this block, the device copies from these arrays (host NumPy arrays; others,
        CSRs and device arrays among them, are skipped) run at the bus's speed where the
        backend can pin them in place (the GPU: page-locked for the block, then released;
        nothing is copied). On the CPU nothing."""
        yield

    def page_reader(self, pages: list):
        """What reads ``to_page`` pages back for the kernels: ``get(i)`` gives page i on the
        device. On the CPU the pages themselves; on the GPU each page is copied into one of two
        device buffers, the next page's copy overlapping the kernels that read this one."""
        return HostPages(pages)

    def device_memory_reader(self):
        """A function of no arguments giving the device bytes arrays hold at the time of the
        call, on the device current when this was called, from any thread; it gives None
        where arrays are host memory (the CPU: see the process's resident memory instead)."""
        return lambda: None

    def device_free_bytes(self) -> int | None:
        """Bytes free on the device now, or None where training data lives in host memory (the
        CPU: nothing is paged unless asked)."""
        return None

    def fused(self, function, name: str):
        """``function`` (elementwise arithmetic on this backend's arrays, array arguments only)
        made into one kernel called ``name`` (an identifier) where the backend can (the GPU: one
        launch instead of one per operation, which matters for what runs every round); else
        ``function`` itself."""
        return function

    def free_cached_memory(self) -> None:
        """Give memory that an allocator's pool holds but no array uses back to the device.
        Called between stages whose temporaries differ in size (sketch, routing, training), so
        that cached blocks of one stage do not add to the next one's peak."""

    @contextlib.contextmanager
    def own_memory_pool(self, unless_chosen: bool = False):
        """Within this block, this thread's device arrays come from the backend's own pool,
        whatever allocator the process set (unless_chosen: only where the process's allocator
        is a slow default nobody chose)."""
        yield

    def row_numbers(self, out) -> None:
        """Write 0, 1, ..., len(out) - 1 into the (n,) integer array ``out`` in place."""
        out[...] = self.xp.arange(len(out), dtype=out.dtype)

    def recorder(self, most: int = 8):
        """What repeats a sequence of device work cheaply: its ``run(key, queue)`` calls
        ``queue()`` (work queued on the device that reads nothing back) and returns its result.
        Here it simply calls it; the GPU's records the work once and replays the record for
        the same key (``cuda.GraphRecorder``, keeping at most ``most`` records)."""
        return Unrecorded()

    @contextlib.contextmanager
    def limited_threads(self, n: int | None, cells: int | None = None):
        """Within this block, this thread's kernels use at most ``n`` CPU threads (None: no
        limit, the setting as it is, or, given the training data's ``cells`` (rows times
        features), as many as that much data keeps busy). Yields the thread count used, or
        None where the kernels do not run on CPU threads."""
        yield None


def check_scatter(page, place, room: int, out) -> None:
    """``Backend.scatter_page_rows``' arguments checked before anything is read."""
    if page.ndim != 2:
        raise ValueError(f"scatter_page_rows: the page must be 2-D, got shape {page.shape}")
    if out.ndim != 2 or page.shape[1] != out.shape[1] or \
            page.dtype != out.dtype or out.shape[0] != room + 1:
        raise ValueError(f"scatter_page_rows: out must be ({room + 1}, {page.shape[-1]}) "
                         f"{page.dtype} for a page of shape {page.shape}, got {out.shape} "
                         f"{out.dtype}")
    if place.shape != (page.shape[0],) or place.dtype != np.int64:
        raise ValueError(f"scatter_page_rows: place must be ({page.shape[0]},) int64, got "
                         f"{place.shape} {place.dtype}")


def check_page_walk(pages: list, n_features: int, outs: list) -> None:
    """``Backend.predict_pages_binned``' pages and margin matrices checked before any walk."""
    if len(pages) != len(outs):
        raise ValueError(f"predict_pages_binned: {len(pages)} page(s) but {len(outs)} margin "
                         f"matrices")
    for j, (page, out) in enumerate(zip(pages, outs)):
        if page.ndim != 2 or page.shape[1] < n_features or out.ndim != 2 or \
                out.shape[0] != page.shape[0] or out.dtype != np.float64:
            raise ValueError(f"predict_pages_binned: page {j} of shape {page.shape} needs 2-D "
                             f"bins of at least {n_features} columns and a float64 margin "
                             f"matrix of {page.shape[0]} rows, got {out.shape} {out.dtype}")


def row_word(page):
    """The widest unsigned integer dtype (up to 8 bytes) that a row of (n, W) ``page`` is a
    whole number of: a 32-byte padded row is 4 uint64."""
    row_bytes = page.shape[1] * page.itemsize
    return next(np.dtype(f"uint{8 * b}") for b in (8, 4, 2, 1) if row_bytes % b == 0)
