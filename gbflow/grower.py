"""Grows one tree level by level over a ShardSet: histograms, splits, row partition, leaf margins."""
from __future__ import annotations

import collections
import contextlib
import dataclasses
import os
import time

import numpy as np

from . import _dtypes, histogram, split
from .backend import packed_empty
from .histogram import Histograms, LevelBuffers
from .routing import DeviceRouting, SparseBins
from .tree import Tree


@dataclasses.dataclass
class Shard:
    """One partition's training data after quantization, on the backend's device.

    bins: (n, D) uint8/uint16 bins of the dense features (all features without sparse routing),
    row by row; bins_by_feature: (D, n), the same bins column by column (a row's side at a split
    is read from one column; histograms read whole rows). sparse: the sparse features' entries
    (``routing.SparseBins``) or None. split_bins: (n,) bins scratch column used when features
    are sparse: a level that splits on a sparse feature gathers the rows' bins of their node's
    split feature into it.
    label: (n,) float64. weight: (n,) float64 or None.
    margin: (n, n_groups) float64, updated in place after every tree. row_offset: global row number
    of this shard's first row (keeps row sampling independent of how rows are split into shards),
    or an (n,) uint64 host array of each row's global number when they do not follow each other
    (a Dask worker's shard joining partitions that are not adjacent).
    """

    bins: object
    bins_by_feature: object
    label: object
    weight: object
    margin: object
    row_offset: object  # int, or (n,) uint64 array
    sparse: SparseBins | None = None
    split_bins: object = None

    @property
    def n_rows(self) -> int:
        return int(self.bins.shape[0])


@dataclasses.dataclass
class LeafRows:
    """Where one shard's rows ended up in a tree: all the margin update needs.

    Leaves above the last level own segments of a row array: ``leaves`` holds, per array that
    holds any, (row_index, leaf_start, leaf_count, leaf_value). (The grower partitions from one
    row array into the other and back, level by level, and a leaf's rows stay where its level
    left them.) Nodes split at the last level were not partitioned: their segments of
    ``row_index`` (split_start, split_count) and splits (feature, bin_threshold, default_left)
    send each row to left_value or right_value. Host arrays, except the row arrays (device).
    ``feature`` indexes the rows of ``bins_by_feature``: the shard's dense bins when None, else a
    (1, n) device column holding each row's bin of its last-level node's split feature (then
    ``feature`` is zeros).
    """

    leaves: list
    row_index: object
    split_start: np.ndarray
    split_count: np.ndarray
    feature: np.ndarray
    bin_threshold: np.ndarray
    default_left: np.ndarray
    left_value: np.ndarray
    right_value: np.ndarray
    bins_by_feature: object = None

    def add_to(self, kernels, bins_by_feature, margin) -> None:
        """margin[row] += the value of the row's leaf, for every row (margin: (n,) float64)."""
        for row_index, start, count, value in self.leaves:
            kernels.add_leaf_values(margin, row_index, start, count, value)
        if len(self.split_start):
            if self.bins_by_feature is not None:
                bins_by_feature = self.bins_by_feature
            kernels.add_split_leaf_values(margin, bins_by_feature, self.row_index, self.split_start,
                                          self.split_count, self.feature, self.bin_threshold,
                                          self.default_left, self.left_value, self.right_value)


class Timers:
    """Seconds spent per stage, accumulated over a training run."""

    def __init__(self):
        self.seconds = collections.defaultdict(float)

    @contextlib.contextmanager
    def __call__(self, stage: str):
        start = time.perf_counter()
        try:
            yield
        finally:
            self.seconds[stage] += time.perf_counter() - start


