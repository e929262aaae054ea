"""The quantile sketch's per-block tallies, written once against an array namespace.

The sketch's coarse and middle passes add each value's weight into a table of its key's bucket
(the top ``BUCKET_BITS`` bits of its ordered uint32 key, per feature) or of its sub-bucket inside
a candidate bucket (the next ``SUB_BITS`` bits); its fine pass marks the values that fall in
wanted sub-buckets. The NumPy twins (``numpy_kernels.sketch_counts``, ``sketch_selected``) and the
GPU's kernels run these definitions; the CPU's numba kernels compute the same integers in one
pass over a block.

A block holds ``values`` (float32: a dense block (rows, g) of consecutive features, or a CSR's
(k,) stored entries), ``feature`` (integer feature ids: (1, g) or (k,)) and the first feature
``f0`` of its group: feature f's buckets are the table's entries (f - f0) * 2**BUCKET_BITS
onwards. NaN values are missing: never counted, never selected. A slot (a candidate bucket's
N_SUB sub-buckets) belongs to one bucket, so to one feature: the CPU's kernels give each thread
whole features and rely on it.
"""
from __future__ import annotations

import numpy as np

from .common import ordered_keys

BUCKET_BITS = 16
N_BUCKETS = 1 << BUCKET_BITS
SUB_BITS = 8
N_SUB = 1 << SUB_BITS


def check_sketch_arguments(values, feature, weight, slot_of, table, name: str,
                           wanted=None, out=None) -> None:
    """What every version of the sketch kernels relies on, checked alike before any work:
    dtypes, shapes (a dense block's feature ids (1, g), weights (rows, 1), lookup g * N_BUCKETS
    long; a CSR block's (k,) each), and on the host that every slot of ``slot_of`` has its N_SUB
    entries in ``table`` (or ``wanted``). Feature ids and slot ownership are the caller's
    promise."""
    if values.dtype != np.float32:
        raise TypeError(f"{name}: values must be float32, got {values.dtype}")
    dense = values.ndim == 2
    if values.ndim not in (1, 2) or feature.shape != ((1, values.shape[1]) if dense
                                                      else values.shape):
        raise ValueError(f"{name}: values must be (rows, g) with feature ids (1, g), or a "
                         f"CSR's (k,) entries with (k,) ids, got {values.shape} and "
                         f"{feature.shape}")
    if weight is not None and weight.shape != ((values.shape[0], 1) if dense else values.shape):
        raise ValueError(f"{name}: weight must be (rows, 1) for a dense block or (entries,) "
                         f"for a CSR's, got {weight.shape} for values {values.shape}")
    lookup = values.shape[1] * N_BUCKETS if dense else None
    if slot_of is not None:
        if slot_of.dtype != np.int32 or slot_of.ndim != 1 or \
                (dense and slot_of.shape[0] != lookup):
            raise ValueError(f"{name}: slot_of must be ({lookup or 'g * 65536'},) int32, got "
                             f"{slot_of.shape} {slot_of.dtype}")
    if table is not None:
        if table.ndim != 1 or table.dtype != np.int64:
            raise TypeError(f"{name}: the table must be (size,) int64, got {table.shape} "
                            f"{table.dtype}")
        if slot_of is None and dense and table.shape[0] != lookup:
            raise ValueError(f"{name}: the table must hold {lookup} buckets, got "
                             f"{table.shape[0]}")
    if wanted is not None and (wanted.dtype != np.bool_ or wanted.ndim != 1):
        raise TypeError(f"{name}: wanted must be (n_slots * {N_SUB},) bool, got {wanted.shape} "
                        f"{wanted.dtype}")
    if out is not None and (out.dtype != np.bool_ or out.shape != values.shape):
        raise ValueError(f"{name}: out must be bool of values' shape {values.shape}, got "
                         f"{out.shape} {out.dtype}")
    # the slots' range is read on the host only: on the GPU the read would wait for the
    # device every block (there it is the caller's promise, as feature ids are)
    room = table if table is not None and slot_of is not None else wanted
    if slot_of is not None and room is not None and room.shape[0] % N_SUB:
        raise ValueError(f"{name}: {'the table' if room is table else 'wanted'} must hold "
                         f"{N_SUB} entries a slot, got {room.shape[0]}")
    if isinstance(slot_of, np.ndarray) and room is not None and slot_of.shape[0]:
        n_slots = room.shape[0] // N_SUB
        if int(slot_of.max()) >= n_slots:
            raise ValueError(f"{name}: slot_of names slot {int(slot_of.max())}, but "
                             f"{'the table' if room is table else 'wanted'} holds "
                             f"{room.shape[0]} entries ({N_SUB} a slot)")


def _present_and_buckets(xp, values, feature, f0: int):
    """(present bool, table index of each value's bucket as intp, its uint32 key), each values'
    shape."""
    keys = ordered_keys(xp, values)
    bucket = (keys >> BUCKET_BITS).astype(xp.intp)
    offset = feature.astype(xp.intp)  # a CSR's int32 column ids would overflow
    offset -= f0
    offset *= N_BUCKETS
    bucket += offset
    return ~xp.isnan(values), bucket, keys


def _slot_ids(xp, present, bucket, keys, slot_of):
    """(selected bool, slot * N_SUB + sub-bucket intp) for values whose bucket has a slot."""
    slot = slot_of[bucket]
    selected = present & (slot >= 0)
    ids = slot.astype(xp.intp)
    del slot
    ids *= N_SUB
    ids += (keys >> (32 - BUCKET_BITS - SUB_BITS)) & xp.uint32(N_SUB - 1)
    return selected, ids


def sketch_counts_with(xp, bincount, values, feature, f0: int, weight, slot_of, table):
    """Add each present value's weight (1 without weights) into ``table``, in place, at its
    bucket (slot_of None: table (g * N_BUCKETS,)) or, where ``slot_of[bucket]`` is a slot s >= 0,
    at s * N_SUB + its sub-bucket (table (n_slots * N_SUB,)); in the array namespace ``xp``.

    bincount: ``(ids, size, weights or None) ->`` the (size,) counts or float64 sums per id
    (the namespace's ``table_counts``). weight: integer-valued float64 broadcastable to
    values, or None. The sums are integers: float64 sums of integer weights below 2**53 are
    exact in any order. Returns ``table``."""
    present, bucket, keys = _present_and_buckets(xp, values, feature, f0)
    if slot_of is None:
        selected, ids = present, bucket
    else:
        selected, ids = _slot_ids(xp, present, bucket, keys, slot_of)
    del bucket, keys
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
    present, bucket, keys = _present_and_buckets(xp, values, feature, f0)
    selected, ids = _slot_ids(xp, present, bucket, keys, slot_of)
    del bucket, keys
    ids[~selected] = 0
    xp.logical_and(selected, wanted[ids], out=out)
    return out
