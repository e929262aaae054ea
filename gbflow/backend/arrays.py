"""Where an array lives (host or GPU), and copies of it to the host or into a namespace."""
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


def to_device(xp, array):
    """``array`` (NumPy or already in ``xp``) in the array namespace ``xp``: NumPy's asarray, or
    for CuPy a host array copied by one cudaMemcpy from its own memory. CuPy's asarray first
    copies a host array into a page-locked buffer of its own (about 9 GB/s on an H200 host)
    even when the array is page-locked already; read directly, an array registered with the
    device (``Backend.host_registered``) crosses at the bus's speed (55 GB/s there), and an
    unregistered one as fast as before. A strided host view is made contiguous on the host
    first, as CuPy does."""
    if xp is np or on_gpu(array) or not isinstance(array, np.ndarray) or array.ndim == 0:
        return xp.asarray(array)
    host = np.ascontiguousarray(array)
    out = xp.empty(host.shape, dtype=host.dtype)
    if host.size:
        out.set(host)
    return out
