"""Device selection: the only package that knows about devices and hands out array namespaces.

A backend (``CpuBackend``, ``CudaBackend``) bundles an array namespace ``xp`` (NumPy, or CuPy) with
the kernels that work on its arrays; what differs between devices is a method or a flag of it.
Core modules receive a backend and never test for a device. CuPy is imported only when the CUDA
backend is asked for, so ``import gbflow`` needs no GPU stack.
"""
from __future__ import annotations

import contextlib

import numpy as np

from . import numpy_kernels
from .arrays import on_gpu, to_host
from .base import Backend, PendingCopies
from .common import packed_empty
from .cpu import CpuBackend

__all__ = ["DEVICES", "Backend", "PendingCopies", "backend_for", "cuda_available", "get_backend",
           "kernels_for", "on_gpu", "packed_empty", "reference_kernels", "to_host"]

DEVICES = ("auto", "cpu", "cuda")

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


# "auto" trains host data of at most this many cells (rows times features) on the CPU even where
# a GPU is present: a small tree's levels are launches and waits on the GPU. On an H100 and its
# 16-core host, 10,000 x 28 for 100 rounds took 0.77 s on the GPU and 0.31 s on the CPU; at
# 1,000,000 x 28 the GPU is several times faster.
AUTO_CPU_CELLS = 1 << 19


def get_backend(device: str = "auto", data_on_gpu: bool = False,
                cells: int | None = None) -> Backend:
    """The backend for ``device`` ("auto", "cpu" or "cuda").

    "auto" is the GPU when the data is already there (``data_on_gpu``), else the GPU when one is
    present and the data's ``cells`` (rows times features; None: unknown) are more than
    ``AUTO_CPU_CELLS``, else the CPU. "cuda" without a usable GPU and CuPy is an error that
    says what is missing.
    """
    if device not in DEVICES:
        raise ValueError(f"device={device!r} is not one of {DEVICES}")
    if device == "auto":
        small = cells is not None and cells <= AUTO_CPU_CELLS
        device = "cuda" if data_on_gpu or (not small and cuda_available()) else "cpu"
    if device == "cuda":
        return _cuda_backend()
    return CpuBackend(numpy_kernels) if _reference_only else CpuBackend()


def kernels_for(xp):
    """The kernels module for arrays of the namespace ``xp``: the CPU's for NumPy (its NumPy twins
    under ``reference_kernels()``), the GPU's for CuPy."""
    return get_backend("cpu" if xp is np else "cuda").kernels


def backend_for(array) -> Backend:
    """The backend of the device an array lives on (prediction runs where the data is)."""
    return get_backend("cuda" if on_gpu(array) else "cpu")


def _cuda_backend() -> Backend:
    try:
        import cupy  # noqa: F401
    except ImportError as e:
        raise RuntimeError(
            "device='cuda' needs CuPy (pip install 'gbflow[cuda13]', or the conda environment in "
            "environment.yml); use device='cpu' otherwise") from e
    if not cuda_available():
        raise RuntimeError("device='cuda': CuPy is installed but sees no usable CUDA GPU; "
                           "use device='cpu'")
    from .cuda import CudaBackend
    return CudaBackend()
