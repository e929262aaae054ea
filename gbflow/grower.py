"""Grows one tree level by level over a ShardSet: histograms, splits, row partition, leaf margins."""
from __future__ import annotations

import collections
import contextlib
import dataclasses
import time

import numpy as np

from . import _dtypes, histogram, split
from .tree import Tree


@dataclasses.dataclass
class Shard:
    """One partition's training data after quantization, on the backend's device.

    bins: (n, F) uint8/uint16, row by row; bins_by_feature: (F, n), the same bins column by column
    (a row's side at a split is read from one column; histograms read whole rows).
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

    @property
    def n_rows(self) -> int:
        return int(self.bins.shape[0])


@dataclasses.dataclass
class LeafRows:
    """Where one shard's rows ended up in a tree: all the margin update needs.

    Leaves above the last level own segments of ``row_index`` (leaf_start, leaf_count,
    leaf_value). Nodes split at the last level were not partitioned: their segments
    (split_start, split_count) and splits (feature, bin_threshold, default_left) send each row to
    left_value or right_value. Host arrays, except row_index (device).
    """

    row_index: object
    leaf_start: np.ndarray
    leaf_count: np.ndarray
    leaf_value: np.ndarray
    split_start: np.ndarray
    split_count: np.ndarray
    feature: np.ndarray
    bin_threshold: np.ndarray
    default_left: np.ndarray
    left_value: np.ndarray
    right_value: np.ndarray

    def add_to(self, kernels, bins_by_feature, margin) -> None:
        """margin[row] += the value of the row's leaf, for every row (margin: (n,) float64)."""
        kernels.add_leaf_values(margin, self.row_index, self.leaf_start, self.leaf_count,
                                self.leaf_value)
        if len(self.split_start):
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

    def reset_row_index(self) -> None:
        """Start a tree: every shard's rows in one segment (the root), in row order."""
        xp = self.backend.xp
        self.row_index = [xp.arange(s.n_rows, dtype=_dtypes.ROW_INDEX) for s in self.shards]

    def allreduce_sum(self, array):
        """Elementwise sum over all processes of an integer array (host or device); a new array
        or ``array`` itself. Never modify the result in place: it may be ``array``."""
        return array

    def allreduce_max(self, value):
        """Elementwise max over all processes of a float or a host float64 array."""
        return value

    def allgather(self, value) -> list:
        """Every process's ``value`` (any picklable object), in process order; read-only."""
        return [value]

    @property
    def n_rows_total(self) -> int:
        return int(self.allreduce_sum(np.array([sum(s.n_rows for s in self.shards)]))[0])

    def build_histograms(self, gh, seg_start, seg_count, n_bins):
        """Global histograms of the listed node segments: local shards summed, then all-reduced.

        gh: per shard (n_i, 2) int64. seg_start/seg_count: per shard (n_nodes,) int64 host arrays.
        Returns (n_nodes, F, n_bins, 2) int64 on the device.
        """
        total = None
        for s, shard in enumerate(self.shards):
            part = self.backend.kernels.build_histograms(shard.bins, gh[s], self.row_index[s],
                                                         seg_start[s], seg_count[s], n_bins)
            total = part if total is None else total + part
        return self.allreduce_sum(total)

    def partition(self, gh, seg_start, seg_count, feature, bin_threshold, default_left,
                  small_is_left, n_bins):
        """Split every listed node's rows into its children, in every shard, and build the global
        histograms of the children picked by ``small_is_left`` (bool per node) in the same pass.

        Returns (per shard left counts as host int64 arrays, histograms on the device).
        """
        kernels = self.backend.kernels  # the split arrays stay on the host: kernels take either
        left_counts, total = [], None
        for s, shard in enumerate(self.shards):
            left, part = kernels.partition_and_histogram(
                shard.bins, shard.bins_by_feature, gh[s], self.row_index[s], seg_start[s],
                seg_count[s], feature, bin_threshold, default_left, small_is_left, n_bins)
            total = part if total is None else total + part
            left_counts.append(self.backend.to_host(left))
        return left_counts, self.allreduce_sum(total)