class ShardSet:
    """The shards one process trains on, and how sums reach the other processes.

    In one process ``allreduce_sum``/``allreduce_max``/``allgather`` return their input (a list of
    it for ``allgather``); the Dask integration (``gbflow.dask.task.CollectiveShardSet``)
    overrides them with a collective over the workers. Every process calls them in the same order.
    Every method that sums over shards adds integers, so the result does not depend on the number
    or order of shards or processes.
    """

    def __init__(self, backend, shards: list[Shard]):
        self.backend = backend
        self.shards = shards
        self.timers = Timers()
        self.row_index: list = []  # per shard (n_i,) int32, rows grouped by tree node
        self._spare_index: list = []  # per shard, the array the next partition writes into
        self.routing: DeviceRouting | None = None  # set_routing, before any tree is grown
        self.level_buffers = LevelBuffers(backend.xp)  # the levels' histogram storage
        # planned trees (``grow_tree``): None on the GPU when every feature is dense, True to
        # plan on any backend (the tests' CPU check of the planned loop), False never; the
        # environment's GBFLOW_LEVEL_PLANS=0 or 1 sets False or True (to compare the loops)
        self.level_plans: bool | None = {"0": False, "1": True}.get(
            os.environ.get("GBFLOW_LEVEL_PLANS", ""))
        self._planned_layout = None

    @property
    def uses_level_plans(self) -> bool:
        """Whether trees are grown planned: only dense features, and ``level_plans`` True, or
        None on the GPU."""
        dense_only = not self.has_sparse and len(self.routing.routing.dense) > 0
        wanted = self.backend.name == "cuda" if self.level_plans is None else self.level_plans
        return dense_only and wanted

    def planned_layout(self, max_depth: int, node_bytes: int) -> "_PlannedLayout":
        """The planned trees' fixed level arrays, made at the first tree (see
        ``_PlannedLayout``)."""
        layout = self._planned_layout
        if layout is None or (layout.max_depth, layout.node_bytes) != (max_depth, node_bytes):
            layout = self._planned_layout = _PlannedLayout(self.backend.xp, self.backend.kernels,
                                                           self.shards, max_depth, node_bytes)
        return layout

    @property
    def has_sparse(self) -> bool:
        return self.routing.routing.has_sparse

    def set_routing(self, routing: DeviceRouting) -> None:
        """Where the features live; every shard's stores follow it. Allocates each shard's
        split column when some features are sparse."""
        self.routing = routing
        if routing.routing.has_sparse:
            for shard in self.shards:
                shard.split_bins = self.backend.xp.zeros(shard.n_rows, dtype=shard.bins.dtype)

    def reset_row_index(self) -> None:
        """Start a tree: every shard's rows in one segment (the root), in row order. The spare
        row arrays (one per shard, allocated once) are kept: a partition writes its segments
        before anything reads them."""
        xp = self.backend.xp
        self.row_index = [xp.arange(s.n_rows, dtype=_dtypes.ROW_INDEX) for s in self.shards]
        if len(self._spare_index) != len(self.shards):
            self._spare_index = [xp.empty_like(r) for r in self.row_index]

    def allreduce_sum(self, array):
        """Elementwise sum over all processes of an integer array (host or device); a new array
        or ``array`` itself. Never modify the result in place: it may be ``array``."""
        return array

    def allreduce_sum_inplace(self, arrays: list) -> None:
        """Sum each integer device array over all processes, writing the sums into it (every
        process passes arrays of the same shapes, in the same order). Arrays must be
        C-contiguous; they may be views (a level's node range). Nothing to do in one process."""

    def allreduce_max(self, value):
        """Elementwise max over all processes of a float or a host float64 array."""
        return value

    def allgather(self, value) -> list:
        """Every process's ``value`` (any picklable object), in process order; read-only."""
        return [value]

    @property
    def n_rows_total(self) -> int:
        return int(self.allreduce_sum(np.array([sum(s.n_rows for s in self.shards)]))[0])

    def _allreduce_histograms(self, hist: Histograms) -> Histograms:
        """Both stores' local histograms summed over all processes, in place (``hist``'s arrays
        may be views into a level's histograms). Returns ``hist``."""
        self.allreduce_sum_inplace([hist.dense] if hist.sparse is None else
                                   [hist.dense, hist.sparse])
        return hist

    def _sparse_histograms(self, s: int, gh, row_index, seg_start, seg_count, out=None):
        shard, r = self.shards[s], self.routing
        kernels = self.backend.kernels
        return kernels.build_sparse_histograms(
            shard.sparse.indptr, shard.sparse.entry_feature, shard.sparse.entry_bin,
            r.bin_offsets, gh, row_index, seg_start, seg_count, r.routing.n_slots, out=out)

    def build_histograms(self, gh, seg_start, seg_count, n_bins) -> Histograms:
        """Global histograms of the listed node segments: local shards summed, then all-reduced.

        gh: per shard (n_i, 2) int64. seg_start/seg_count: per shard (n_nodes,) int64 host arrays.
        Returns ``Histograms`` on the device; the sparse features' common bins are still 0
        (``fill_common_bins``).
        """
        dense = sparse = None
        for s, shard in enumerate(self.shards):
            part = self.backend.kernels.build_histograms(shard.bins, gh[s], self.row_index[s],
                                                         seg_start[s], seg_count[s], n_bins)
            dense = part if dense is None else dense + part
            if self.has_sparse:
                part = self._sparse_histograms(s, gh[s], self.row_index[s], seg_start[s],
                                               seg_count[s])
                sparse = part if sparse is None else sparse + part
        return self._allreduce_histograms(Histograms(dense, sparse))

    def fill_common_bins(self, hist: Histograms, totals: np.ndarray) -> None:
        """Set the sparse features' common bins from the nodes' global (n_nodes, 2) int64 totals."""
        if hist.sparse is not None:
            r = self.routing
            self.backend.kernels.fill_common_bins(hist.sparse, self.backend.xp.asarray(totals),
                                                  r.bin_offsets, r.common_bin)

    def split_source(self, s: int, seg_start, seg_count, feature) -> tuple:
        """Where the partition and margin kernels read shard s's split bins from: (bins_by_feature,
        feature ids into it) for the listed nodes' global split ``feature`` (n_nodes,).

        Without sparse features: the shard's bins_by_feature and ``feature`` itself. When every
        node splits on a dense feature: the same, with the dense features' ids. Otherwise the
        rows' bins of their node's split feature are gathered into the shard's split column,
        read as a (1, n) matrix with feature 0."""
        shard, r = self.shards[s], self.routing
        if not self.has_sparse:
            return shard.bins_by_feature, feature
        dense_feature, sparse_feature = r.split_features(feature)
        if (sparse_feature < 0).all():
            return shard.bins_by_feature, dense_feature
        self.backend.kernels.split_column(
            shard.bins_by_feature, shard.sparse.indptr, shard.sparse.entry_feature,
            shard.sparse.entry_bin, r.common_bin, self.row_index[s], seg_start, seg_count,
            dense_feature, sparse_feature, shard.split_bins)
        return shard.split_bins[None, :], np.zeros(len(feature), dtype=np.int32)

    def partition(self, gh, seg_start, seg_count, feature, bin_threshold, default_left,
                  small_is_left, n_bins, out: Histograms) -> list:
        """Split every listed node's rows into its children, in every shard, and add the global
        histograms of the children picked by ``small_is_left`` (bool per node) into ``out`` in
        the same pass.

        Each shard's rows go from its current row array into its spare one, which then becomes
        current: the listed segments are rewritten there, and every other segment keeps its
        rows in the array it was in (leaves of earlier levels, whose ``LeafRows`` hold that
        array). feature: (n_nodes,) global feature ids. out: ``Histograms`` of n_nodes nodes,
        zeroed (the built half of the next level, ``Histograms.next_level``): every shard's
        kernels add into it, then it is all-reduced in place; its sparse common bins are left 0.
        Returns per shard (n_nodes,) int64 left counts. They stay on the device (the caller
        fetches them with the next level's splits, in one wait) unless the sparse histograms
        needed them on the host.
        """
        kernels = self.backend.kernels  # the split arrays stay on the host: kernels take either
        left_counts = []
        for s, shard in enumerate(self.shards):
            by_feature, store_feature = self.split_source(s, seg_start[s], seg_count[s], feature)
            moved = self._spare_index[s]
            left, _ = kernels.partition_and_histogram(
                shard.bins, by_feature, gh[s], self.row_index[s], seg_start[s],
                seg_count[s], store_feature, bin_threshold, default_left, small_is_left, n_bins,
                out=out.dense, dest=moved)
            if self.has_sparse:  # the built children's segments, for the sparse work list
                left = self.backend.to_host(left)
                start = np.where(small_is_left, seg_start[s], seg_start[s] + left)
                count = np.where(small_is_left, left, seg_count[s] - left)
                self._sparse_histograms(s, gh[s], moved, start, count, out=out.sparse)
            left_counts.append(left)
        self.row_index, self._spare_index = self._spare_index, self.row_index
        self._allreduce_histograms(out)
        return left_counts


