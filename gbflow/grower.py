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

    bins: (n, F) uint8/uint16. label: (n,) float64. weight: (n,) float64 or None.
    margin: (n, n_groups) float64, updated in place after every tree. row_offset: global row number
    of this shard's first row (keeps row sampling independent of how rows are split into shards).
    """

    bins: object
    label: object
    weight: object
    margin: object
    row_offset: int

    @property
    def n_rows(self) -> int:
        return int(self.bins.shape[0])


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

    In one process ``allreduce_sum``/``allreduce_max`` return their input; the Dask integration
    subclasses this with a collective over the workers. Every method that sums over shards adds
    integers, so the result does not depend on the number or order of shards.
    """

    def __init__(self, backend, shards: list[Shard]):
        self.backend = backend
        self.shards = shards
        self.timers = Timers()

    def allreduce_sum(self, array):
        return array

    def allreduce_max(self, value: float) -> float:
        return value

    @property
    def n_rows_total(self) -> int:
        return int(self.allreduce_sum(np.array([sum(s.n_rows for s in self.shards)]))[0])

    def build_histograms(self, gh, seg_start, seg_count, n_bins):
        """Global histograms of the listed node segments: local shards summed, then all-reduced.

        gh: per shard (n_i, 2) int64. seg_start/seg_count: per shard (n_nodes,) int64 host arrays.
        Returns (n_nodes, F, n_bins, 2) int64 on the device.
        """
        kernels = self.backend.kernels
        total = None
        for s, shard in enumerate(self.shards):
            part = kernels.build_histograms(shard.bins, gh[s], self.row_index[s], seg_start[s],
                                            seg_count[s], n_bins)
            total = part if total is None else total + part
        return self.allreduce_sum(total)


def grow_tree(shardset: ShardSet, gh: list, scale_g: float, scale_h: float, cuts, params,
              feature_allowed: np.ndarray, group: int) -> tuple[Tree, list]:
    """Grow one tree on fixed-point gradients ``gh`` (per shard (n_i, 2) int64) and return it.

    Also returns, per shard, the leaf segments (row_index, seg_start, seg_count, leaf values) with
    which the caller updates margins. No loop over nodes: each level is a handful of kernel calls.
    """
    backend, xp, kernels = shardset.backend, shardset.backend.xp, shardset.backend.kernels
    timers = shardset.timers
    n_value_bins, n_bins = cuts.n_value_bins, cuts.n_bins
    n_shards = len(shardset.shards)
    shardset.row_index = [xp.arange(s.n_rows, dtype=_dtypes.ROW_INDEX) for s in shardset.shards]
    seg_start = [np.zeros(1, dtype=np.int64) for _ in range(n_shards)]
    seg_count = [np.array([s.n_rows], dtype=np.int64) for s in shardset.shards]
    with timers("histograms"):
        hist = shardset.build_histograms(gh, seg_start, seg_count, n_bins)
    levels = []  # per level: dict of node arrays
    leaves = [[] for _ in range(n_shards)]  # per shard: (start, count, node id) arrays per level
    next_id = 1
    for depth in range(params.max_depth + 1):
        totals = backend.to_host(histogram.node_totals(hist))
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
        with timers("partition"):
            for s, shard in enumerate(shardset.shards):
                start, count = seg_start[s][sp], seg_count[s][sp]
                left_count = backend.to_host(kernels.partition_rows(
                    shard.bins, shardset.row_index[s], start, count, xp.asarray(feature),
                    xp.asarray(bin_threshold), xp.asarray(default_left)))
                seg_start[s] = np.stack([start, start + left_count], axis=1).reshape(-1)
                seg_count[s] = np.stack([left_count, count - left_count], axis=1).reshape(-1)
        # Build the child with the smaller global hessian; its sibling is parent minus it.
        left_sum = found.left_sum[sp]
        right_sum = totals[sp] - left_sum
        small_is_left = left_sum[:, 1] <= right_sum[:, 1]
        pick = np.stack([small_is_left, ~small_is_left], axis=1).reshape(-1)
        with timers("histograms"):
            small = shardset.build_histograms(gh, [st[pick] for st in seg_start],
                                              [ct[pick] for ct in seg_count], n_bins)
            big = histogram.subtract(hist[xp.asarray(sp)], small)
            hist = histogram.children(xp, small, big, xp.asarray(small_is_left))
    tree = Tree.concatenate_levels(levels, group)
    segments = []
    for s in range(n_shards):
        starts = np.concatenate([lv[0] for lv in leaves[s]])
        counts = np.concatenate([lv[1] for lv in leaves[s]])
        values = np.concatenate([lv[2] for lv in leaves[s]])
        segments.append((shardset.row_index[s], starts, counts, values))
    return tree, segments
