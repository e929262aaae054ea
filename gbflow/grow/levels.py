"""Growing one tree level by level, the host reading each level's splits (any column stores)."""
from __future__ import annotations

import dataclasses
import functools

import numpy as np

from .. import split
from ..histogram import Histograms
from ..tree import Tree, level_arrays
from .margins import LeafRows


@dataclasses.dataclass
class _Partitioned:
    """A level's partition, whose left counts are fetched with the next level's splits: per
    shard the split nodes' segments (split order), which child was built, per shard the left
    counts (device)."""

    starts: list
    counts: list
    built_left: np.ndarray
    left_counts: list


@dataclasses.dataclass
class _LastSplits:
    """Nodes split at the last level (their rows are not moved): per shard their segments, the
    splits, and per shard what gives the matrix their split bins are read from
    (``ShardSet.split_source``, when called)."""

    starts: list
    counts: list
    feature: np.ndarray
    bin_threshold: np.ndarray
    default_left: np.ndarray
    by_feature: list


def _next_level_order(left, right, built_left):
    """Per split node, its left and right children's values (arrays with one entry per split, in
    the split order) in the next level's histogram order: the siblings, then the built
    children."""
    built_left = np.reshape(built_left, (-1,) + (1,) * (np.ndim(left) - 1))
    return np.concatenate([np.where(built_left, right, left), np.where(built_left, left, right)])


def grow_tree_levels(shardset, gh: list, scales, cuts, rules, feature_allowed,
                     group: int) -> tuple[Tree, list[LeafRows]]:
    """``gbflow.grow.grow_tree`` level by level, with the host between levels (feature_allowed:
    a ``sampling.FeatureSample``, per-node samples drawn by each level's node ids); with
    ``rules.max_leaves``, XGBoost's depthwise budget (a level's splits in id order while leaves
    remain).

    No loop over nodes: each level is a handful of kernel calls over all its nodes, and one wait
    for the device (the split search's results, fetched with the previous partition's left
    counts). The next level's kernels are queued before the host records the level, so the
    device works while the host does its bookkeeping.

    A level's nodes are kept in the order of its histograms (``gbflow.histogram``: the siblings,
    then the built children), which is not the tree's breadth-first order: ``node_id`` holds
    each node's tree id, and the level's records are scattered to id order at the end of its
    step. The nodes that split are listed in id order, so their children get consecutive ids.
    """
    backend, timers = shardset.backend, shardset.timers
    n_bins = cuts.n_bins
    n_shards = len(shardset.shards)
    split_constants = rules.split.constants(scales)
    shardset.reset_row_index()
    seg_start = [np.zeros(1, dtype=np.int64) for _ in range(n_shards)]
    seg_count = [np.array([s.n_rows], dtype=np.int64) for s in shardset.shards]
    with timers("histograms"):
        hist = shardset.build_histograms(gh, seg_start, seg_count, n_bins)
        totals = shardset.root_totals(hist, gh)  # device ones come with the root's splits
        shardset.fill_common_bins(hist, totals)
    node_id = np.zeros(1, dtype=np.int64)  # each node's tree id, in the level's order
    bounds = rules.bounds  # max_delta_step, monotone constraints (None: unbounded weights)
    node_bounds = None if bounds is None else bounds.root()  # (n, 2), in the level's order
    interactions = rules.interactions  # None: any feature anywhere
    paths = None if interactions is None else interactions.root_paths()  # (n, F), level order
    first_id = 0  # the level's ids are first_id .. first_id + n_nodes - 1
    levels = []  # per level: dict of node arrays, in id order
    leaves = [[] for _ in range(n_shards)]  # per shard and level: (rows, start, count, node id)
    next_id, n_leaves = 1, 1
    last: _LastSplits | None = None  # nodes split at the last level: rows not moved
    moved: _Partitioned | None = None
    for depth in range(rules.max_depth + 1):
        record_leaves = last is None
        level_rows = shardset.row_index  # the level's rows (a partition below moves them on)
        fetch = ([] if moved is None else list(moved.left_counts)) + \
            ([totals] if depth == 0 else [])
        if depth == rules.max_depth:
            found = None
            fetched = backend.to_host_all(fetch)
        else:
            with timers("splits"):
                found, fetched = split.search_nodes(
                    shardset, rules, split_constants, hist,
                    feature_allowed.nodes(depth, node_id), paths, node_bounds, fetch)
        if depth == 0:
            totals = fetched.pop()
        if moved is not None:  # this level's segments, in its order; a parent's rows: left, right
            for s in range(n_shards):
                left = fetched[s].astype(np.int64)
                seg_start[s] = _next_level_order(moved.starts[s], moved.starts[s] + left,
                                                 moved.built_left)
                seg_count[s] = _next_level_order(left, moved.counts[s] - left, moved.built_left)
            moved = None
        n = len(totals)
        do_split = np.zeros(n, dtype=bool) if found is None else found.do_split
        sp = np.flatnonzero(do_split)
        sp = sp[np.argsort(node_id[sp], kind="stable")]  # the split nodes in id order
        if rules.max_leaves and len(sp) > rules.max_leaves - n_leaves:
            # XGBoost's depthwise driver splits a level's nodes in id order while the tree
            # has fewer than max_leaves leaves (each split adds one)
            do_split = do_split.copy()
            do_split[sp[rules.max_leaves - n_leaves:]] = False
            sp = sp[: rules.max_leaves - n_leaves]
        n_leaves += len(sp)
        n_split = len(sp)
        level_totals, level_id, level_bounds = totals, node_id, node_bounds
        if n_split:
            feature = found.feature[sp]
            bin_threshold = found.bin_threshold[sp]
            default_left = found.default_left[sp]
            left_sum = found.left_sum[sp]
            right_sum = totals[sp] - left_sum
            side_map, side_threshold = found.partition_sides(sp, n_bins)
            # Build the child with the smaller global hessian while partitioning; its sibling is
            # the parent minus it. (Children at the last level are ordered the same way, though
            # nothing is built for them.)
            built_left = left_sum[:, 1] <= right_sum[:, 1]
            starts = [st[sp] for st in seg_start]
            counts = [ct[sp] for ct in seg_count]
            children = None
            if depth + 1 == rules.max_depth:
                # Children at the last level are leaves: their rows need not move, only their
                # margins change.
                # their split bins are read when the margins are updated (a paged store holds
                # only the shards it is reading on the device)
                sources = [functools.partial(shardset.split_matrix, s, starts[s], counts[s],
                                             feature, side_map) for s in range(n_shards)]
                last = _LastSplits(starts, counts, shardset.split_ids(feature, side_map),
                                   side_threshold, default_left, sources)
            else:  # queued first: the host's bookkeeping below runs while the device partitions
                with timers("partition+histograms"):
                    children = Histograms.next_level(shardset.level_buffers, hist, n_split,
                                                     depth + 1)
                    built = children.nodes(n_split, 2 * n_split)
                    left_counts = shardset.partition(gh, starts, counts, feature, side_threshold,
                                                     default_left, built_left, n_bins, built,
                                                     side_map=side_map)
                moved = _Partitioned(starts, counts, built_left, left_counts)
            totals = _next_level_order(left_sum, right_sum, built_left)
            if interactions is not None:
                children_paths = interactions.child_paths(paths[sp], feature)
                paths = _next_level_order(children_paths, children_paths, built_left)
            if bounds is not None:  # a value-order split on a monotone feature bounds its subtrees
                node_bounds = _next_level_order(
                    *bounds.children(node_bounds[sp], feature, found.orders_values(sp),
                                     left_sum, right_sum, rules.leaf, scales), built_left)
            left_id = next_id + 2 * np.arange(n_split, dtype=np.int64)
            node_id = _next_level_order(left_id, left_id + 1, built_left)
            if children is not None:
                with timers("partition+histograms"):
                    shardset.fill_common_bins(built, totals[n_split:])
                    hist = children.fill_siblings(backend.kernels, hist, sp)  # parent freed
        # The level's record, while the device builds the next level's histograms.
        value = rules.leaf.values(level_totals, scales, level_bounds)
        levels.append(level_arrays(
            cuts, value, level_totals[:, 1] * (1.0 / scales.h), level_id - first_id, sp,
            *((feature, bin_threshold, default_left, found.gain[sp], left_id) if n_split else
              (None,) * 5),
            right_bins=found.category_sets(sp) if n_split else None))
        if record_leaves:
            stay = ~do_split
            for s in range(n_shards):
                leaves[s].append((level_rows[s], seg_start[s][stay], seg_count[s][stay],
                                  level_id[stay]))
        if not n_split:
            break
        first_id = next_id
        next_id += 2 * n_split
    tree = Tree.concatenate_levels(levels, group)
    return tree, _leaf_rows(shardset, leaves, last, first_id, tree.value)