def _next_level_order(left, right, built_left):
    """Per split node, its left and right children's values (arrays with one entry per split, in
    the split order) in the next level's histogram order: the siblings, then the built
    children."""
    built_left = np.reshape(built_left, (-1,) + (1,) * (np.ndim(left) - 1))
    return np.concatenate([np.where(built_left, right, left), np.where(built_left, left, right)])


def grow_tree(shardset: ShardSet, gh: list, scale_g: float, scale_h: float, cuts, params,
              feature_allowed: np.ndarray, group: int) -> tuple[Tree, list[LeafRows]]:
    """Grow one tree on fixed-point gradients ``gh`` (per shard (n_i, 2) int64) and return it
    (a ``Tree``, or a ``PendingTree``: see ``resolve``), with each shard's margin update (an
    object with ``LeafRows.add_to``; call it before the next tree is grown): planned (the level
    loop queued on the device, no wait) where ``shardset.uses_level_plans``, else level by
    level (one wait a level). Both give the same tree and margins."""
    grow = _grow_tree_planned if shardset.uses_level_plans else _grow_tree_levels
    return grow(shardset, gh, scale_g, scale_h, cuts, params, feature_allowed, group)


def _grow_tree_levels(shardset: ShardSet, gh: list, scale_g: float, scale_h: float, cuts, params,
                      feature_allowed: np.ndarray, group: int) -> tuple[Tree, list[LeafRows]]:
    """``grow_tree`` level by level, with the host between levels (any features).

    No loop over nodes: each level is a handful of kernel calls over all its nodes, and one wait
    for the device (the split search's results, fetched with the previous partition's left
    counts). The next level's kernels are queued before the host records the level, so the
    device works while the host does its bookkeeping.

    A level's nodes are kept in the order of its histograms (``gbflow.histogram``: the siblings,
    then the built children), which is not the tree's breadth-first order: ``node_id`` holds
    each node's tree id, and the level's records are scattered to id order at the end of its
    step. The nodes that split are listed in id order, so their children get consecutive ids.
    """
    backend, xp = shardset.backend, shardset.backend.xp
    timers = shardset.timers
    n_bins = cuts.n_bins
    routing = shardset.routing
    allowed = routing.allowed(xp, feature_allowed)  # on the device once per tree
    n_shards = len(shardset.shards)
    shardset.reset_row_index()
    seg_start = [np.zeros(1, dtype=np.int64) for _ in range(n_shards)]
    seg_count = [np.array([s.n_rows], dtype=np.int64) for s in shardset.shards]
    with timers("histograms"):
        hist = shardset.build_histograms(gh, seg_start, seg_count, n_bins)
        if len(routing.routing.dense):  # on the device: fetched with the root's splits
            totals = histogram.node_totals(hist.dense)
        else:  # no dense feature to read the root's total from: sum the gradients
            totals = backend.to_host(shardset.allreduce_sum(
                sum(g.sum(axis=0) for g in gh)[None, :]))
        shardset.fill_common_bins(hist, totals)
    node_id = np.zeros(1, dtype=np.int64)  # each node's tree id, in the level's order
    first_id = 0  # the level's ids are first_id .. first_id + n_nodes - 1
    levels = []  # per level: dict of node arrays, in id order
    leaves = [[] for _ in range(n_shards)]  # per shard and level: (rows, start, count, value)
    next_id = 1
    last_split = None  # nodes split at the last level: their rows are not moved
    moved = None  # the last partition's (starts, counts, built_left, per shard left counts)
    for depth in range(params.max_depth + 1):
        record_leaves = last_split is None
        level_rows = shardset.row_index  # the level's rows (a partition below moves them on)
        fetch = ([] if moved is None else list(moved[3])) + ([totals] if depth == 0 else [])
        if depth == params.max_depth:
            found = None
            fetched = backend.to_host_all(fetch)
        else:
            with timers("splits"):
                found, fetched = split.find_splits(backend, hist, routing, allowed, scale_g,
                                                   scale_h, params, fetch=fetch)
        if depth == 0:
            totals = fetched.pop()
        pending_left = fetched
        if moved is not None:  # this level's segments, in its order; a parent's rows: left, right
            starts, counts, built_left = moved[:3]
            for s in range(n_shards):
                left = pending_left[s].astype(np.int64)
                seg_start[s] = _next_level_order(starts[s], starts[s] + left, built_left)
                seg_count[s] = _next_level_order(left, counts[s] - left, built_left)
            moved = None
        n = len(totals)
        do_split = np.zeros(n, dtype=bool) if found is None else found.do_split
        sp = np.flatnonzero(do_split)
        sp = sp[np.argsort(node_id[sp], kind="stable")]  # the split nodes in id order
        n_split = len(sp)
        level_totals, level_id = totals, node_id
        if n_split:
            feature = found.feature[sp]
            bin_threshold = found.bin_threshold[sp]
            default_left = found.default_left[sp]
            left_sum = found.left_sum[sp]
            right_sum = totals[sp] - left_sum
            # Build the child with the smaller global hessian while partitioning; its sibling is
            # the parent minus it. (Children at the last level are ordered the same way, though
            # nothing is built for them.)
            built_left = left_sum[:, 1] <= right_sum[:, 1]
            starts = [st[sp] for st in seg_start]
            counts = [ct[sp] for ct in seg_count]
            children = None
            if depth + 1 == params.max_depth:
                # Children at the last level are leaves: their rows need not move, only their
                # margins change.
                sources = [shardset.split_source(s, starts[s], counts[s], feature)
                           for s in range(n_shards)]  # where the margin update reads split bins
                last_split = (starts, counts, sources[0][1], bin_threshold, default_left,
                              [None if by is shard.bins_by_feature else by
                               for (by, _), shard in zip(sources, shardset.shards)])
            else:  # queued first: the host's bookkeeping below runs while the device partitions
                with timers("partition+histograms"):
                    children = Histograms.next_level(shardset.level_buffers, hist, n_split,
                                                     depth + 1)
                    built = children.nodes(n_split, 2 * n_split)
                    left_counts = shardset.partition(gh, starts, counts, feature, bin_threshold,
                                                     default_left, built_left, n_bins, built)
                moved = (starts, counts, built_left, left_counts)
            totals = _next_level_order(left_sum, right_sum, built_left)
            left_id = next_id + 2 * np.arange(n_split, dtype=np.int64)
            node_id = _next_level_order(left_id, left_id + 1, built_left)
            if children is not None:
                with timers("partition+histograms"):
                    shardset.fill_common_bins(built, totals[n_split:])
                    hist = children.fill_siblings(backend.kernels, hist, sp)  # parent freed
        # The level's record, while the device builds the next level's histograms.
        value = split.leaf_values(level_totals, scale_g, scale_h, params)
        levels.append(_level_record(
            cuts, value, level_totals[:, 1] * (1.0 / scale_h), level_id - first_id, sp,
            *((feature, bin_threshold, default_left, found.gain[sp], left_id) if n_split else
              (None,) * 5)))
        if record_leaves:
            stay = ~do_split
            for s in range(n_shards):
                leaves[s].append((level_rows[s], seg_start[s][stay], seg_count[s][stay],
                                  value[stay]))
        if not n_split:
            break
        first_id = next_id
        next_id += 2 * n_split
    tree = Tree.concatenate_levels(levels, group)
    if last_split is not None:  # the last level in id order: split k's children at 2k, 2k + 1
        child_values = levels[-1]["value"].reshape(-1, 2)
        split_info = last_split[2:5] + (child_values[:, 0], child_values[:, 1])
    else:
        empty = np.zeros(0, dtype=np.int64)
        split_info = (empty, empty, np.zeros(0, dtype=bool), np.zeros(0), np.zeros(0))
    result = []
    for s in range(n_shards):
        split_rows = (last_split[0][s], last_split[1][s]) if last_split is not None else \
            (np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64))
        result.append(LeafRows(_leaves_by_array(leaves[s]), shardset.row_index[s], *split_rows,
                               *split_info, bins_by_feature=last_split[5][s]
                               if last_split is not None else None))
    return tree, result


