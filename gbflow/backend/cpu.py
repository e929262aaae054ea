"""The CPU backend: NumPy arrays and the numba kernels (or their NumPy twins, for tests)."""
from __future__ import annotations

import contextlib

import numba
import numpy as np

from . import cpu_kernels, cpu_round, cpu_tree
from .base import Backend
from .compiling import watch_numba

# Small trees do not keep many threads busy: each level's parallel regions cost more than the
# rows they share. On 16 cores (the GPU machine's Xeon host, 100 rounds of depth 6), the best
# thread counts were 4-8 for 10,000 x 28 (0.31 s against 0.44 s on 16 threads), 8-16 for
# 100,000 x 28, and 2 for digits' 1,797 x 64 (0.55 s against 0.72 s); one thread per 2**16
# cells gives 5, 16 and 2. On two cores it changes nothing for these shapes. The thread count
# does not change a model (the kernels' sums are integers).
CELLS_PER_THREAD = 1 << 16


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
        self.grow_whole_round = cpu_round.grow_whole_round if kernels is cpu_kernels else \
            kernels.grow_whole_round
        if kernels is cpu_kernels:
            watch_numba()  # numba's compiles timed apart from the stages, and announced

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
