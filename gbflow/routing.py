"""Sparsity-aware column routing: which features the dense binned matrix holds, which are stored as
sparse entries, and building both stores from dense or CSR input.

A feature whose most common bin holds more than ``sparse_threshold`` of all rows (over every
shard and worker) is *sparse*: a shard stores, row by row, only its entries in the other bins, and
its histograms are built from those entries, the common bin filled in from the node totals.
Everything else goes to the dense (n_rows, D) binned matrix. Both stores feed the same split
search, so routing changes speed and memory, never the model. The decision depends only on
integer bin counts summed over all processes, so every process routes the same way.
"""
from __future__ import annotations

import dataclasses

import numpy as np

from . import _dtypes
from .csr import CSR
from .backend import to_host
from .cuts import Cuts
from .quantize import padded_width


@dataclasses.dataclass
class Routing:
    """Where each feature lives (host arrays).

    dense: (D,) int64 global ids of the dense features, ascending; sparse: (S,) likewise.
    common_bin: (S,) int32 most common bin of each sparse feature (the first of equal counts).
    bin_offsets: (S + 1,) int64: sparse feature s's bins 0..n_value_bins[s] occupy slots
    bin_offsets[s]..bin_offsets[s + 1] - 1 of the compact sparse histograms.
    n_value_bins: (S,) int32 value bins of each sparse feature.
    """

    dense: np.ndarray
    sparse: np.ndarray
    common_bin: np.ndarray
    bin_offsets: np.ndarray
    n_value_bins: np.ndarray

    @property
    def has_sparse(self) -> bool:
        return len(self.sparse) > 0

    @property
    def n_slots(self) -> int:
        return int(self.bin_offsets[-1])

    @classmethod
    def all_dense(cls, n_features: int) -> "Routing":
        return cls(dense=np.arange(n_features, dtype=np.int64), sparse=np.zeros(0, np.int64),
                   common_bin=np.zeros(0, np.int32), bin_offsets=np.zeros(1, np.int64),
                   n_value_bins=np.zeros(0, np.int32))


@dataclasses.dataclass
class SparseBins:
    """One shard's sparse store, on the backend's device: only entries outside the common bin.

    indptr: (n_rows + 1,) int64; entry_feature: (nnz,) sparse-local feature ids 0..S-1,
    ascending within each row, of ``_dtypes.entry_feature_dtype(S)`` (int16 while S <= 32767,
    else int32: 2 bytes an entry less on most data); entry_bin: (nnz,) uint8/uint16, never the
    feature's common bin.
    """

    indptr: object
    entry_feature: object
    entry_bin: object

    @property
    def nnz(self) -> int:
        return int(self.entry_feature.shape[0])

    @property
    def nbytes(self) -> int:
        return int(self.indptr.nbytes + self.entry_feature.nbytes + self.entry_bin.nbytes)


@dataclasses.dataclass
class BinnedPart:
    """One part's bin ids before routing: ``bins`` (n, F) for dense input, or for CSR input the
    matrix's structure with ``entry_bins`` (nnz,) (absent entries are the missing bin)."""

    bins: object = None
    csr: CSR | None = None
    entry_bins: object = None

    @property
    def n_rows(self) -> int:
        return int(self.bins.shape[0]) if self.csr is None else self.csr.n_rows


# Stored entries per block when a CSR's bins are counted and its stores built: bounds the
# temporaries (row ids, local ids, masks) to about 20 MB however many entries it holds.
_ENTRY_BLOCK = 1 << 20


def _slot_offsets(cuts: Cuts) -> np.ndarray:
    """(F + 1,) int64 offsets of every feature's bins 0..n_value_bins in a compact table."""
    return np.concatenate([[0], np.cumsum(cuts.n_value_bins.astype(np.int64) + 1)])


def bin_part(backend, X, cuts: Cuts) -> BinnedPart:
    """Bin one part: a dense (n, F) float32 array or a ``CSR`` on the backend's device."""
    xp = backend.xp
    if not isinstance(X, CSR):
        from .quantize import quantize
        return BinnedPart(bins=quantize(backend, X, cuts))
    out = xp.empty(X.nnz, dtype=cuts.bin_dtype)
    entry_bins = backend.kernels.bin_entries(X.data, X.indices, xp.asarray(cuts.values),
                                             xp.asarray(cuts.offsets), out)
    return BinnedPart(csr=X, entry_bins=entry_bins)