def _level_record(cuts, value, cover, at, sp, feature, bin_threshold, default_left, gain,
                  left_id) -> dict:
    """A level's node arrays in id order (a node's id is its place in the tree), from arrays in
    the level's own order: value, cover (n,) float64 per node, ``at`` each node's place in id
    order; sp (n_split,) the positions of the nodes that split, with their global feature ids,
    bin thresholds, default directions, gains and left child ids (None when none split)."""
    n = len(value)
    level = {
        "feature": np.full(n, _dtypes.LEAF), "bin_threshold": np.zeros(n),
        "threshold": np.zeros(n), "default_left": np.zeros(n, dtype=bool),
        "left": np.full(n, -1), "right": np.full(n, -1), "value": value,
        "gain": np.zeros(n), "cover": cover,
    }
    if len(sp):
        level["feature"][sp] = feature
        level["bin_threshold"][sp] = bin_threshold
        level["threshold"][sp] = cuts.split_thresholds(feature, bin_threshold)
        level["default_left"][sp] = default_left
        level["gain"][sp] = gain
        level["left"][sp] = left_id
        level["right"][sp] = left_id + 1
    for name, values in level.items():
        level[name] = np.empty_like(values)
        level[name][at] = values
    return level


def _leaves_by_array(levels: list) -> list:
    """Per level (row array, start, count, value) -> per distinct row array, in order of first
    appearance, (row array, starts, counts, values) concatenated over its levels; arrays
    without leaves are left out."""
    groups: list = []
    for rows, start, count, value in levels:
        if not len(start):
            continue
        for group in groups:
            if group[0] is rows:
                group[1].append(start), group[2].append(count), group[3].append(value)
                break
        else:
            groups.append((rows, [start], [count], [value]))
    return [(rows, np.concatenate(st), np.concatenate(ct), np.concatenate(vl))
            for rows, st, ct, vl in groups]


