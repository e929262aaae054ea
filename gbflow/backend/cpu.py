"""The CPU backend: NumPy arrays and the numba kernels (or their NumPy twins, for tests)."""
from __future__ import annotations

import concurrent.futures
import contextlib
import contextvars
import os
import threading

import numba
import numpy as np

from . import cpu_kernels, cpu_tree
from .base import Backend
from .compiling import watch_numba

# Small trees do not keep many threads busy: each level's parallel regions cost more than the
# rows they share. On 16 cores (the GPU machine's Xeon host, 100 rounds of depth 6), the best
# thread counts were 4-8 for 10,000 x 28 (0.31 s against 0.44 s on 16 threads), 8-16 for
# 100,000 x 28, and 2 for digits' 1,797 x 64 (0.55 s against 0.72 s); one thread per 2**16
# cells gives 5, 16 and 2. On two cores it changes nothing for these shapes. The thread count
# does not change a model (the kernels' sums are integers).
CELLS_PER_THREAD = 1 << 16

# ``row_blocks``: a thread takes at least this many rows (fewer: one call, no hand-off), and the
# blocks start at multiples of _BLOCK_ALIGN rows, so that every element sits at the same offset
# from a 64-element boundary as in one call (a SIMD loop's peeled or tail elements are the same).
ROWS_PER_BLOCK = 1 << 15
_BLOCK_ALIGN = 64
_pool_lock = threading.Lock()
_pool: list = []  # the process's one thread pool for row blocks, made at first use


def _block_pool() -> concurrent.futures.ThreadPoolExecutor:
    with _pool_lock:
        if not _pool:
            _pool.append(concurrent.futures.ThreadPoolExecutor(
                max_workers=os.cpu_count() or 1, thread_name_prefix="gbflow-rows"))
        return _pool[0]


def _joined(parts: list):
    """The blocks' results as one result: an array, or a tuple of arrays, in row order."""
    if isinstance(parts[0], tuple):
        return tuple(np.concatenate(column) for column in zip(*parts))
    return np.concatenate(parts)


class CpuBackend(Backend):
    """NumPy arrays; ``kernels`` is ``cpu_kernels`` (numba, multi-threaded) or, under
    ``reference_kernels()``, ``numpy_kernels``."""

    name = "cpu"
    indexes_sparse_columns = True

    def __init__(self, kernels=cpu_kernels):
        super().__init__(np, kernels)
        # a method's value per instance: the twin under ``reference_kernels()``
        self.grow_whole_tree = cpu_tree.grow_whole_tree if kernels is cpu_kernels else \
            kernels.grow_whole_tree
        self.finish_whole_tree = cpu_tree.finish_whole_tree if kernels is cpu_kernels else \
            kernels.finish_whole_tree
        if kernels is cpu_kernels:
            watch_numba()  # numba's compiles timed apart from the stages, and announced

    def row_blocks(self, function):
        """``function`` on blocks of at least ``ROWS_PER_BLOCK`` rows in as many threads as this
        thread's kernels may use (``limited_threads``), its results joined in row order. NumPy
        releases the GIL in its loops, so the blocks' arithmetic runs side by side: an
        evaluation set's sigmoid, and the training's logistic gradients, are one-thread
        ``np.exp`` calls otherwise (AVX2 machines have no SIMD float64 exp in NumPy: 10 ms for
        1M rows). Every element goes through the same operations as in one call, so the values
        are the same (tests/test_backend_rows.py). Side effect: a process-wide thread pool."""
        def on_blocks(*arrays):
            n = len(arrays[0])
            threads = min(numba.get_num_threads(), n // ROWS_PER_BLOCK)
            if threads < 2:
                return function(*arrays)
            bounds = [(n * k // threads) // _BLOCK_ALIGN * _BLOCK_ALIGN
                      for k in range(threads)] + [n]
            blocks = [tuple(a[lo:hi] for a in arrays) for lo, hi in zip(bounds, bounds[1:])]
            # the first block in this thread: it would only wait otherwise; the others in this
            # thread's context (NumPy's errstate lives there)
            later = [_block_pool().submit(contextvars.copy_context().run, function, *block)
                     for block in blocks[1:]]
            parts = [function(*blocks[0])] + [f.result() for f in later]
            return _joined(parts)
        return on_blocks

    @contextlib.contextmanager
    def limited_threads(self, n: int | None, cells: int | None = None):
        """Within this block, this thread's numba kernels use at most ``n`` threads (a Dask
        worker's share of the cores: a LocalCluster of several workers, each with numba's
        default of every core, ran 4x to 40x slower from oversubscription; ``nthread``). None
        leaves numba's setting as it is, or, given ``cells`` (the training data's rows times
        features), takes one thread per ``CELLS_PER_THREAD`` of them at most. Yields the thread
        count used."""
        if n is None and cells is not None:
            n = min(max(1, -(-int(cells) // CELLS_PER_THREAD)), numba.get_num_threads())
        with cpu_kernels.limited_threads(n) as used:
            yield used