def bin_counts(backend, part: BinnedPart, cuts: Cuts) -> np.ndarray:
    """Host (sum of (n_value_bins + 1),) int64: rows per (feature, bin), features one after the
    other (see ``_slot_offsets``). Summed over parts and processes, it decides the routing."""
    xp = backend.xp
    offsets = _slot_offsets(cuts)
    n_features = cuts.n_features
    if part.csr is None:
        bins = part.bins
        n = int(bins.shape[0])
        if n == 0:
            return np.zeros(int(offsets[-1]), dtype=np.int64)
        # The histogram kernel with a unit count per row gives every (feature, bin) count at once.
        ones = xp.zeros((n, 2), dtype=_dtypes.FIXED)
        ones[:, 0] = 1
        hist = backend.kernels.build_histograms(
            bins, ones, xp.arange(n, dtype=_dtypes.ROW_INDEX), np.zeros(1, np.int64),
            np.array([n], np.int64), cuts.n_bins)
        table = backend.to_host(hist[0, :, :, 0])  # (F, n_bins)
        widths = np.diff(offsets)
        mask = np.arange(table.shape[1])[None, :] < widths[:, None]
        return table[mask].astype(np.int64)
    csr = part.csr
    starts = xp.asarray(offsets[:-1])
    counts = xp.zeros(int(offsets[-1]), dtype=xp.int64)
    present = xp.zeros(n_features, dtype=xp.int64)
    for lo in range(0, csr.nnz, _ENTRY_BLOCK):  # bounded temporaries
        features = csr.indices[lo : lo + _ENTRY_BLOCK]
        counts += xp.bincount(starts[features] + part.entry_bins[lo : lo + _ENTRY_BLOCK],
                              minlength=len(counts))
        present += xp.bincount(features, minlength=n_features)
    counts, present = backend.to_host_all([counts, present])
    counts[offsets[:-1]] += csr.n_rows - present  # absent entries are missing values
    return counts


def decide(counts: np.ndarray, cuts: Cuts, threshold: float) -> Routing:
    """Route the features from the global ``bin_counts``: sparse where the most common bin holds
    more than ``threshold`` of the rows (1.0: nothing is sparse)."""
    n_features = cuts.n_features
    offsets = _slot_offsets(cuts)
    n_rows_total = int(counts[offsets[0] : offsets[1]].sum()) if n_features else 0
    if threshold >= 1.0 or n_rows_total == 0:
        return Routing.all_dense(n_features)
    feature_of_slot = np.repeat(np.arange(n_features), np.diff(offsets))
    largest = np.maximum.reduceat(counts, offsets[:-1])
    # the first slot of each feature holding its largest count (np.unique: first occurrences)
    holding = np.flatnonzero(counts == largest[feature_of_slot])
    _, first = np.unique(feature_of_slot[holding], return_index=True)
    common = (holding[first] - offsets[:-1]).astype(np.int32)
    sparse = largest > threshold * n_rows_total
    nvb = cuts.n_value_bins[sparse]
    return Routing(dense=np.flatnonzero(~sparse).astype(np.int64),
                   sparse=np.flatnonzero(sparse).astype(np.int64), common_bin=common[sparse],
                   bin_offsets=np.concatenate([[0], np.cumsum(nvb.astype(np.int64) + 1)]),
                   n_value_bins=nvb.astype(np.int32))


# Rows x sparse features per block when sparse entries are extracted from a dense matrix: bounds
# the temporary (block of bins, mask) to a few tens of MB however wide the data.
_EXTRACT_VALUES = 1 << 24


def _empty_dense(xp, n_rows: int, n_dense: int, dtype):
    storage = xp.zeros((n_rows, padded_width(n_dense, np.dtype(dtype).itemsize)), dtype=dtype)
    return storage[:, :n_dense]


