"""Reading dense matrices and CSRs for the passes, in groups of features and blocks of values."""
from __future__ import annotations

import dataclasses
import functools

import numpy as np

from ..backend import to_host
from ..backend.tables import entry_rows
from ..csr import CSR
from .keys import FINE_SHIFT, N_BUCKETS, ordered_keys

# Values per block of rows in the summary passes: the temporaries (keys, bucket ids, masks) stay a
# few MB and are reused, instead of several arrays the size of the data being allocated, touched
# and returned to the operating system on every pass.
BLOCK_VALUES = 1 << 20


@dataclasses.dataclass
class _Block:
    """Some values of one group of features, in ``xp``.

    xp: the namespace. values: float32, (rows, features) for a dense matrix or (entries,) for a
    CSR. feature: integer feature ids (int64 (1, features) dense, a CSR's int32 column ids),
    broadcastable to values. weight: integer-valued float64 weights broadcastable to values, or
    None. Keys and the missing-value mask are computed when first asked for (the sorting
    path's passes; the dense-table kernels read the values themselves)."""

    xp: object
    values: object
    feature: object
    weight: object

    @functools.cached_property
    def keys(self):
        """uint32 ordered keys, values' shape (meaningless for NaN)."""
        return ordered_keys(self.xp, self.values)

    @functools.cached_property
    def present(self):
        """bool, values' shape: False for missing values (NaN)."""
        return ~self.xp.isnan(self.values)

    def weights(self, xp, selected):
        """(k,) float64 weights of the selected values, or None."""
        if self.weight is None:
            return None
        return xp.broadcast_to(self.weight, self.values.shape)[selected]

    def selected_fine_ids(self, xp, selected):
        """(k,) int64 fine ids (feature << 32 | key) of the values where ``selected`` (bool,
        values' shape) holds, in row-major order: keys made for those values alone."""
        ids = ordered_keys(xp, self.values[selected]).astype(xp.int64)
        high = xp.broadcast_to(self.feature, self.values.shape)[selected].astype(xp.int64)
        high <<= FINE_SHIFT
        ids |= high
        return ids

    def all_fine_ids(self, xp):
        """int64, values' shape: feature << 32 | key (meaningless for NaN). Built in place: one
        array of the block's size, not three (shifted features, widened keys, their union)."""
        ids = self.keys.astype(xp.int64)
        high = self.feature.astype(xp.int64)  # (1, features) for a dense block, (entries,) CSR
        high <<= FINE_SHIFT
        ids |= high
        return ids

    def fine_ids(self, xp, ordered: bool = False):
        """(k,) int64 fine ids (feature << 32 | key) of the present values, and their weights;
        sorted if ``ordered`` (searching sorted ids in a large table touches memory in order,
        and a sorted selection of them is tallied without sorting again). The sorted ones are
        the block's own, computed once (a kept block serves every pass): do not modify them."""
        if ordered:
            return self._sorted_fine_ids
        return self.all_fine_ids(xp)[self.present], self.weights(xp, self.present)

    @functools.cached_property
    def _sorted_fine_ids(self):
        xp = self.xp
        ids = self.all_fine_ids(xp)[self.present]
        weights = self.weights(xp, self.present)
        if weights is None:
            ids.sort()
            return ids, None
        order = xp.argsort(ids)
        return ids[order], weights[order]


@dataclasses.dataclass
class _Group:
    """Features f0 .. f1 - 1 of one matrix: n_values values (missing ones included), read
    block by block by ``blocks()``."""

    f0: int
    f1: int
    n_values: int
    blocks: object
    block_values: int  # values per block (a CSR's blocks are smaller than dense ones)

    def id_range(self, ids: np.ndarray, shift: int) -> tuple[int, int]:
        """The slice of sorted host ``ids`` (with ``shift``) that belongs to this group."""
        lo, hi = np.searchsorted(ids, [self.f0 << shift, self.f1 << shift])
        return int(lo), int(hi)

    def dense_table(self, table_size: int) -> bool:
        """Whether to tally into a dense table of ``table_size`` (plus a 65,536-per-feature
        lookup table): only while both stay a few blocks large, and the group has enough values
        to pay for clearing and scanning them (the table at most four entries a value); else
        its ids are sorted instead. Wide data with few rows made each pass's table (65,536
        buckets a feature, or 256 sub-buckets for each candidate bucket) some 13 entries a
        value, and filling and scanning them cost three times the sorts (5,000 x 3,000 dense on
        two cores: the cuts in 7.6 s against 2.5 s; the same cuts)."""
        lookup = (self.f1 - self.f0) * N_BUCKETS
        return max(lookup, table_size) <= 4 * self.block_values and \
            16 * self.n_values >= lookup and table_size <= 4 * self.n_values


