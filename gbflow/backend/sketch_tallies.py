"""The quantile sketch's per-block tallies, written once against an array namespace.

The sketch's coarse and middle passes add each value's weight into a table of its key's bucket
(the top ``BUCKET_BITS`` bits of its ordered uint32 key, per feature) or of its sub-bucket inside
a candidate bucket (the next ``SUB_BITS`` bits); its fine pass marks the values that fall in
wanted sub-buckets. The NumPy twins (``numpy_kernels.sketch_counts``, ``sketch_selected``) and the
GPU's kernels run these definitions; the CPU's numba kernels compute the same integers in one
pass over a block.

A block holds ``values`` (float32: a dense block (rows, g) of consecutive features, or a CSR's
(k,) stored entries), ``feature`` (integer feature ids broadcastable to values: (1, g) or (k,))
and the first feature ``f0`` of its group: feature f's buckets are the table's entries
(f - f0) * 2**BUCKET_BITS onwards. NaN values are missing: never counted, never selected.
"""
from __future__ import annotations

import numpy as np

from .common import ordered_keys

BUCKET_BITS = 16
N_BUCKETS = 1 << BUCKET_BITS
SUB_BITS = 8
N_SUB = 1 << SUB_BITS


def check_sketch_arguments(values, feature, weight, slot_of, table, name: str) -> None:
    """What every version of the sketch kernels relies on, checked alike (shapes and dtypes;
    the ids' ranges are the caller's promise, as for ``table_counts``)."""
    if values.dtype != np.float32:
        raise TypeError(f"{name}: values must be float32, got {values.dtype}")
    if values.ndim not in (1, 2) or feature.ndim != values.ndim:
        raise ValueError(f"{name}: values must be (rows, features) or (entries,) with feature "
                         f"ids of the same rank, got {values.shape} and {feature.shape}")
    if weight is not None and weight.ndim != values.ndim:
        raise ValueError(f"{name}: weight must have values' rank ((rows, 1) or (entries,)), "
                         f"got {weight.shape}")
    if slot_of is not None and slot_of.dtype != np.int32:
        raise TypeError(f"{name}: slot_of must be int32, got {slot_of.dtype}")
    if table is not None and (table.ndim != 1 or table.dtype != np.int64):
        raise TypeError(f"{name}: the table must be (size,) int64, got {table.shape} "
                        f"{table.dtype}")


def _bucket_and_sub(xp, values, feature, f0: int):
    """(present bool, table index of each value's bucket as intp, its sub-bucket as intp), each
    values' shape."""
    keys = ordered_keys(xp, values)
    bucket = (keys >> BUCKET_BITS).astype(xp.intp)
    offset = feature.astype(xp.intp)  # a CSR's int32 column ids would overflow
    offset -= f0
    offset *= N_BUCKETS
    bucket += offset
    sub = ((keys >> (32 - BUCKET_BITS - SUB_BITS)) & xp.uint32(N_SUB - 1)).astype(xp.intp)
    return ~xp.isnan(values), bucket, sub


def _slot_ids(xp, present, bucket, sub, slot_of):
    """(selected bool, slot * N_SUB + sub intp) for values whose bucket has a slot."""
    slot = slot_of[bucket]
    selected = present & (slot >= 0)
    ids = slot.astype(xp.intp)
    ids *= N_SUB
    ids += sub
    return selected, ids


def sketch_counts_with(xp, bincount, values, feature, f0: int, weight, slot_of, table):
    """Add each present value's weight (1 without weights) into ``table``, in place, at its
    bucket (slot_of None: table (g * N_BUCKETS,)) or, where ``slot_of[bucket]`` is a slot s >= 0,
    at s * N_SUB + its sub-bucket (table (n_slots * N_SUB,)); in the array namespace ``xp``.

    bincount: ``(ids, size, weights or None) ->`` the (size,) counts or float64 sums per id
    (the namespace's ``table_counts``). weight: integer-valued float64 broadcastable to
    values, or None. The sums are integers: float64 sums of integer weights below 2**53 are
    exact in any order. Returns ``table``."""
    present, bucket, sub = _bucket_and_sub(xp, values, feature, f0)
    if slot_of is None:
        selected, ids = present, bucket
    else:
        selected, ids = _slot_ids(xp, present, bucket, sub, slot_of)
    del bucket, sub
    ids = ids[selected]
    size = int(table.shape[0])
    if weight is None:
        table += bincount(ids, size, None).astype(xp.int64, copy=False)
    else:
        w = xp.broadcast_to(weight, values.shape)[selected]
        table += xp.rint(bincount(ids, size, w)).astype(xp.int64)
    return table


def sketch_selected_with(xp, values, feature, f0: int, slot_of, wanted, out):
    """``out`` (bool, values' shape) True where a value is present, its bucket has a slot s >= 0
    in ``slot_of`` and ``wanted[s * N_SUB + its sub-bucket]``; in place, returns ``out``."""
    present, bucket, sub = _bucket_and_sub(xp, values, feature, f0)
    selected, ids = _slot_ids(xp, present, bucket, sub, slot_of)
    del bucket, sub
    ids[~selected] = 0
    xp.logical_and(selected, wanted[ids], out=out)
    return out