def build_stores(backend, part: BinnedPart, cuts: Cuts, routing: Routing):
    """(dense bins (n, D), the same column by column (D, n), SparseBins or None) of one part.

    Without sparse features the dense matrix is ``part.bins`` itself. Side effect: none; the
    caller drops ``part`` afterwards, so the full binned matrix does not stay.
    """
    xp = backend.xp
    n = part.n_rows
    dtype = cuts.bin_dtype
    if part.csr is None and not routing.has_sparse:
        return part.bins, xp.ascontiguousarray(part.bins.T), None
    common = xp.asarray(routing.common_bin)
    if part.csr is None:
        bins = part.bins
        dense = _empty_dense(xp, n, len(routing.dense), dtype)
        if len(routing.dense):
            dense[:] = bins[:, xp.asarray(routing.dense)]
        # Ids narrowed block by block (nonzero gives int64), so the whole store's ids never exist
        # wider than they are stored.
        feature_dtype = _dtypes.entry_feature_dtype(len(routing.sparse))
        rows_parts, feature_parts, bin_parts = [], [], []
        step = max(1, _EXTRACT_VALUES // max(1, len(routing.sparse)))
        sparse_ids = xp.asarray(routing.sparse)
        for start in range(0, n, step):
            block = bins[start : start + step][:, sparse_ids]
            rows, features = xp.nonzero(block != common[None, :])  # row-major: sorted already
            rows_parts.append(rows.astype(xp.int64) + start)
            feature_parts.append(features.astype(feature_dtype))
            bin_parts.append(block[rows, features])
        rows = xp.concatenate(rows_parts) if rows_parts else xp.zeros(0, xp.int64)
        features = xp.concatenate(feature_parts) if feature_parts else \
            xp.zeros(0, feature_dtype)
        entry_bins = xp.concatenate(bin_parts) if bin_parts else xp.zeros(0, dtype)
        indptr = xp.zeros(n + 1, dtype=xp.int64)
        indptr[1:] = xp.cumsum(xp.bincount(rows, minlength=n))
        sparse = SparseBins(indptr=indptr, entry_feature=features, entry_bin=entry_bins)
        return dense, xp.ascontiguousarray(dense.T), sparse
    return _stores_from_csr(backend, part, cuts, routing)


def _row_blocks(indptr_host: np.ndarray, block: int) -> list[tuple[int, int]]:
    """Consecutive row ranges holding about ``block`` entries each (at least one row)."""
    n = len(indptr_host) - 1
    marks = np.searchsorted(indptr_host, np.arange(block, indptr_host[-1], block), side="right")
    edges = np.unique(np.concatenate([[0], np.clip(marks - 1, 1, n), [n]]))
    return [(int(a), int(b)) for a, b in zip(edges[:-1], edges[1:]) if b > a] or [(0, n)]


def _stores_from_csr(backend, part: BinnedPart, cuts: Cuts, routing: Routing):
    xp = backend.xp
    csr, entry_bins = part.csr, part.entry_bins
    n, n_features = csr.n_rows, cuts.n_features
    dtype = cuts.bin_dtype
    n_sparse = len(routing.sparse)
    feature_dtype = _dtypes.entry_feature_dtype(n_sparse)
    local = np.full(n_features, -1, dtype=np.int32)  # dense or sparse local id of each feature
    local[routing.dense] = np.arange(len(routing.dense))
    local[routing.sparse] = np.arange(n_sparse)
    is_sparse = np.zeros(n_features, dtype=bool)
    is_sparse[routing.sparse] = True
    local, is_sparse = xp.asarray(local), xp.asarray(is_sparse)
    common = xp.asarray(routing.common_bin)
    # Sparse features whose common bin is a value bin: their absent entries become entries of the
    # missing bin. They are found through a (rows x such features) mask, a block of rows at a time.
    valued = np.flatnonzero(routing.common_bin != _dtypes.MISSING_BIN)
    slot_of = np.full(max(n_sparse, 1), -1, dtype=np.int32)
    slot_of[valued] = np.arange(len(valued))
    slot_of, valued_ids = xp.asarray(slot_of), xp.asarray(valued.astype(np.int32))
    dense = _empty_dense(xp, n, len(routing.dense), dtype)
    row_counts = xp.zeros(n, dtype=xp.int64)
    feature_parts, bin_parts = [], []
    for r0, r1 in _row_blocks(to_host(csr.indptr), _ENTRY_BLOCK):
        block = csr.rows(r0, r1)
        lo = int(csr.indptr[r0])
        rows = block.row_ids(xp)  # block-relative
        bins = entry_bins[lo : lo + block.nnz]
        ids = local[block.indices]
        sparse_entry = is_sparse[block.indices]
        take = ~sparse_entry  # dense features: missing everywhere, then the stored entries
        dense[rows[take] + r0, ids[take]] = bins[take]
        if not n_sparse:
            continue
        s_rows, s_ids, s_bins = rows[sparse_entry], ids[sparse_entry], bins[sparse_entry]
        keep = s_bins != common[s_ids]  # row-major, features ascending within a row
        rows_b, ids_b, bins_b = s_rows[keep], s_ids[keep], s_bins[keep]
        if len(valued):
            added_rows, added_ids = [rows_b], [ids_b]
            slot = slot_of[s_ids]
            mine = slot >= 0
            step = max(1, _EXTRACT_VALUES // len(valued))
            for a in range(0, r1 - r0, step):
                b = min(r1 - r0, a + step)
                seen = xp.zeros((b - a, len(valued)), dtype=bool)
                inside = mine & (s_rows >= a) & (s_rows < b)
                seen[s_rows[inside] - a, slot[inside]] = True
                absent_rows, absent_slots = xp.nonzero(~seen)
                added_rows.append(absent_rows.astype(rows_b.dtype) + a)
                added_ids.append(valued_ids[absent_slots])
            rows_b, ids_b = xp.concatenate(added_rows), xp.concatenate(added_ids)
            bins_b = xp.concatenate([bins_b, xp.zeros(len(rows_b) - len(bins_b), dtype=dtype)])
            order = xp.argsort(rows_b.astype(xp.int64) * n_sparse + ids_b)
            rows_b, ids_b, bins_b = rows_b[order], ids_b[order], bins_b[order]
        row_counts[r0:r1] = xp.bincount(rows_b, minlength=r1 - r0)
        # narrowed per block: the whole store's ids never exist wider than they are stored
        feature_parts.append(ids_b.astype(feature_dtype, copy=False))
        bin_parts.append(bins_b.astype(dtype, copy=False))
    if not n_sparse:
        return dense, xp.ascontiguousarray(dense.T), None
    indptr = xp.zeros(n + 1, dtype=xp.int64)
    indptr[1:] = xp.cumsum(row_counts)
    sparse = SparseBins(indptr=indptr, entry_feature=xp.concatenate(feature_parts),
                        entry_bin=xp.concatenate(bin_parts))
    return dense, xp.ascontiguousarray(dense.T), sparse


@dataclasses.dataclass
class DeviceRouting:
    """A ``Routing`` with what tree growing needs of it every level, on the device once per fit.

    n_value_bins_dense (D,) / n_value_bins_sparse (S,) int32, bin_offsets (S + 1,) int64 and
    common_bin (S,) int32: device arrays. local: (F,) int64 host, each feature's id within its
    store; is_sparse: (F,) bool host.
    """

    routing: Routing
    n_value_bins_dense: object
    n_value_bins_sparse: object
    bin_offsets: object
    common_bin: object
    local: np.ndarray
    is_sparse: np.ndarray
    # the last tree's (namespace, host mask, device masks), see ``allowed``
    _allowed: tuple | None = dataclasses.field(default=None, repr=False, compare=False)

    @classmethod
    def build(cls, backend, routing: Routing, cuts: Cuts) -> "DeviceRouting":
        xp = backend.xp
        n_features = cuts.n_features
        local = np.full(n_features, -1, dtype=np.int64)
        local[routing.dense] = np.arange(len(routing.dense))
        local[routing.sparse] = np.arange(len(routing.sparse))
        is_sparse = np.zeros(n_features, dtype=bool)
        is_sparse[routing.sparse] = True
        return cls(routing=routing,
                   n_value_bins_dense=xp.asarray(cuts.n_value_bins[routing.dense]),
                   n_value_bins_sparse=xp.asarray(routing.n_value_bins),
                   bin_offsets=xp.asarray(routing.bin_offsets),
                   common_bin=xp.asarray(routing.common_bin), local=local, is_sparse=is_sparse)

    def allowed(self, xp, feature_allowed: np.ndarray) -> tuple:
        """(dense (D,), sparse (S,)) bool device masks of a tree's allowed features. The last
        masks are kept: without column sampling every tree allows the same features, and an
        upload costs host time every tree."""
        cached = self._allowed
        if cached is not None and cached[0] is xp and np.array_equal(cached[1], feature_allowed):
            return cached[2]
        r = self.routing
        masks = xp.asarray(feature_allowed[r.dense]), xp.asarray(feature_allowed[r.sparse])
        self._allowed = (xp, np.array(feature_allowed, dtype=bool), masks)
        return masks

    def split_features(self, feature: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Global split features (n,) -> (dense-local or -1, sparse-local or -1), int32 host."""
        local = self.local[feature].astype(np.int32)
        sparse = self.is_sparse[feature]
        return np.where(sparse, -1, local).astype(np.int32), \
            np.where(sparse, local, -1).astype(np.int32)
