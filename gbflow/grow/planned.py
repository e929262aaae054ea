"""Growing one tree with its level loop queued on the device, no host wait inside the tree."""
from __future__ import annotations

import dataclasses
import functools

import numpy as np

from .. import _dtypes, histogram
from ..backend import packed_empty
from ..histogram import Histograms
from ..tree import Tree, write_splits
from .margins import PlannedMargins
from .pending import PendingTree

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
    def make(cls, backend, shards, cap: int, half: int, n_parent, totals, planned: bool):
        """A level's arrays: the fetched ones views of one new allocation (``packed_empty``,
        with ``totals`` when it is None: taken there too), the scratch ones allocated."""
        shapes = [] if totals is not None else [((cap, 2), np.int64)]
        if planned:
            shapes += [((cap,) if shape is None else (2 * cap, 2) if shape == "children"
                        else shape, dtype) for _, shape, dtype in _PLAN_FIELDS]
            shapes += [((cap,), np.int64)] * (2 * len(shards))
        xp = backend.xp
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
                max_blocks = -(-shard.n_rows // backend.plan_rows_per_block(shard.n_rows)) + cap
                work.append(xp.empty((max_blocks, 5), dtype=np.int64))
                n_work.append(xp.empty(1, dtype=np.int64))
        return cls(cap, half, n_parent, totals, fetched, plan, seg_start, seg_count,
                   split_start, split_count, work, n_work)


class _PlannedLayout:
    """The levels of planned trees that do not depend on the data (each twice its parent's
    capacity, while PLANNED_HIST_BYTES allows), allocated once per ``ShardSet`` and reused tree
    after tree (the host reads a tree's arrays before the next tree writes them); the levels
    below are made for each tree, sized by their parent's split count."""

    def __init__(self, backend, shards, max_depth: int, node_bytes: int):
        self.backend, self.shards = backend, shards
        self.max_depth, self.node_bytes = max_depth, node_bytes
        root_parent = backend.xp.ones(1, dtype=np.int64)
        self.fixed = [_PlannedLevel.make(backend, shards, 1, 1, root_parent, None,
                                         max_depth > 0)]
        while len(self.fixed) <= max_depth and self._bounded(self.fixed[-1].cap):
            parent = self.fixed[-1]
            self.fixed.append(_PlannedLevel.make(
                backend, shards, 2 * parent.cap, parent.cap, parent.plan["n_split"],
                parent.plan["child_totals"], len(self.fixed) < max_depth))

    def _bounded(self, parent_cap: int) -> bool:
        return parent_cap * self.node_bytes <= PLANNED_HIST_BYTES

    def level(self, depth: int, parent: _PlannedLevel | None) -> _PlannedLevel:
        """Level ``depth``'s arrays: the fixed ones, or (below them) new ones sized by the
        parent's split count, read from the device here, and the parent's child totals
        copied into this level's layout."""
        if depth < len(self.fixed):
            return self.fixed[depth]
        n = int(self.backend.to_host(parent.plan["n_split"])[0])
        level = _PlannedLevel.make(self.backend, self.shards, 2 * n, max(n, 1),
                                   parent.plan["n_split"], None, depth < self.max_depth)
        children = parent.plan["child_totals"]
        level.totals[:n] = children[:n]
        level.totals[n:] = children[parent.cap: parent.cap + n]
        return level


def _layout(shardset, max_depth: int, node_bytes: int) -> "_PlannedLayout":
    """The shard set's planned level arrays, made at its first planned tree (and again if the
    depth or the histogram size changes)."""
    layout = shardset.planned_layout
    if layout is None or (layout.max_depth, layout.node_bytes) != (max_depth, node_bytes):
        layout = shardset.planned_layout = _PlannedLayout(shardset.backend, shardset.shards,
                                                          max_depth, node_bytes)
    return layout


def grow_tree_planned(shardset, gh: list, scales, cuts, rules, feature_allowed,
                      group: int):
    """``gbflow.grow.grow_tree`` with the level loop on the device: each level's split search, the
    plan of its splits (``kernels.plan_level``), the shards' segments and work lists
    (``kernels.level_segments``), the partition, the all-reduce and the siblings are queued
    one after the other, every array sized for the nodes the level could hold. Returns a
    ``PendingTree`` (the tree's arrays are on their way to the host; it builds the tree the
    level-by-level loop builds) and per shard a ``PlannedMargins`` (the margin update, queued
    on the device). The dense store only; feature_allowed: a ``sampling.FeatureSample`` of
    per-depth masks (no per-node ones: the planned loop does not know its nodes' ids).

    Where the levels' arrays are all made ahead (``_PlannedLayout.fixed``) and one process
    trains, the loop's launches are the same from tree to tree but for the scalars and arrays
    in ``_replay_key``: the shard set's ``recorder`` then records them once and replays them
    (on the GPU a CUDA graph: one launch for the whole loop)."""
    backend = shardset.backend
    dense = shardset.dense
    allowed = dense.allowed_by_level(feature_allowed.by_level)  # per depth
    layout = _layout(shardset, rules.max_depth, dense.n_features * cuts.n_bins * 16)
    search = rules.split.constants(scales)
    recorder = shardset.recorder
    key = _replay_key(shardset, layout, gh, allowed, search, cuts.n_bins, rules) \
        if recorder.records else None

    def queue():
        return _queue_levels(shardset, layout, gh, allowed, search, cuts.n_bins, rules)
    if recorder.holds(key):
        with shardset.timers("replayed levels"):
            queued = recorder.run(key, queue)
    else:
        queued = recorder.run(key, queue)
    levels, rows = queued.adopt(shardset)
    # the tree's arrays start on their way to the host now; the margins follow them on the device
    arrays = backend.to_host_later([a for lv in levels for a in lv.fetched.values()])
    pending = PendingTree(lambda: _planned_tree(dense.features, levels, arrays.wait(), scales,
                                                cuts, rules, group), shardset.timers)
    constants = rules.leaf.constants(scales)
    return pending, [PlannedMargins(levels, [r[s] for r in rows], constants, s,
                                    functools.partial(dense.columns, s),
                                    layout if key is not None else None,
                                    shardset.margin_recorder, shardset, pending)
                     for s in range(len(shardset.shards))]


def _replay_key(shardset, layout, gh, allowed, search, n_bins: int, rules):
    """What the level loop of ``_queue_levels`` reads from the host, as a key of the shard
    set's ``recorder``: None where it is not to be recorded (levels sized from read-back
    counts, several processes, paged bins). The device arrays by ``address``: the gradients'
    and bins' storage, the row arrays, the feature masks (written in place tree after
    tree: ``allowed_by_level``), the levels' histogram buffers."""
    dense = shardset.dense
    if rules.max_depth >= len(layout.fixed) or shardset.collective.size != 1 or dense.paged:
        return None
    address = shardset.recorder.address
    arrays = [*gh, *shardset.row_index, *shardset._spare_index, dense.n_value_bins, *allowed,
              *shardset.level_buffers.storage()]
    for s in range(len(shardset.shards)):
        arrays += [dense.rows(s), dense.columns(s)]
    bounds = rules.bounds
    return (layout, tuple(address(a) for a in arrays), tuple(float(c) for c in search),
            float(rules.split.min_gain), int(n_bins),
            None if bounds is None else float(bounds.max_delta_step))


@dataclasses.dataclass
class _QueuedLevels:
    """What a queued (or replayed) level loop leaves: its levels, each shard's two row arrays,
    and the partitions' left counts per level (the host state ``adopt`` puts back)."""

    levels: list
    rows: tuple  # (row_index per shard, spare per shard): level d's rows in rows[d % 2]
    left: list  # per level but the last, its per shard left counts

    def adopt(self, shardset) -> tuple:
        """Make the shard set's row arrays and the levels' left counts this loop's. Returns
        (levels, rows)."""
        shardset.row_index, shardset._spare_index = list(self.rows[0]), list(self.rows[1])
        for level, left in zip(self.levels, self.left):
            level.left = left
        return self.levels, self.rows


def _queue_levels(shardset, layout, gh, allowed, search, n_bins: int, rules) -> _QueuedLevels:
    """The planned level loop's device work, queued: reads nothing back while every level is
    in ``layout.fixed``. Returns its ``_QueuedLevels``."""
    backend, kernels = shardset.backend, shardset.backend.kernels
    timers = shardset.timers
    dense = shardset.dense
    shards = shardset.shards
    max_depth = rules.max_depth
    shardset.reset_row_index()
    rows = (shardset.row_index, shardset._spare_index)  # level d's rows are in rows[d % 2]
    min_gain = rules.split.min_gain
    with timers("histograms"):
        hist = shardset.build_histograms(gh, [np.zeros(1, dtype=np.int64)] * len(shards),
                                         [np.array([s.n_rows], dtype=np.int64) for s in shards],
                                         n_bins)
        level = layout.level(0, None)
        level.totals[...] = histogram.node_totals(hist.arrays[0], *dense.narrowest)
    levels = [level]
    for depth in range(max_depth):
        plan = level.plan
        with timers("splits"):
            found = kernels.evaluate_splits(hist.arrays[0], dense.n_value_bins, allowed[depth],
                                            *search, bounds=_capped(backend.xp, rules.bounds,
                                                                    hist.arrays[0].shape[0]))
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
                    backend.plan_rows_per_block(shard.n_rows), level.seg_start[s],
                    level.seg_count[s], level.split_start[s], level.split_count[s],
                    level.work[s], level.n_work[s])
            if depth + 1 == max_depth:  # the last level's rows are not moved
                levels.append(layout.level(depth + 1, level))
                break
            child = layout.level(depth + 1, level)
            half = child.half
            children = Histograms((shardset.level_buffers.take(
                0, (depth + 1) % 2, (child.cap,) + hist.arrays[0].shape[1:], np.int64),))
            children.arrays[0][...] = 0
            built = children.nodes(half, 2 * half)
            split_arrays = [plan[name][:half] for name in
                            ("split_feature", "split_threshold", "split_default_left",
                             "built_left")]
            level.left = [kernels.partition_planned(
                dense.rows(s), dense.columns(s), gh[s], rows[depth % 2][s], level.work[s],
                level.n_work[s], *split_arrays, n_bins, built.arrays[0], rows[(depth + 1) % 2][s],
                dense.n_value_bins_host)
                for s in range(len(shards))]
            shardset.allreduce_histograms(built)
            kernels.sibling_histograms(hist.arrays[0], plan["split_node"][:half],
                                       children.arrays[0], plan["n_split"])
            hist = children
        levels.append(child)
        level = child
    return _QueuedLevels(levels, (list(rows[0]), list(rows[1])),
                         [lv.left for lv in levels[:-1]])


