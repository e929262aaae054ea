"""Device selection: the only package that knows about devices and hands out array namespaces.

A ``Backend`` bundles an array namespace ``xp`` (NumPy here; CuPy with the CUDA backend) with the
kernels that work on its arrays. Core modules receive a backend and never test for a device.
"""
from __future__ import annotations

import contextlib
import dataclasses
import types

import numpy as np

from . import cpu_kernels, numpy_kernels

DEVICES = ("auto", "cpu", "cuda")


@dataclasses.dataclass(frozen=True)
class Backend:
    """An array namespace and the kernels for its arrays.

    name: "cpu" or "cuda". xp: the array module. kernels: a module with the functions of
    ``numpy_kernels`` (same names and signatures).
    """

    name: str
    xp: types.ModuleType
    kernels: types.ModuleType

    def to_host(self, array):
        """The array as a NumPy array (a no-op on the CPU)."""
        return np.asarray(array)


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


def get_backend(device: str = "auto") -> Backend:
    """The backend for ``device`` ("auto", "cpu" or "cuda").

    "auto" is the CPU until the CUDA backend exists; "cuda" is refused with a clear error for now.
    """
    if device not in DEVICES:
        raise ValueError(f"device={device!r} is not one of {DEVICES}")
    if device == "cuda":
        raise NotImplementedError(
            "device='cuda': gbflow's CUDA backend is not part of this version yet; "
            "use device='cpu' (or 'auto')")
    kernels = numpy_kernels if _reference_only else cpu_kernels
    return Backend(name="cpu", xp=np, kernels=kernels)