def grow_tree(shardset: ShardSet, gh: list, scale_g: float, scale_h: float, cuts, params,
              feature_allowed: np.ndarray, group: int) -> tuple[Tree, list[LeafRows]]:
    """Grow one tree on fixed-point gradients ``gh`` (per shard (n_i, 2) int64) and return it,
    with each shard's ``LeafRows`` for the margin update.

    No loop over nodes: each level is a handful of kernel calls over all its nodes.
    """
    backend, xp = shardset.backend, shardset.backend.xp
    timers = shardset.timers
    n_bins = cuts.n_bins
    # on the device once per tree, not once per level
    n_value_bins, feature_allowed = xp.asarray(cuts.n_value_bins), xp.asarray(feature_allowed)
    n_shards = len(shardset.shards)
    shardset.reset_row_index()
    seg_start = [np.zeros(1, dtype=np.int64) for _ in range(n_shards)]
    seg_count = [np.array([s.n_rows], dtype=np.int64) for s in shardset.shards]
    with timers("histograms"):
        hist = shardset.build_histograms(gh, seg_start, seg_count, n_bins)
        totals = backend.to_host(histogram.node_totals(hist))
    levels = []  # per level: dict of node arrays
    leaves = [[] for _ in range(n_shards)]  # per shard and level: (start, count, value) of leaves
    next_id = 1
    last_split = None  # nodes split at the last level: their rows are not moved
    for depth in range(params.max_depth + 1):
        n = len(totals)
        value = split.leaf_values(totals, scale_g, scale_h, params)
        level = {
            "feature": np.full(n, _dtypes.LEAF), "bin_threshold": np.zeros(n),
            "threshold": np.zeros(n), "default_left": np.zeros(n, dtype=bool),
            "left": np.full(n, -1), "right": np.full(n, -1), "value": value,
            "gain": np.zeros(n), "cover": totals[:, 1] * (1.0 / scale_h),
        }
        levels.append(level)
        if depth == params.max_depth:
            do_split = np.zeros(n, dtype=bool)
        else:
            with timers("splits"):
                found = split.find_splits(backend, hist, n_value_bins, feature_allowed, scale_g,
                                          scale_h, params)
            do_split = found.do_split
        if last_split is None:
            for s in range(n_shards):
                stay = ~do_split
                leaves[s].append((seg_start[s][stay], seg_count[s][stay], value[stay]))
        if not do_split.any():
            break
        sp = np.flatnonzero(do_split)
        n_split = len(sp)
        feature = found.feature[sp]
        bin_threshold = found.bin_threshold[sp]
        default_left = found.default_left[sp]
        level["feature"][sp] = feature
        level["bin_threshold"][sp] = bin_threshold
        level["threshold"][sp] = cuts.values[cuts.offsets[feature] + bin_threshold - 1]
        level["default_left"][sp] = default_left
        level["gain"][sp] = found.gain[sp]
        level["left"][sp] = next_id + 2 * np.arange(n_split)
        level["right"][sp] = next_id + 2 * np.arange(n_split) + 1
        next_id += 2 * n_split
        left_sum = found.left_sum[sp]
        right_sum = totals[sp] - left_sum
        totals = np.stack([left_sum, right_sum], axis=1).reshape(-1, 2)
        # Children at the last level are leaves: their rows need not move, only their margins
        # change. Otherwise build the child with the smaller global hessian while partitioning;
        # its sibling is the parent minus it.
        starts = [st[sp] for st in seg_start]
        counts = [ct[sp] for ct in seg_count]
        if depth + 1 == params.max_depth:
            last_split = (starts, counts, feature, bin_threshold, default_left)
            continue
        small_is_left = left_sum[:, 1] <= right_sum[:, 1]
        with timers("partition+histograms"):
            left_counts, small = shardset.partition(gh, starts, counts, feature, bin_threshold,
                                                    default_left, small_is_left, n_bins)
            big = histogram.subtract(hist[xp.asarray(sp)], small)
            hist = histogram.children(xp, small, big, xp.asarray(small_is_left))
        for s in range(n_shards):
            seg_start[s] = np.stack([starts[s], starts[s] + left_counts[s]], axis=1).reshape(-1)
            seg_count[s] = np.stack([left_counts[s], counts[s] - left_counts[s]],
                                    axis=1).reshape(-1)
    tree = Tree.concatenate_levels(levels, group)
    if last_split is not None:
        child_values = levels[-1]["value"].reshape(-1, 2)
        split_info = last_split[2:] + (child_values[:, 0], child_values[:, 1])
    else:
        empty = np.zeros(0, dtype=np.int64)
        split_info = (empty, empty, np.zeros(0, dtype=bool), np.zeros(0), np.zeros(0))
    result = []
    for s in range(n_shards):
        starts, counts, values = (np.concatenate(parts) for parts in zip(*leaves[s]))
        split_rows = (last_split[0][s], last_split[1][s]) if last_split is not None else \
            (np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64))
        result.append(LeafRows(shardset.row_index[s], starts, counts, values, *split_rows,
                               *split_info))
    return tree, result
