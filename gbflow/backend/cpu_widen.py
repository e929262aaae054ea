"""numba kernels called with chosen arrays typed wider (any memory layout, read-only), so that
one compiled signature serves C-, F-ordered, strided, writable and read-only arrays alike.

numba compiles a kernel once per argument type, and an array's type includes its layout and
whether it is writable: the bins of 28 features are a strided view of their padded rows, those
of 32 fill them and are C-contiguous, a user's matrix may be Fortran-ordered or a read-only
memory map. Each is otherwise a compile of its own (a whole-tree grower's takes 15-35 s on two
cores), paid by every first training of a new shape and by ``gbflow compile`` once per layout.
"""
from __future__ import annotations

import inspect

import numpy as np
from numba import typeof, types

ANY_READ_ONLY = "A"  # any layout, read-only (the kernel only reads it)
ANY = "a"  # any layout, writable (the kernel writes it)
READ_ONLY = "R"  # its own layout, read-only


def _key(value):
    """What numba's type of ``value`` depends on, found without numba's ``typeof`` (which takes
    tens of microseconds an array: too slow for a kernel called every level) for plain arrays,
    scalars and tuples of them; anything else is keyed by its numba type itself."""
    kind = type(value)
    if kind is np.ndarray:
        flags = value.flags
        return (value.dtype, value.ndim, flags.c_contiguous, flags.f_contiguous,
                flags.writeable)
    if kind is tuple:
        return tuple(map(_key, value))
    if kind is int:  # int64 in range, else numba types it by its value
        return int if -(1 << 63) <= value < (1 << 63) else typeof(value)
    if kind in (bool, float, type(None)) or issubclass(kind, (np.bool_, np.number)):
        return kind
    return typeof(value)


def _widened(numba_type, how: str):
    if not isinstance(numba_type, types.Array):
        return numba_type
    layout = numba_type.layout if how == READ_ONLY else "A"
    return types.Array(numba_type.dtype, numba_type.ndim, layout,
                       readonly=how != ANY or not numba_type.mutable,
                       aligned=numba_type.aligned)


class Widened:
    """``dispatcher`` (an ``njit`` function) called from Python, positional arguments only, with
    the arguments at the keys of ``how`` typed wider: ``ANY_READ_ONLY`` (any layout,
    read-only), ``ANY`` (any layout) or ``READ_ONLY`` (read-only); the others as numba types
    them. The first call of each combination of argument types compiles the widened signature
    (or loads it from numba's disk cache) and later ones call it directly. Calls from other
    compiled code go to ``dispatcher`` as usual (they pass the types they have)."""

    def __init__(self, dispatcher, how: dict):
        if any(h not in (ANY_READ_ONLY, ANY, READ_ONLY) for h in how.values()):
            raise ValueError(f"Widened: unknown widening in {how}")
        n_params = len(inspect.signature(dispatcher.py_func).parameters)
        if any(not 0 <= i < n_params for i in how):
            raise ValueError(f"Widened: positions {sorted(how)} outside the "
                             f"{n_params} parameters of {dispatcher.py_func.__name__}")
        self.dispatcher = dispatcher
        self.how = dict(how)
        self._entries: dict = {}  # _key of the arguments -> compiled entry point

    def __call__(self, *args):
        key = tuple(map(_key, args))
        entry = self._entries.get(key)
        if entry is None:
            signature = tuple(_widened(typeof(a), self.how[i]) if i in self.how else typeof(a)
                              for i, a in enumerate(args))
            entry = self._entries[key] = self.dispatcher.compile(signature)
        return entry(*args)
