"""Where an array lives (host or GPU) and host copies of it, found without importing CuPy."""
from __future__ import annotations

import numpy as np

from ..csr import CSR


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
