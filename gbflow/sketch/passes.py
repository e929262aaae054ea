"""The three passes over the data (coarse, middle or MiddleTable, fine): device work, summaries."""
from __future__ import annotations

import numpy as np

from ..backend import kernels_for
from .blocks import BLOCK_VALUES, _Group, _groups, _n_features
from .keys import COARSE_SHIFT, FINE_SHIFT, MIDDLE_SHIFT, N_BUCKETS, N_SUB, SUB_BITS
from .selection import Slots
from .summary import Summary, _Accumulator, _host_summary, _tally


def _find(xp, sorted_ids, ids):
    """Where each of ``ids`` is in non-empty ``sorted_ids`` (int64, in ``xp``): (position,
    found), ids' shape; position is a valid index but meaningless where not found."""
    position = xp.searchsorted(sorted_ids, ids)
    xp.minimum(position, len(sorted_ids) - 1, out=position)
    return position, sorted_ids[position] == ids


def _slot_table(xp, local_buckets, group: _Group):
    """((f1 - f0) * 65,536,) int32 dense lookup: each candidate bucket of the group -> its
    position in ``local_buckets`` (the group's sorted coarse ids), -1 elsewhere."""
    table = xp.full((group.f1 - group.f0) * N_BUCKETS, -1, dtype=xp.int32)
    table[local_buckets - (group.f0 << COARSE_SHIFT)] = xp.arange(len(local_buckets),
                                                                   dtype=xp.int32)
    return table


def coarse_summary(xp, X, w_fixed, block_values: int = BLOCK_VALUES,
                   kept: dict | None = None, kernels=None) -> Summary:
    """Pass 1: total weight per feature and top 16 key bits, as a host ``Summary`` (shift 16).

    X: (n_rows, n_features) float32 (NaN missing) or a ``csr.CSR``, in ``xp``. w_fixed:
    (n_rows,) integer-valued float64 or None. block_values: values per block (the GPU takes
    far larger blocks than the CPU). kept: X's ``blocks.kept_blocks`` store, or None (every
    pass takes the same). kernels: the backend's kernels for ``xp`` (None: ``kernels_for``)."""
    kernels = kernels or kernels_for(xp)
    pieces = []
    for group in _groups(xp, X, w_fixed, block_values, kept):
        size = (group.f1 - group.f0) * N_BUCKETS
        if group.dense_table(size):
            table = xp.zeros(size, dtype=xp.int64)
            for b in group.blocks():
                kernels.sketch_counts(b.values, b.feature, group.f0, b.weight, None, table)
            occupied = xp.flatnonzero(table)
            pieces.append((occupied + (group.f0 << COARSE_SHIFT), table[occupied]))
        else:
            acc = _Accumulator(xp, group.block_values)
            for b in group.blocks():
                # sorted fine ids (the block's, kept for the next passes), shifted: sorted too
                ids, w = b.fine_ids(xp, ordered=True)
                acc.add(ids >> (FINE_SHIFT - COARSE_SHIFT), w, ordered=True)
                del b, ids, w  # freed before the next block's temporaries are made
            pieces.append(acc.result())
    return _host_summary(xp, pieces, COARSE_SHIFT, _n_features(X))


def middle_summary(xp, X, w_fixed, slots: Slots, block_values: int = BLOCK_VALUES,
                   kept: dict | None = None, kernels=None) -> Summary:
    """Pass 2: total weight per sub-bucket (top 24 key bits) inside candidate buckets, as a host
    ``Summary`` (shift 24). slots: ``bucket_slots`` of the merged pass-1 selection. The other
    arguments as ``coarse_summary``'s."""
    tallies = _middle_tallies(xp, X, w_fixed, slots, block_values, kept,
                              kernels or kernels_for(xp))
    return _host_summary(xp, list(tallies), MIDDLE_SHIFT, _n_features(X))


def _middle_tallies(xp, X, w_fixed, slots: Slots, block_values: int, kept: dict | None,
                    kernels):
    """Pass 2's device tallies, one per feature group of X that holds candidate buckets, in
    feature order: (sorted unique int64 middle ids, int64 totals > 0)."""
    buckets = slots.bucket
    device_buckets, device_masks = xp.asarray(buckets), xp.asarray(slots.mask)
    for group in _groups(xp, X, w_fixed, block_values, kept):
        lo, hi = group.id_range(buckets, COARSE_SHIFT)
        if lo == hi:
            continue
        local, masks = device_buckets[lo:hi], device_masks[lo:hi]
        size = (hi - lo) * N_SUB
        if group.dense_table(size):
            slot_of = _slot_table(xp, local, group)
            table = xp.zeros(size, dtype=xp.int64)
            for b in group.blocks():
                kernels.sketch_counts(b.values, b.feature, group.f0, b.weight, slot_of, table)
            # Counted at full resolution (no per-value mask); the coarser sub-buckets of some
            # buckets are unions of consecutive ones: merged here, on the occupied ids only.
            occupied = xp.flatnonzero(table)
            slot = occupied // N_SUB
            ids = (local[slot] << SUB_BITS) | (occupied % N_SUB & masks[slot])
            yield _tally(xp, ids, table[occupied], ordered=True)
        else:
            acc = _Accumulator(xp, group.block_values)
            for b in group.blocks():
                ids, w = b.fine_ids(xp, ordered=True)
                del b
                ids = ids >> (FINE_SHIFT - MIDDLE_SHIFT)  # full-resolution sub-bucket ids
                position, inside = _find(xp, local, ids >> SUB_BITS)
                ids, position = ids[inside], position[inside]
                ids &= masks[position] | -N_SUB  # as ``Slots.sub_ids``; still sorted
                acc.add(ids, None if w is None else w[inside], ordered=True)
                del ids, w, position, inside
            yield acc.result()