def _capped(xp, bounds, n_nodes: int):
    """The split search's bounds of a planned level: None, or with ``max_delta_step`` (planned
    trees take no monotone constraint) every node's bounds infinite, made on the device (an
    upload would wait for the queued work)."""
    if bounds is None:
        return None
    node_bounds = xp.empty((n_nodes, 2), dtype=np.float64)
    node_bounds[:, 0] = -np.inf
    node_bounds[:, 1] = np.inf
    return bounds.max_delta_step, node_bounds, None


def _planned_tree(features, levels, fetched, scales, cuts, rules, group) -> Tree:
    """The ``Tree`` of a planned tree from its levels' arrays on the host (``fetched``: the
    arrays of every level's ``fetched``, in order): node ids given as the level-by-level loop
    gives them (a level's splits, in id order, get consecutive child ids), so the two loops give
    the same tree. features: the dense store's global feature ids. The levels are walked for
    their ids only; values, thresholds and the node arrays are made once for the whole tree
    (a level at a time, they were a fifth of a small tree's host time on the GPU)."""
    fetched = iter(fetched)
    max_depth = rules.max_depth
    node_id = np.zeros(1, dtype=np.int64)  # per slot of the level: its node's tree id
    next_id = 1
    n_parent = 1
    totals = None
    node_ids, node_totals, split_ids, splits = [], [], [], []
    for depth, level in enumerate(levels):
        host = {name: next(fetched) for name in level.fetched}
        slots = np.flatnonzero(np.arange(level.cap) % level.half < n_parent)
        totals = host["totals"] if "totals" in host else totals
        node_ids.append(node_id[slots])
        node_totals.append(totals[slots])
        n_split = int(host["n_split"][0]) if depth < max_depth else 0
        if not n_split:
            break
        split_slot = host["split_node"][:n_split]
        rank = np.empty(n_split, dtype=np.int64)
        rank[np.argsort(node_id[split_slot], kind="stable")] = np.arange(n_split)
        left_id = next_id + 2 * rank  # per split, in plan (slot) order
        split_ids.append(node_id[split_slot])
        splits.append((host["split_feature"][:n_split], host["split_threshold"][:n_split],
                       host["split_default_left"][:n_split], host["split_gain"][:n_split],
                       left_id))
        child = levels[depth + 1]
        built_left = host["built_left"][:n_split]
        node_id = np.full(child.cap, -1, dtype=np.int64)
        node_id[:n_split] = np.where(built_left, left_id + 1, left_id)
        node_id[child.half: child.half + n_split] = np.where(built_left, left_id, left_id + 1)
        totals = host["child_totals"]
        n_parent = n_split
        next_id += 2 * n_split
    ids = np.concatenate(node_ids)  # every node once: 0 .. n - 1
    all_totals = np.concatenate(node_totals)
    n = len(ids)
    arrays = {"feature": np.full(n, _dtypes.LEAF, dtype=_dtypes.NODE),
              "bin_threshold": np.zeros(n, dtype=np.int32),
              "threshold": np.zeros(n, dtype=_dtypes.CUT),
              "default_left": np.zeros(n, dtype=np.bool_),
              "left": np.full(n, -1, dtype=_dtypes.NODE),
              "right": np.full(n, -1, dtype=_dtypes.NODE),
              "value": np.empty(n, dtype=_dtypes.MARGIN), "gain": np.zeros(n),
              "cover": np.empty(n)}
    arrays["value"][ids] = rules.leaf.values(all_totals, scales)
    arrays["cover"][ids] = all_totals[:, 1] * (1.0 / scales.h)
    if splits:
        at = np.concatenate(split_ids)
        feature, bin_threshold, default_left, gain, left_id = (
            np.concatenate(column) for column in zip(*splits))
        write_splits(arrays, at, cuts, features[feature], bin_threshold, default_left, gain,
                     left_id)
    return Tree(group=group, **arrays)
