"""Column stores: the dense binned matrix and the sparse entries, behind one protocol.

A ``ShardSet`` holds its features in stores, the dense one first: ``DenseStore`` keeps each shard's
bins row by row and column by column; ``SparseStore`` keeps only the entries outside each sparse
feature's most common bin (``gbflow.routing`` decides which features go where). Every store
offers the same operations, on the shard set's rows and a level's node segments:

- ``build_histograms``: the histograms of listed node segments of a shard;
- ``fill_common_bins``: complete a level's histograms from the node totals (sparse: the common
  bins it does not store; dense: nothing to do);
- ``search``: the best split of every node over the store's features (store-local ids);
- ``allowed``: a tree's feature sample as the store's device mask.

The dense store is also the one the rows are partitioned with (its fused partition-and-
histogram kernel builds its children's histograms); the other store adds its children's from the
moved rows (``SparseStore.add_histograms``), and a level whose splits include its features first
gathers the rows' split bins into one column (``SparseStore.gather_split_bins``). Stores change
speed and memory, never the model: the split search over several stores keeps, per node, the
best of their results with ties going to the lower feature id, as one search over all features
would.
"""
from __future__ import annotations

import dataclasses

import numpy as np

from .backend.common import entry_slots as common_entry_slots
from .backend.common import padded_width