# ---------------------------------------------------------------------------------------------
# Planned trees: the level loop without a wait for the device per level (dense features).

# A planned level's arrays are sized for every node it could hold (twice its parent level's);
# above this many bytes of the built children's histograms the parent's split count is read
# first (one wait) and the level sized to it (deep trees, wide data).
PLANNED_HIST_BYTES = 64 << 20


_PLAN_FIELDS = (("n_split", (1,), np.int64), ("split_node", None, np.int64),
                ("split_feature", None, np.int32), ("split_threshold", None, np.int32),
                ("split_default_left", None, np.bool_), ("built_left", None, np.bool_),
                ("split_gain", None, np.float64), ("child_totals", "children", np.int64),
                ("is_leaf", None, np.bool_))


@dataclasses.dataclass
class _PlannedLevel:
    """One level of a planned tree: its slots (cap, laid out by ``half``: see numpy_kernels'
    "Level plans"), the device arrays the host reads when the tree is grown (``fetched``: name
    -> array, in the order of their allocation; per shard names end in the shard's number),
    and device-only scratch: per shard the splits' segments and the partition's work list."""

    cap: int
    half: int
    n_parent: object  # (1,) int64 device: the parent level's split count
    totals: object  # (cap, 2) int64 device
    fetched: dict
    plan: dict | None  # ``_PLAN_FIELDS`` on the device; None for the last level
    seg_start: list
    seg_count: list
    split_start: list
    split_count: list
    work: list
    n_work: list
    left: list = dataclasses.field(default_factory=list)  # per shard, the partition's left counts

    @classmethod
    def make(cls, xp, kernels, shards, cap: int, half: int, n_parent, totals, planned: bool):
        """A level's arrays: the fetched ones views of one new allocation (``packed_empty``,
        with ``totals`` when it is None: taken there too), the scratch ones allocated."""
        shapes = [] if totals is not None else [((cap, 2), np.int64)]
        if planned:
            shapes += [((cap,) if shape is None else (2 * cap, 2) if shape == "children"
                        else shape, dtype) for _, shape, dtype in _PLAN_FIELDS]
            shapes += [((cap,), np.int64)] * (2 * len(shards))
        packed = iter(packed_empty(xp, shapes))
        fetched = {}
        if totals is None:
            totals = fetched["totals"] = next(packed)
        plan = None
        if planned:
            plan = {name: next(packed) for name, _, _ in _PLAN_FIELDS}
            fetched.update(plan)
        seg_start, seg_count, split_start, split_count, work, n_work = ([] for _ in range(6))
        if planned:
            for s, shard in enumerate(shards):
                seg_start.append(next(packed))
                seg_count.append(next(packed))
                fetched[f"seg_start{s}"], fetched[f"seg_count{s}"] = seg_start[-1], seg_count[-1]
                split_start.append(xp.empty(cap, dtype=np.int64))
                split_count.append(xp.empty(cap, dtype=np.int64))
                max_blocks = -(-shard.n_rows // kernels.rows_per_block(shard.n_rows)) + cap
                work.append(xp.empty((max_blocks, 5), dtype=np.int64))
                n_work.append(xp.empty(1, dtype=np.int64))
        return cls(cap, half, n_parent, totals, fetched, plan, seg_start, seg_count,
                   split_start, split_count, work, n_work)


class _PlannedLayout:
    """The levels of planned trees that do not depend on the data (each twice its parent's
    capacity, while PLANNED_HIST_BYTES allows), allocated once per ``ShardSet`` and reused tree
    after tree (the host reads a tree's arrays before the next tree writes them); the levels
    below are made for each tree, sized by their parent's split count."""

    def __init__(self, xp, kernels, shards, max_depth: int, node_bytes: int):
        self.xp, self.kernels, self.shards = xp, kernels, shards
        self.max_depth, self.node_bytes = max_depth, node_bytes
        root_parent = xp.ones(1, dtype=np.int64)
        self.fixed = [_PlannedLevel.make(xp, kernels, shards, 1, 1, root_parent, None,
                                         max_depth > 0)]
        while len(self.fixed) <= max_depth and self._bounded(self.fixed[-1].cap):
            parent = self.fixed[-1]
            self.fixed.append(_PlannedLevel.make(
                xp, kernels, shards, 2 * parent.cap, parent.cap, parent.plan["n_split"],
                parent.plan["child_totals"], len(self.fixed) < max_depth))

    def _bounded(self, parent_cap: int) -> bool:
        return parent_cap * self.node_bytes <= PLANNED_HIST_BYTES

    def level(self, depth: int, parent: _PlannedLevel | None, backend) -> _PlannedLevel:
        """Level ``depth``'s arrays: the fixed ones, or (below them) new ones sized by the
        parent's split count, read from the device here, and the parent's child totals
        copied into this level's layout."""
        if depth < len(self.fixed):
            return self.fixed[depth]
        n = int(backend.to_host(parent.plan["n_split"])[0])
        level = _PlannedLevel.make(self.xp, self.kernels, self.shards, 2 * n, max(n, 1),
                                   parent.plan["n_split"], None, depth < self.max_depth)
        children = parent.plan["child_totals"]
        level.totals[:n] = children[:n]
        level.totals[n:] = children[parent.cap: parent.cap + n]
        return level


def _grow_tree_planned(shardset: "ShardSet", gh: list, scale_g: float, scale_h: float, cuts,
                       params, feature_allowed: np.ndarray, group: int):
    """``grow_tree`` with the level loop on the device: each level's split search, the plan
    of its splits (``kernels.plan_level``), the shards' segments and work lists
    (``kernels.level_segments``), the partition, the all-reduce and the siblings are queued
    one after the other, every array sized for the nodes the level could hold. Returns a
    ``PendingTree`` (the tree's arrays are on their way to the host; it builds the tree the
    level-by-level loop builds) and per shard a ``_PlannedMargins`` (the margin update, queued
    on the device). Dense features only."""
    backend, xp, kernels = shardset.backend, shardset.backend.xp, shardset.backend.kernels
    timers = shardset.timers
    n_bins = cuts.n_bins
    routing = shardset.routing
    allowed = routing.allowed(xp, feature_allowed)
    shards = shardset.shards
    max_depth = params.max_depth
    layout = shardset.planned_layout(max_depth, len(routing.routing.dense) * n_bins * 16)
    shardset.reset_row_index()
    rows = (shardset.row_index, shardset._spare_index)  # level d's rows are in rows[d % 2]
    min_gain = max(params.gamma, _dtypes.MIN_SPLIT_IMPROVEMENT)
    search = (1.0 / scale_g, 1.0 / scale_h, params.reg_lambda, params.reg_alpha,
              params.min_child_weight)
    with timers("histograms"):
        hist = shardset.build_histograms(gh, [np.zeros(1, dtype=np.int64)] * len(shards),
                                         [np.array([s.n_rows], dtype=np.int64) for s in shards],
                                         n_bins)
        level = layout.level(0, None, backend)
        level.totals[...] = histogram.node_totals(hist.dense)
    levels = [level]
    for depth in range(max_depth):
        plan = level.plan
        with timers("splits"):
            found = kernels.evaluate_splits(hist.dense, routing.n_value_bins_dense, allowed[0],
                                            *search)
            kernels.plan_level(level.n_parent, level.half, *found, level.totals, min_gain,
                               *plan.values())
        with timers("partition+histograms"):
            parent = levels[-2] if depth else None
            for s, shard in enumerate(shards):
                if parent is None:  # the root: the parent arrays are not read
                    parent_arrays = (level.seg_start[s],) * 3 + (plan["built_left"],)
                else:
                    parent_arrays = (parent.split_start[s][: level.half],
                                     parent.split_count[s][: level.half], parent.left[s],
                                     parent.plan["built_left"][: level.half])
                kernels.level_segments(
                    shard.n_rows, 0 if parent is None else level.half, level.n_parent,
                    *parent_arrays, plan["n_split"], plan["split_node"],
                    kernels.rows_per_block(shard.n_rows), level.seg_start[s],
                    level.seg_count[s], level.split_start[s], level.split_count[s],
                    level.work[s], level.n_work[s])
            if depth + 1 == max_depth:  # the last level's rows are not moved
                levels.append(layout.level(depth + 1, level, backend))
                break
            child = layout.level(depth + 1, level, backend)
            half = child.half
            children = Histograms(shardset.level_buffers.take(
                "dense", (depth + 1) % 2, (child.cap,) + hist.dense.shape[1:], np.int64))
            children.dense[...] = 0
            built = children.nodes(half, 2 * half)
            split_arrays = [plan[name][:half] for name in
                            ("split_feature", "split_threshold", "split_default_left",
                             "built_left")]
            level.left = [kernels.partition_planned(
                shard.bins, shard.bins_by_feature, gh[s], rows[depth % 2][s], level.work[s],
                level.n_work[s], *split_arrays, n_bins, built.dense, rows[(depth + 1) % 2][s])
                for s, shard in enumerate(shards)]
            shardset._allreduce_histograms(built)
            kernels.sibling_histograms(hist.dense, plan["split_node"][:half], children.dense,
                                       plan["n_split"])
            hist = children
        levels.append(child)
        level = child
    # the tree's arrays start on their way to the host now; the margins follow them on the device
    arrays = backend.to_host_later([a for lv in levels for a in lv.fetched.values()])
    pending = PendingTree(lambda: _planned_tree(shardset, levels, arrays.wait(), scale_g,
                                                scale_h, cuts, params, group), timers)
    constants = split.leaf_constants(scale_g, scale_h, params)
    return pending, [_PlannedMargins(levels, [r[s] for r in rows], constants, s)
                     for s in range(len(shards))]


class PendingTree:
    """A tree whose arrays may still be on their way from the device (``grow_tree`` on the GPU):
    ``result()`` waits for them and builds the ``Tree`` (once; timed as "tree")."""

    def __init__(self, build, timers: Timers):
        self._build, self._timers, self._tree = build, timers, None

    def result(self) -> Tree:
        if self._tree is None:
            with self._timers("tree"):
                self._tree = self._build()
            self._build = None
        return self._tree


def resolve(tree) -> Tree:
    """A ``Tree`` from ``grow_tree``'s first result (a ``Tree`` or a ``PendingTree``)."""
    return tree.result() if isinstance(tree, PendingTree) else tree


@dataclasses.dataclass
class _PlannedMargins:
    """A shard's margin update for a planned tree, queued on the device from the levels' arrays
    (nothing read back): each level's leaves (``kernels.add_planned_leaf_values``), then the
    last level's through its parents' splits (``add_planned_split_values``). ``add_to`` has
    ``LeafRows.add_to``'s signature."""

    levels: list
    rows: tuple  # the shard's two row arrays: level d's rows are in rows[d % 2]
    constants: tuple  # split.leaf_constants
    shard: int

    def add_to(self, kernels, bins_by_feature, margin) -> None:
        s = self.shard
        for depth, level in enumerate(self.levels[:-1]):
            kernels.add_planned_leaf_values(margin, self.rows[depth % 2], level.seg_start[s],
                                            level.seg_count[s], level.plan["is_leaf"],
                                            level.totals, *self.constants)
        if len(self.levels) > 1:
            last, child = self.levels[-2], self.levels[-1]
            plan = last.plan
            kernels.add_planned_split_values(
                margin, bins_by_feature, self.rows[(len(self.levels) - 2) % 2],
                last.split_start[s][: child.half], last.split_count[s][: child.half],
                plan["n_split"], plan["split_feature"][: child.half],
                plan["split_threshold"][: child.half], plan["split_default_left"][: child.half],
                plan["built_left"][: child.half], child.totals, child.half, *self.constants)


def _planned_tree(shardset, levels, fetched, scale_g, scale_h, cuts, params, group) -> Tree:
    """The ``Tree`` of a planned tree from its levels' arrays on the host (``fetched``: the
    arrays of every level's ``fetched``, in order): node ids given as the level-by-level loop
    gives them (a level's splits, in id order, get consecutive child ids), so the two loops give
    the same tree."""
    fetched = iter(fetched)
    dense = shardset.routing.routing.dense
    max_depth = params.max_depth
    node_id = np.zeros(1, dtype=np.int64)  # per slot of the level: its node's tree id
    next_id = 1
    records = []
    n_parent = 1
    totals = None
    for depth, level in enumerate(levels):
        host = {name: next(fetched) for name in level.fetched}
        slots = np.flatnonzero(np.arange(level.cap) % level.half < n_parent)
        totals = host["totals"] if "totals" in host else totals
        level_totals = totals[slots]
        ids = node_id[slots]
        n_split = int(host["n_split"][0]) if depth < max_depth else 0
        split_slot = host["split_node"][:n_split] if n_split else np.zeros(0, dtype=np.int64)
        rank = np.empty(n_split, dtype=np.int64)
        rank[np.argsort(node_id[split_slot], kind="stable")] = np.arange(n_split)
        left_id = next_id + 2 * rank  # per split, in plan (slot) order
        value = split.leaf_values(level_totals, scale_g, scale_h, params)
        sp = np.searchsorted(slots, split_slot)  # the splits' places among the level's nodes
        record = (None,) * 5
        if n_split:
            record = (dense[host["split_feature"][:n_split]], host["split_threshold"][:n_split],
                      host["split_default_left"][:n_split], host["split_gain"][:n_split],
                      left_id)
        records.append(_level_record(cuts, value, level_totals[:, 1] * (1.0 / scale_h),
                                     ids - (ids.min() if len(ids) else 0), sp, *record))
        if not n_split:
            break
        child = levels[depth + 1]
        built_left = host["built_left"][:n_split]
        node_id = np.full(child.cap, -1, dtype=np.int64)
        node_id[:n_split] = np.where(built_left, left_id + 1, left_id)
        node_id[child.half: child.half + n_split] = np.where(built_left, left_id, left_id + 1)
        totals = host["child_totals"]
        n_parent = n_split
        next_id += 2 * n_split
    return Tree.concatenate_levels(records, group)
