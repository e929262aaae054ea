"""The shards one process trains on: column stores, targets, margins, row arrays, collective."""
from __future__ import annotations

import dataclasses
import os

import numpy as np

from . import _dtypes, histogram
from .collective import LOCAL
from .histogram import Histograms, LevelBuffers
from .timers import Timers


@dataclasses.dataclass
class Shard:
    """One part's training targets and margins, on the backend's device (its bins live in the
    shard set's stores).

    label: (n,) float64. weight: (n,) float64 or None. row_offset: global row number of the
    shard's first row (keeps row sampling independent of how rows are split into shards), or an
    (n,) uint64 host array of each row's global number when they do not follow each other (a
    Dask worker's shard joining partitions that are not adjacent). margin: (n, n_groups) float64,
    updated in place after every tree (set once the base margin is known).
    """

    label: object
    weight: object
    row_offset: object  # int, or (n,) uint64 array
    margin: object = None
    queries: object = None  # the ranking objectives' ``ranking.QueryGroups`` of its rows

    @property
    def n_rows(self) -> int:
        return int(self.label.shape[0])


class ShardSet:
    """The shards of this process and how their sums reach the other processes.

    ``stores`` hold the binned columns (``gbflow.stores``: the dense store first, the one rows
    are partitioned with). ``collective`` does every reduction across processes
    (``gbflow.collective``; every process calls it in the same order). Every method that sums
    over shards adds integers, so the result does not depend on the number or order of shards or
    processes.
    """

    def __init__(self, backend, collective=LOCAL):
        self.backend = backend
        self.collective = collective
        self.shards: list[Shard] = []
        self.stores: list = []  # set_stores, before any tree is grown
        self.timers = Timers()
        self.row_index: list = []  # per shard (n_i,) int32, rows grouped by tree node
        self._spare_index: list = []  # per shard, the array the next partition writes into
        self.level_buffers = LevelBuffers(backend.xp)  # the levels' histogram storage
        # planned trees (``gbflow.grow``): None where the backend queues ahead, True to plan on
        # any backend (the tests' CPU check of the planned loop), False never; the environment's
        # GBFLOW_LEVEL_PLANS=0 or 1 sets False or True (to compare the loops)
        self.level_plans: bool | None = {"0": False, "1": True}.get(
            os.environ.get("GBFLOW_LEVEL_PLANS", ""))
        self.planned_layout = None  # the planned trees' level arrays (``grow.planned``)
        # replay the planned trees' level loops and margin updates (``Backend.recorder``: CUDA
        # graphs); a margin update is recorded per output (class) and holds no memory
        self.recorder = backend.recorder()
        self.margin_recorder = backend.recorder(most=64)
        # and the evaluation sets' transform and metrics, one record a run (``evaluation``)
        self.eval_recorder = backend.recorder(most=2)
        # whole trees in one backend call (``grow.whole``) where the backend has the grower
        # and the data allows; GBFLOW_WHOLE_TREES=0 turns them off (to compare the loops)
        self.whole_trees = os.environ.get("GBFLOW_WHOLE_TREES", "") != "0"
        self._owner = self._local = None  # per feature: its store, its id there
        self._split_column: list = []  # per shard, the gathered split bins (several stores)
        self.categorical: np.ndarray | None = None  # (F,) bool, set with the stores (prepare)
        # per shard (part, first row, end row): the rows of this process's part it holds (a
        # part is one shard, or several pages)
        self.part_rows: list[tuple[int, int, int]] = []
        # per part a ``Shard`` of all its rows, whose label, weight and margin arrays the
        # part's shards (pages) are views of (set with the shards, margins in training)
        self.part_shards: list[Shard] = []
        # paged sampled training: the most rows a tree's sample gathered onto the device may
        # hold (``grow.gathered``; the pages were sized around it), else None
        self.sample_rows: int | None = None
        self.sample_column_copy = False  # whether the sample keeps its bins' column copy

    def set_stores(self, stores: list) -> None:
        """Where the features live (every shard's data in each store). Allocates each shard's
        split column when there are several stores (a level splitting on a sparse feature
        gathers its rows' split bins there)."""
        self.stores = stores
        n_features = sum(store.n_features for store in stores)
        self._owner = np.zeros(n_features, dtype=np.int32)
        self._local = np.zeros(n_features, dtype=np.int32)
        for i, store in enumerate(stores):
            self._owner[store.features] = i
            self._local[store.features] = np.arange(store.n_features)
        if len(stores) > 1 or self.has_categorical:
            dense = stores[0]
            self._split_column = [self.backend.xp.zeros(shard.n_rows, dtype=dense.dtype)
                                  for shard in self.shards]

    @property
    def dense(self):
        """The dense store: the one rows are partitioned with."""
        return self.stores[0]

    @property
    def has_categorical(self) -> bool:
        return self.categorical is not None and bool(self.categorical.any())

    @property
    def _dense_numeric_only(self) -> bool:
        """Whether every feature is in the dense store and none is categorical: what the
        planned and the whole-tree loops take."""
        return len(self.stores) == 1 and self.dense.n_features > 0 and not self.has_categorical

    @property
    def uses_level_plans(self) -> bool:
        """Whether trees are grown planned: only dense, numeric features, and ``level_plans``
        True, or None where the backend queues ahead."""
        wanted = self.backend.queues_ahead if self.level_plans is None else self.level_plans
        return self._dense_numeric_only and wanted

    @property
    def grows_whole_trees(self) -> bool:
        """Whether trees may be grown in one backend call (``grow.whole``): the backend has a
        whole-tree grower, ``whole_trees`` is on, and there is one process, one resident shard
        and only numeric features (dense, sparse or both)."""
        return self.whole_trees and self.backend.grow_whole_tree is not None and \
            not self.has_categorical and len(self.shards) == 1 and \
            self.collective.size == 1 and not self.dense.paged

    def shard_views(self, arrays: list) -> list:
        """Per shard its rows of per-part ``arrays`` (one per ``part_shards`` entry): views."""
        return [arrays[i][r0:r1] for i, r0, r1 in self.part_rows]

    @property
    def n_rows_total(self) -> int:
        return int(self.collective.allreduce_sum(
            np.array([sum(s.n_rows for s in self.shards)]))[0])

    def reset_row_index(self) -> None:
        """Start a tree: every shard's rows in one segment (the root), in row order, written
        into the row arrays of the last tree where they fit. The spare row arrays (one per
        shard, allocated once) are kept: a partition writes its segments before anything reads
        them."""
        xp = self.backend.xp
        if [len(r) for r in self.row_index] == [s.n_rows for s in self.shards]:
            for rows in self.row_index:  # in place: a recorded level loop writes them there
                self.backend.row_numbers(rows)
        else:
            self.row_index = [xp.arange(s.n_rows, dtype=_dtypes.ROW_INDEX) for s in self.shards]
        if len(self._spare_index) != len(self.shards):
            self._spare_index = [xp.empty_like(r) for r in self.row_index]

    def allreduce_histograms(self, hist: Histograms) -> Histograms:
        """Every store's local histograms summed over all processes, in place (``hist``'s arrays
        may be views into a level's histograms). Returns ``hist``."""
        self.collective.allreduce_sum_inplace(list(hist.arrays))
        return hist

    def build_histograms(self, gh, seg_start, seg_count, n_bins) -> Histograms:
        """Global histograms of the listed node segments: local shards summed, then all-reduced.

        gh: per shard (n_i, 2) int64. seg_start/seg_count: per shard (n_nodes,) int64 host arrays.
        Returns ``Histograms`` on the device; the sparse features' common bins are still 0
        (``fill_common_bins``).
        """
        arrays = []
        for store in self.stores:
            total = None
            for s in range(len(self.shards)):
                part = store.build_histograms(s, gh[s], self.row_index[s], seg_start[s],
                                              seg_count[s], n_bins)
                total = part if total is None else total + part
            arrays.append(total)
        return self.allreduce_histograms(Histograms(tuple(arrays)))

    def root_totals(self, hist: Histograms, gh):
        """(1, 2) int64 global [g, h] of the root: from the dense histograms (on the device,
        the narrowest feature's bins: ``DenseStore.narrowest``) when there are dense features,
        else the gradients' sum (host)."""
        if self.dense.n_features:
            return histogram.node_totals(hist.arrays[0], *self.dense.narrowest)
        return self.backend.to_host(self.collective.allreduce_sum(
            sum(g.sum(axis=0) for g in gh)[None, :]))

    def fill_common_bins(self, hist: Histograms, totals: np.ndarray) -> None:
        """Complete every store's histograms from the nodes' global (n_nodes, 2) int64 totals."""
        for store, array in zip(self.stores, hist.arrays):
            store.fill_common_bins(array, totals)

    def split_source(self, s: int, seg_start, seg_count, feature, side_map=None) -> tuple:
        """Where the partition and margin kernels read shard s's split bins from: (a (k, n)
        bins-by-feature matrix on the device, ``split_ids``) for the listed nodes' global split
        ``feature`` (n_nodes,).

        When every node splits on a dense feature: the dense store's columns. Otherwise the
        rows' bins of their node's split feature are gathered into the shard's split column,
        read as a (1, n) matrix. side_map: None, or (n_nodes, n_bins) uint8 host
        (``LevelSplits.side_map``): the column then holds each row's bin mapped through its
        node's row (0 missing, 1 left, 2 right). The dense columns of a paged store are valid
        until other shards' are read: call this right before the kernels that read it."""
        ids = self.split_ids(feature, side_map)
        owner, local = self._owner[feature], self._local[feature]
        dense = self.dense
        if (owner == 0).all() and side_map is None:
            return dense.columns(s), ids
        column = self._split_column[s]
        matrix, columns_ids = dense.columns(s), local
        if not (owner == 0).all():
            self.stores[1].gather_split_bins(s, matrix, self.row_index[s],
                                             seg_start, seg_count, np.where(owner == 0, local, -1),
                                             np.where(owner == 1, local, -1), column)
            matrix, columns_ids = column[None, :], ids
        if side_map is not None:
            self.backend.kernels.map_sides(matrix, self.row_index[s], seg_start, seg_count,
                                           columns_ids, side_map, column)
        return column[None, :], ids

    def split_matrix(self, s: int, seg_start, seg_count, feature, side_map=None):
        """``split_source``'s matrix alone (what a ``LeafRows``' ``by_feature`` calls)."""
        return self.split_source(s, seg_start, seg_count, feature, side_map)[0]

    def split_ids(self, feature, side_map=None) -> np.ndarray:
        """(n_nodes,) int32 host: each node's row of its ``split_source`` matrix."""
        if (self._owner[feature] == 0).all() and side_map is None:
            return self._local[feature]
        return np.zeros(len(feature), dtype=np.int32)

    def partition(self, gh, seg_start, seg_count, feature, bin_threshold, default_left,
                  small_is_left, n_bins, out: Histograms, side_map=None,
                  whole: bool = False) -> list:
        """Split every listed node's rows into its children, in every shard, and add the global
        histograms of the children picked by ``small_is_left`` (bool per node) into ``out``.

        Each shard's rows go from its current row array into its spare one, which then becomes
        current: the listed segments are rewritten there, and every other segment keeps its
        rows in the array it was in (leaves of earlier levels, whose ``LeafRows`` hold that
        array). The dense store's histograms are built in the same pass as the partition; the
        other stores' from the moved rows. feature: (n_nodes,) global feature ids. out:
        ``Histograms`` of n_nodes nodes, zeroed (the built half of the next level,
        ``Histograms.next_level``): every shard's kernels add into it, then it is all-reduced in
        place; its common bins are left 0. Returns per shard (n_nodes,) int64 left counts. They
        stay on the device (the caller fetches them with the next level's splits, in one wait;
        the other stores' histograms read them there). side_map: as
        ``split_source``'s (bin_threshold then 1 for every node). whole: every shard's current
        row array is first copied whole into the spare one, so that every segment is in the
        new current array (the best-first grower, whose unsplit leaves may split later).
        """
        kernels = self.backend.kernels  # the split arrays stay on the host: kernels take either
        dense, others = self.dense, list(zip(self.stores[1:], out.arrays[1:]))
        left_counts = []
        for s in range(len(self.shards)):
            # the partition reads its rows' sides through side_map itself (no mapped column)
            by_feature, store_feature = self.split_source(s, seg_start[s], seg_count[s], feature)
            moved = self._spare_index[s]
            if whole:
                moved[...] = self.row_index[s]
            left, _ = kernels.partition_and_histogram(
                dense.rows(s), by_feature, gh[s], self.row_index[s], seg_start[s],
                seg_count[s], store_feature, bin_threshold, default_left, small_is_left, n_bins,
                out=out.arrays[0], dest=moved, n_value_bins=dense.n_value_bins_host,
                side_map=side_map)
            for store, array in others:  # the built children, their left counts where they are
                store.add_histograms(s, gh[s], moved, seg_start[s], seg_count[s], array,
                                     children=(left, small_is_left))
            left_counts.append(left)
        self.row_index, self._spare_index = self._spare_index, self.row_index
        self.allreduce_histograms(out)
        return left_counts