# Stored entries per block of a CSR (at most): its ids are tallied by sorting, which keeps some
# ten entry-sized temporaries (ids, sort order, positions, weights, masks) alive at once against
# two or three per value in a dense table, so its blocks are smaller than dense ones: some 60
# bytes an entry, about 130 MB for a block, and still millions of entries per device call.
CSR_BLOCK_ENTRIES = 1 << 21


# A part of at most this many values keeps its blocks from one pass to the next
# (``kept_blocks``): the sorting path's keys, masks and sorted ids are made once, not in each of
# the three passes (on a 60,000 x 2,005 CSR, sorting its 1.2 million ids was two thirds of the
# sketch); the dense-table kernels read the kept values again in each pass.
# They hold some 20 bytes a value, so the bound keeps them under about 100 MB.
KEEP_VALUES = 1 << 22


def kept_blocks(X) -> dict | None:
    """The store that keeps X's blocks between the passes (pass it to every pass), or None
    when X holds too many values for that."""
    n_values = X.nnz if isinstance(X, CSR) else int(X.shape[0]) * int(X.shape[1])
    return {} if n_values <= KEEP_VALUES else None


def _groups(xp, X, w_fixed, block_values: int, kept: dict | None = None):
    """The feature groups of X (dense (n_rows, n_features) float32, or a CSR), in feature order.

    Dense: groups of features whose 65,536-bucket tables stay about two blocks large, read in
    blocks of rows of about ``block_values`` values. CSR: one group of all columns (its entries
    are not ordered by column), read in blocks of whole rows of about ``block_values`` entries
    (at most ``CSR_BLOCK_ENTRIES``), in time proportional to the stored entries. kept: None, or
    a dict (``kept_blocks``) where the blocks stay for the next pass over X."""
    def block(key, make):
        if kept is None:
            return make()
        if key not in kept:
            kept[key] = make()
        return kept[key]

    if isinstance(X, CSR):
        n_rows, nnz = X.n_rows, X.nnz
        if nnz == 0 or n_rows == 0 or X.n_cols == 0:
            return
        block_values = min(block_values, CSR_BLOCK_ENTRIES)
        # Rows that hold every block_values-th entry start the blocks (a device search; only
        # the few block boundaries come to the host).
        marks = xp.arange(block_values, nnz, block_values, dtype=xp.int64)
        rows = to_host(xp.searchsorted(xp.asarray(X.indptr), marks, side="right") - 1)
        bounds = np.unique(np.concatenate([[0], rows, [n_rows]])).tolist()

        def csr_block(r0, r1):
            part = X.rows(r0, r1)  # X may be in host memory: a block at a time reaches xp
            w = None if w_fixed is None else \
                w_fixed[r0:r1][entry_rows(xp, xp.asarray(part.indptr), part.nnz)]
            # int32 column ids (widened only where ids are built): 4 bytes an entry, not 12
            return _Block(xp, xp.asarray(part.data), xp.asarray(part.indices), w)

        def csr_blocks():
            for r0, r1 in zip(bounds[:-1], bounds[1:]):
                yield block((0, r0), lambda: csr_block(r0, r1))

        yield _Group(0, int(X.n_cols), nnz, csr_blocks, block_values)
        return
    n_rows, n_features = X.shape
    group = max(1, min(n_features, 2 * block_values // N_BUCKETS))
    step = max(1, block_values // group)
    for f0 in range(0, n_features, group):
        f1 = min(n_features, f0 + group)

        def dense_block(f0, f1, start):
            values = xp.asarray(X[start : start + step, f0:f1])  # X may be in host memory
            w = None if w_fixed is None else w_fixed[start : start + step, None]
            return _Block(xp, values, xp.arange(f0, f1, dtype=xp.int64)[None, :], w)

        def dense_blocks(f0=f0, f1=f1):
            for start in range(0, n_rows, step):
                yield block((f0, start), lambda: dense_block(f0, f1, start))

        yield _Group(f0, f1, n_rows * (f1 - f0), dense_blocks, block_values)


def _n_features(X) -> int:
    return int(X.n_cols) if isinstance(X, CSR) else int(X.shape[1])