@dataclasses.dataclass
class SparseBins:
    """One shard's sparse entries, on the backend's device: only entries outside the common bin.

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


def entry_slots(entries: SparseBins, bin_offsets: np.ndarray) -> np.ndarray:
    """(nnz,) each host entry's histogram slot bin_offsets[feature] + bin: uint16 while the
    slots fit (2 bytes an entry), else int32."""
    return common_entry_slots(entries.entry_feature, entries.entry_bin, bin_offsets)


@dataclasses.dataclass
class SparseColumns:
    """A shard's sparse entries indexed for the CPU kernels (``Backend.indexes_sparse_columns``):
    by feature, for ``split_column`` to walk a split feature's entries instead of searching every
    row, and each entry's histogram slot, for ``build_sparse_histograms``.

    col_ptr: (S + 1,) int64, feature s's entries at col_ptr[s]:col_ptr[s + 1]; col_rows: (nnz,)
    int32 their rows, ascending within a feature; col_bins: (nnz,) their bins. marks: (n_rows,)
    int32 scratch of ``split_column``, -1 between its calls. slots: ``entry_slots`` of the
    entries, in entry order."""

    col_ptr: np.ndarray
    col_rows: np.ndarray
    col_bins: np.ndarray
    marks: np.ndarray
    slots: np.ndarray

    @classmethod
    def of(cls, entries: SparseBins, n_sparse: int, bin_offsets: np.ndarray) -> "SparseColumns":
        """The index of a host ``SparseBins`` of ``n_sparse`` features (bin_offsets: the
        store's (S + 1,) slot offsets)."""
        counts = np.diff(entries.indptr)
        rows = np.repeat(np.arange(len(counts), dtype=np.int32), counts)
        order = np.argsort(entries.entry_feature, kind="stable")  # rows stay ascending
        col_ptr = np.zeros(n_sparse + 1, dtype=np.int64)
        np.cumsum(np.bincount(entries.entry_feature, minlength=n_sparse), out=col_ptr[1:])
        return cls(col_ptr, rows[order], entries.entry_bin[order],
                   np.full(len(counts), -1, dtype=np.int32), entry_slots(entries, bin_offsets))

    @property
    def nbytes(self) -> int:
        return int(self.col_ptr.nbytes + self.col_rows.nbytes + self.col_bins.nbytes
                   + self.marks.nbytes + self.slots.nbytes)


class _Store:
    """What both stores share: their features and a tree's mask of them."""

    def __init__(self, backend, features: np.ndarray, n_value_bins: np.ndarray):
        self.backend = backend
        self.features = np.asarray(features, dtype=np.int64)  # (k,) global ids, ascending
        self.n_value_bins_host = np.asarray(n_value_bins, dtype=np.int32)
        self.n_value_bins = backend.xp.asarray(self.n_value_bins_host)  # (k,) int32, device
        self._allowed = None  # the last tree's (host mask, device mask)
        self._by_level = None  # the planned trees' per-depth (host masks, device masks)
        self._monotone = None  # the fit's (global signs, the store's on the device)

    @property
    def n_features(self) -> int:
        return len(self.features)

    def local_bounds(self, bounds):
        """A level's weight bounds with the store's own features' monotone signs (on the
        device, uploaded once: every level of a fit has the same)."""
        if bounds is None or bounds[2] is None:
            return bounds
        signs = bounds[2]
        if self._monotone is None or self._monotone[0] is not signs:
            self._monotone = (signs, self.backend.xp.asarray(
                np.ascontiguousarray(signs[self.features])))
        return bounds[0], bounds[1], self._monotone[1]

    def allowed(self, feature_allowed: np.ndarray):
        """(k,) bool device mask of the store's allowed features (``feature_allowed``: (F,)
        host bool over all features), or (n_nodes, k) from a (n_nodes, F) mask per node. The
        last mask is kept: without column sampling every tree allows the same features, and an
        upload costs host time every tree."""
        if self._allowed is not None and np.array_equal(self._allowed[0], feature_allowed):
            return self._allowed[1]
        mask = self.backend.xp.asarray(np.ascontiguousarray(feature_allowed[...,
                                                                            self.features]))
        self._allowed = (np.array(feature_allowed, dtype=bool), mask)
        return mask

    def allowed_by_level(self, by_level: np.ndarray) -> list:
        """Per depth the (k,) bool device mask of the store's allowed features (``by_level``:
        (max_depth, F) host bool over all features): rows of one device array that stays
        where it is, written again when the masks change (a level loop recorded once,
        ``Backend.recorder``, reads them there at every replay; without column sampling
        nothing is copied)."""
        masks = np.ascontiguousarray(by_level[:, self.features], dtype=bool)
        held = self._by_level
        if held is None or held[0].shape != masks.shape:
            held = self._by_level = (masks, self.backend.xp.asarray(masks))
        elif not np.array_equal(held[0], masks):
            held[1][...] = self.backend.xp.asarray(masks)
            held[0][...] = masks
        return list(held[1])


class DenseStore(_Store):
    """The dense features' bins, per shard (n, D) uint8/uint16 row by row: a view of a
    zero-padded (n, W) matrix (``binning.padded_width``). Histograms read whole rows; a row's
    side at a split is read from one feature's column (``columns``).

    Resident (``pages`` None): each shard's bins on the device, and with ``column_copy`` also a
    (D, n) column-major copy (the partition's reads of one feature are then contiguous; without
    it ``columns`` is a transposed view of the rows: one binned copy of the data). Paged: each
    shard's padded bins are a host page (``Backend.to_page``) read through the backend's
    ``page_reader``, which keeps at most two pages on the device; the shards are then the pages.
    D may be 0 (every feature sparse): the store still partitions the rows."""

    def __init__(self, backend, features, n_value_bins, column_copy: bool = True,
                 paged: bool = False):
        super().__init__(backend, features, n_value_bins)
        self.column_copy = column_copy and not paged
        self.paged = paged
        self.dtype = None  # the bins' dtype, set by the first shard
        self._bins: list = []  # per shard: device (n, D) views, or host padded (n, W) pages
        self._by_feature: list = []  # per shard (D, n) column copies (column_copy)
        self._reader = None
        # (store-local feature, its bins including the missing one) of the feature with the
        # fewest bins (the first of equal ones): ``histogram.node_totals`` reads its bins
        # (every tree and level: found once)
        narrow = int(np.argmin(self.n_value_bins_host)) if self.n_features else 0
        self.narrowest = (narrow, int(self.n_value_bins_host[narrow]) + 1) \
            if self.n_features else (0, None)


    def add_shard(self, bins) -> None:
        """Shard s's (n, D) bins (a view of its padded storage, on the device or the host):
        kept on the device, or paged to the host (the device copy can then be freed)."""
        self.dtype = bins.dtype
        if self.paged:
            self._bins.append(self.backend.to_page(padded_storage(bins)))
            self._reader = None
            return
        bins = self.backend.asarray(bins)
        self._bins.append(bins)
        if self.column_copy:
            self._by_feature.append(self.backend.xp.ascontiguousarray(bins.T))

    def rows(self, s: int):
        """(n, D) device bins of shard s. Paged: the page in a device buffer, valid until two
        other pages have been asked for."""
        return self._bins[s] if not self.paged else self.padded_rows(s)[:, : self.n_features]

    def padded_rows(self, s: int):
        """(n, W) device bins of shard s with their zero padding (``rows(s)`` is the first D
        columns), valid as ``rows(s)`` is."""
        if not self.paged:
            return padded_storage(self._bins[s])
        if self._reader is None:
            self._reader = self.backend.page_reader(self._bins)
        return self._reader.get(s)

    def host_page(self, s: int):
        """Paged: shard s's (n, W) padded bins as their host page (``Backend.to_page``'s), for
        ``Backend.scatter_page_rows`` and ``Backend.predict_pages_binned``, which read them
        where they lie on the GPU."""
        if not self.paged:
            raise ValueError("DenseStore.host_page: the store is not paged")
        return self._bins[s]

    def columns(self, s: int):
        """(D, n) device bins of shard s by feature: the column copy, or a transposed view of
        ``rows(s)`` (the kernels take any strides)."""
        return self._by_feature[s] if self.column_copy else self.rows(s).T

    @property
    def bytes_streamed(self) -> int:
        """Bytes copied from host pages to the device so far (0 unless paged)."""
        return getattr(self._reader, "bytes_copied", 0)

    def nbytes(self, s: int) -> int:
        """Bytes of shard s's bins: the padded storage (on the device, or a host page) and the
        column copy."""
        copy = nbytes_of(self._by_feature[s]) if self.column_copy else 0
        return nbytes_of(self._bins[s]) + copy

    def build_histograms(self, s, gh, row_index, seg_start, seg_count, n_bins: int):
        """(n_nodes, D, n_bins, 2) int64 device histograms of shard s's listed segments."""
        return self.backend.kernels.build_histograms(self.rows(s), gh, row_index, seg_start,
                                                     seg_count, n_bins, self.n_value_bins_host)

    def fill_common_bins(self, hist, totals) -> None:
        """Nothing to fill: every bin is stored."""

    def search(self, hist, allowed, constants: tuple, bounds=None) -> tuple:
        """``evaluate_splits`` on the store's histograms: five device arrays, features as
        store-local ids. bounds: None, or the level's (max_delta_step, device node bounds,
        global monotone signs or None) (``WeightBounds.search_bounds``)."""
        return self.backend.kernels.evaluate_splits(hist, self.n_value_bins, allowed, *constants,
                                                    bounds=self.local_bounds(bounds))


def padded_storage(bins):
    """The (n, W) zero-padded matrix that (n, D) ``bins`` is the first columns of (``bins``
    itself when it has no padding)."""
    base = getattr(bins, "base", None)
    if base is not None and base.ndim == 2 and base.shape[0] == bins.shape[0] and \
            base.strides == bins.strides and base.dtype == bins.dtype:
        return base
    return bins


class SparseStore(_Store):
    """The sparse features' entries (per shard a ``SparseBins``) and their compact histograms
    (n_nodes, n_slots, 2): feature s's bins 0..n_value_bins[s] at slots
    bin_offsets[s]..bin_offsets[s + 1] - 1, its common bin filled in from the node totals."""

    def __init__(self, backend, features, n_value_bins, common_bin, bin_offsets):
        super().__init__(backend, features, n_value_bins)
        xp = backend.xp
        self.common_bin = xp.asarray(np.asarray(common_bin, dtype=np.int32))  # (S,) device
        self.bin_offsets_host = np.asarray(bin_offsets, dtype=np.int64)  # (S + 1,)
        self.bin_offsets = xp.asarray(self.bin_offsets_host)
        # the split search's padded width, computed once (else each level would read the
        # offsets on the host: on the GPU a copy of them a level)
        self.padded_bins = padded_width(self.bin_offsets_host)
        self.n_slots = int(self.bin_offsets_host[-1])
        self.entries: list[SparseBins] = []
        self.columns: list[SparseColumns | None] = []

    def add_shard(self, entries: SparseBins) -> None:
        self.entries.append(entries)
        self.columns.append(SparseColumns.of(entries, self.n_features, self.bin_offsets_host)
                            if self.backend.indexes_sparse_columns else None)

    def nbytes(self, s: int) -> int:
        columns = self.columns[s]
        return self.entries[s].nbytes + (columns.nbytes if columns is not None else 0)

    def build_histograms(self, s, gh, row_index, seg_start, seg_count, n_bins: int):
        """(n_nodes, n_slots, 2) int64 device histograms of shard s's listed segments, the
        common bins 0 (``fill_common_bins``)."""
        return self.add_histograms(s, gh, row_index, seg_start, seg_count, None)

    def add_histograms(self, s, gh, row_index, seg_start, seg_count, out, children=None):
        """``build_histograms`` added into ``out`` (C-contiguous, or new when None). children:
        None, or (left counts, built_left) of split segments after their partition: the built
        children's histograms (``build_sparse_histograms``' split_left, built_left)."""
        e, columns = self.entries[s], self.columns[s]
        split_left, built_left = (None, None) if children is None else children
        return self.backend.kernels.build_sparse_histograms(
            e.indptr, e.entry_feature, e.entry_bin, self.bin_offsets, gh, row_index, seg_start,
            seg_count, self.n_slots, out=out, slots=None if columns is None else columns.slots,
            split_left=split_left, built_left=built_left)

    def fill_common_bins(self, hist, totals) -> None:
        """Set each feature's common bin of every node to the node total minus its other bins
        (totals: (n_nodes, 2) int64, host or device), in place."""
        self.backend.kernels.fill_common_bins(hist, self.backend.xp.asarray(totals),
                                              self.bin_offsets, self.common_bin)

    def search(self, hist, allowed, constants: tuple, bounds=None) -> tuple:
        """``evaluate_sparse_splits`` on the compact histograms (common bins filled); bounds
        as ``DenseStore.search`` takes them."""
        return self.backend.kernels.evaluate_sparse_splits(
            hist, self.bin_offsets, self.n_value_bins, allowed, *constants,
            bounds=self.local_bounds(bounds), padded_bins=self.padded_bins)

    def gather_split_bins(self, s, dense_by_feature, row_index, seg_start, seg_count,
                          dense_feature, sparse_feature, out) -> None:
        """Every listed node's rows' bins of its split feature into ``out`` (n,): node k splits
        on dense feature ``dense_feature[k]`` (a row of the dense store's ``dense_by_feature``)
        when it is >= 0, else on sparse feature ``sparse_feature[k]`` (int32 (n_nodes,) host)."""
        e = self.entries[s]
        self.backend.kernels.split_column(dense_by_feature, e.indptr, e.entry_feature,
                                          e.entry_bin, self.common_bin, row_index, seg_start,
                                          seg_count, dense_feature, sparse_feature, out,
                                          columns=self.columns[s])


def nbytes_of(array) -> int:
    """Bytes an array holds, its padded storage's for a view of one."""
    base = getattr(array, "base", None)  # the binned matrix is a view of padded storage
    return int(base.nbytes if base is not None and hasattr(base, "nbytes") else array.nbytes)