# Pass 2's weights of all parts and processes go in one dense table while it has at most this many
# entries (128 MiB); beyond it (very wide data), each process's sparse summary is gathered instead.
MIDDLE_TABLE_ENTRIES = 1 << 24


class MiddleTable:
    """Pass 2's weights over every sub-bucket the slots can hold, in id order: one dense int64
    array in ``xp`` that parts add into and processes sum in place, one reduction of a shape every
    process knows, where sparse summaries would be gathered, sent to every process and merged on
    the host (on two GPUs, 0.25 s of 0.6 for 10M x 28 per GPU). The result is the merged
    ``Summary`` the sparse path gives, integer for integer.

    counts: (``slots.table_size``,) int64; slot s's sub-buckets are ``counts[offsets[s]:
    offsets[s + 1]]``, one per value of the slot's mask bits, in key order.
    """

    def __init__(self, xp, slots: Slots, n_features: int, kernels=None):
        self.xp, self.n_features = xp, n_features
        self.counts = xp.zeros(slots.table_size, dtype=xp.int64)
        self._buckets = xp.asarray(slots.bucket)
        self._offsets = xp.asarray(slots.table_offsets[:-1])
        self._shifts = xp.asarray(slots.dropped_bits)
        self._slots = slots
        self._kernels = kernels or kernels_for(xp)

    @staticmethod
    def fits(slots: Slots) -> bool:
        """Whether the table of these slots is small enough (the same answer on every process:
        slots come from the merged pass-1 summary)."""
        return slots.table_size <= MIDDLE_TABLE_ENTRIES

    def add(self, X, w_fixed, block_values: int = BLOCK_VALUES,
            kept: dict | None = None) -> None:
        """Add pass 2's weights of one part (a dense float32 matrix or a CSR in ``xp``, with its
        integer-valued float64 weights or None) to ``counts``."""
        for ids, totals in _middle_tallies(self.xp, X, w_fixed, self._slots, block_values,
                                           kept, self._kernels):
            slot = self.xp.searchsorted(self._buckets, ids >> SUB_BITS)
            # one tally's ids are unique, so are their positions: a plain indexed add
            self.counts[self._offsets[slot] + ((ids & (N_SUB - 1)) >> self._shifts[slot])] \
                += totals

    def summary(self) -> Summary:
        """The occupied sub-buckets of ``counts`` as a host ``Summary`` (shift 24)."""
        xp = self.xp
        occupied = xp.flatnonzero(self.counts)
        slot = xp.searchsorted(self._offsets, occupied, side="right") - 1
        ids = (self._buckets[slot] << SUB_BITS) | \
            ((occupied - self._offsets[slot]) << self._shifts[slot])
        return _host_summary(xp, [(ids, self.counts[occupied])], MIDDLE_SHIFT, self.n_features)


def fine_summary(xp, X, w_fixed, slots: Slots, sub_candidates: np.ndarray,
                 block_values: int = BLOCK_VALUES, kept: dict | None = None,
                 kernels=None) -> Summary:
    """Pass 3: the distinct values of X in candidate sub-buckets with their total weights, as a
    host ``Summary`` (shift 32: ids are feature << 32 | the value's ordered key).
    sub_candidates: ``candidate_sub_buckets``' ids. The other arguments as ``coarse_summary``'s."""
    kernels = kernels or kernels_for(xp)
    buckets = slots.bucket
    subs = np.asarray(sub_candidates, dtype=np.int64)
    device_buckets, device_subs = xp.asarray(buckets), xp.asarray(subs)
    device_masks = xp.asarray(slots.mask)
    pieces = []
    for group in _groups(xp, X, w_fixed, block_values, kept):
        s_lo, s_hi = group.id_range(subs, MIDDLE_SHIFT)
        if s_lo == s_hi:
            continue
        wanted_subs = device_subs[s_lo:s_hi]
        lo, hi = group.id_range(buckets, COARSE_SHIFT)
        local, masks = device_buckets[lo:hi], device_masks[lo:hi]
        size = (hi - lo) * N_SUB
        acc = _Accumulator(xp, group.block_values)
        if group.dense_table(size):
            slot_of = _slot_table(xp, local, group)
            wanted = xp.zeros(size, dtype=bool)
            wanted[xp.searchsorted(local, wanted_subs >> SUB_BITS) * N_SUB
                   + (wanted_subs & (N_SUB - 1))] = True
            # at full resolution: each of the 256 sub-buckets of a slot takes the mark of the
            # (coarser) sub-bucket it belongs to
            index = xp.arange(size, dtype=xp.int64)
            wanted = wanted[index - (index % N_SUB) + (index % N_SUB & masks[index // N_SUB])]
            for b in group.blocks():
                selected = kernels.sketch_selected(b.values, b.feature, group.f0, slot_of,
                                                   wanted, xp.empty(b.values.shape, bool))
                acc.add(b.selected_fine_ids(xp, selected), b.weights(xp, selected))
        else:
            local_slots = Slots(bucket=local, mask=masks)
            for b in group.blocks():
                ids, w = b.fine_ids(xp, ordered=True)
                del b
                # a value outside the candidate buckets gets the sub id of no candidate
                position, _ = _find(xp, local, ids >> (FINE_SHIFT - COARSE_SHIFT))
                _, inside = _find(xp, wanted_subs, local_slots.sub_ids(xp, ids, position))
                del position
                acc.add(ids[inside], None if w is None else w[inside], ordered=True)
                del ids, w, inside
        pieces.append(acc.result())
    return _host_summary(xp, pieces, FINE_SHIFT, _n_features(X))

