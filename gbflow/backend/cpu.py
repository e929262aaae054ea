"""The CPU backend: NumPy arrays and the numba kernels (or their NumPy twins, for tests)."""
from __future__ import annotations

import contextlib

import numpy as np

from . import cpu_kernels
from .base import Backend


class CpuBackend(Backend):
    """NumPy arrays; ``kernels`` is ``cpu_kernels`` (numba, multi-threaded) or, under
    ``reference_kernels()``, ``numpy_kernels``."""

    name = "cpu"
    indexes_sparse_columns = True

    def __init__(self, kernels=cpu_kernels):
        super().__init__(np, kernels)

    @contextlib.contextmanager
    def limited_threads(self, n: int | None):
        """Within this block, this thread's numba kernels use at most ``n`` threads (a Dask
        worker's share of the cores: a LocalCluster of several workers, each with numba's
        default of every core, ran 4x to 40x slower from oversubscription; ``nthread``); None
        leaves numba's setting as it is. Yields the thread count used."""
        with cpu_kernels.limited_threads(n) as used:
            yield used