def _leaf_rows(shardset, leaves: list, last: _LastSplits | None, last_first_id: int,
               node_value: np.ndarray) -> list[LeafRows]:
    """Every shard's ``LeafRows``: its leaves by row array, and the last level's splits (split
    k's children are nodes last_first_id + 2k and + 2k + 1, in id order)."""
    if last is not None:
        split_info = (last.feature, last.bin_threshold, last.default_left,
                      last_first_id + 2 * np.arange(len(last.feature), dtype=np.int64))
    else:
        empty = np.zeros(0, dtype=np.int64)
        split_info = (empty, empty, np.zeros(0, dtype=bool), empty)
    result = []
    for s in range(len(shardset.shards)):
        if last is not None:
            split_rows, by_feature = (last.starts[s], last.counts[s]), last.by_feature[s]
        else:
            split_rows = (np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64))
            by_feature = functools.partial(shardset.dense.columns, s)
        result.append(LeafRows(_leaves_by_array(leaves[s]), shardset.row_index[s], *split_rows,
                               *split_info, node_value=node_value, by_feature=by_feature))
    return result


def _leaves_by_array(levels: list) -> list:
    """Per level (row array, start, count, node ids) -> per distinct row array, in order of
    first appearance, (row array, starts, counts, node ids) concatenated over its levels; arrays
    without leaves are left out."""
    groups: list = []
    for rows, start, count, node in levels:
        if not len(start):
            continue
        for group in groups:
            if group[0] is rows:
                group[1].append(start), group[2].append(count), group[3].append(node)
                break
        else:
            groups.append((rows, [start], [count], [node]))
    return [(rows, np.concatenate(st), np.concatenate(ct), np.concatenate(nd))
            for rows, st, ct, nd in groups]
