"""Binning: raw float32 values (dense or CSR) -> bin ids, a part's bins -> the stores' layouts."""
from __future__ import annotations

import dataclasses

import numpy as np

from . import _dtypes
from .backend import to_host
from .backend.tables import entry_rows, table_counts
from .csr import CSR
from .cuts import Cuts
from .routing import Routing, slot_offsets
from .stores import SparseBins


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


def padded_width(n_features: int, itemsize: int) -> int:
    """Columns to allocate per binned row so that a row never straddles two 64-byte cache lines:
    the next power of two bytes below 64, a multiple of 64 bytes above."""
    row_bytes = n_features * itemsize
    padded = 64 * -(-row_bytes // 64) if row_bytes > 64 else 1 << max(0, row_bytes - 1).bit_length()
    return padded // itemsize


def quantize(backend, X, cuts: Cuts, block_rows: int | None = None):
    """Bin ids of X: (n_rows, n_features) uint8/uint16 on the backend's device, a new array.

    X: (n_rows, n_features) float32, on the device, or in host memory and copied there whole,
    or ``block_rows`` rows at a time when given (raw data larger than the device: at most a
    block of it is there). The result is a view of a wider, zero-padded array (see
    ``padded_width``): tree growing reads rows in scattered order, and a row inside one cache
    line costs one memory access instead of two.
    """
    xp = backend.xp
    n_rows, n_features = X.shape
    storage = xp.zeros((n_rows, padded_width(n_features, cuts.bin_dtype.itemsize)),
                       dtype=cuts.bin_dtype)
    out = storage[:, :n_features]
    values, offsets = xp.asarray(cuts.values), xp.asarray(cuts.offsets)
    step = max(1, n_rows if block_rows is None else block_rows)
    if step >= n_rows:
        return backend.kernels.bin_features(backend.asarray(X), values, offsets, out)
    for r0 in range(0, n_rows, step):
        backend.kernels.bin_features(backend.asarray(X[r0:r0 + step]), values, offsets,
                                     out[r0:r0 + step])
    return out


def bin_part(backend, X, cuts: Cuts, block_rows: int | None = None) -> BinnedPart:
    """Bin one part: a dense (n, F) float32 array (see ``quantize`` for ``block_rows``) or a
    ``CSR``, on the backend's device or in host memory (copied there)."""
    xp = backend.xp
    if not isinstance(X, CSR):
        return BinnedPart(bins=quantize(backend, X, cuts, block_rows))
    X = backend.asarray(X)
    out = xp.empty(X.nnz, dtype=cuts.bin_dtype)
    entry_bins = backend.kernels.bin_entries(X.data, X.indices, xp.asarray(cuts.values),
                                             xp.asarray(cuts.offsets), out)
    return BinnedPart(csr=X, entry_bins=entry_bins)


def bin_counts(backend, part: BinnedPart, cuts: Cuts) -> np.ndarray:
    """Host (sum of (n_value_bins + 1),) int64: rows per (feature, bin), features one after the
    other (see ``slot_offsets``). Summed over parts and processes, it decides the routing."""
    xp = backend.xp
    offsets = slot_offsets(cuts)
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
            np.array([n], np.int64), cuts.n_bins, cuts.n_value_bins)
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
        counts += table_counts(xp, starts[features] + part.entry_bins[lo : lo + _ENTRY_BLOCK],
                               len(counts))
        present += table_counts(xp, features, n_features)
    counts, present = backend.to_host_all([counts, present])
    counts[offsets[:-1]] += csr.n_rows - present  # absent entries are missing values
    return counts


# Rows x sparse features per block when sparse entries are extracted from a dense matrix: bounds
# the temporary (block of bins, mask) to a few tens of MB however wide the data.
_EXTRACT_VALUES = 1 << 24


def _empty_dense(xp, n_rows: int, n_dense: int, dtype):
    storage = xp.zeros((n_rows, padded_width(n_dense, np.dtype(dtype).itemsize)), dtype=dtype)
    return storage[:, :n_dense]


def build_stores(backend, part: BinnedPart, cuts: Cuts, routing: Routing):
    """(dense bins (n, D), SparseBins or None) of one part.

    Without sparse features the dense matrix is ``part.bins`` itself. Side effect: none; the
    caller drops ``part`` afterwards, so the full binned matrix does not stay.
    """
    xp = backend.xp
    n = part.n_rows
    dtype = cuts.bin_dtype
    if part.csr is None and not routing.has_sparse:
        return part.bins, None
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
        indptr[1:] = xp.cumsum(table_counts(xp, rows, n))
        sparse = SparseBins(indptr=indptr, entry_feature=features, entry_bin=entry_bins)
        return dense, sparse
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
        rows = entry_rows(xp, block.indptr, block.nnz)  # block-relative
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
        row_counts[r0:r1] = table_counts(xp, rows_b, r1 - r0)
        # narrowed per block: the whole store's ids never exist wider than they are stored
        feature_parts.append(ids_b.astype(feature_dtype, copy=False))
        bin_parts.append(bins_b.astype(dtype, copy=False))
    if not n_sparse:
        return dense, None
    indptr = xp.zeros(n + 1, dtype=xp.int64)
    indptr[1:] = xp.cumsum(row_counts)
    sparse = SparseBins(indptr=indptr, entry_feature=xp.concatenate(feature_parts),
                        entry_bin=xp.concatenate(bin_parts))
    return dense, sparse
