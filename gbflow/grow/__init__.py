"""Growing one tree over a ShardSet: level by level, planned (queued on the device), whole (in
one backend call), or to a leaf budget.

The first three give the same tree and the same training margins (tested): the planned one where
the backend queues ahead and every feature is in the dense store (``ShardSet.uses_level_plans``),
the whole one where the backend grows whole trees and one process holds one shard of numeric
features (``ShardSet.grows_whole_trees``), the level-by-level one otherwise, and also under a
``max_leaves`` that can stop a tree before its depth limit (the depthwise budget: a level's
splits in id order while leaves remain). Under such a budget ``grow_policy="lossguide"`` takes
the best-first loop (``best_first``). A paged training's sampled tree is grown by whichever loop
on its sampled rows gathered onto the device (``gathered``).
"""
from __future__ import annotations

import dataclasses

import numpy as np

from ..predictor import FlatForest
from ..sampling import FeatureSample
from .best_first import grow_tree_best_first
from .gathered import can_gather, gather_sample
from .levels import grow_tree_levels
from .margins import WalkedMargins, add_margins, device_forest
from .pending import PendingTree, finished_tree
from .planned import grow_tree_planned
from .whole import grow_round_whole, grow_tree_whole

__all__ = ["PendingTree", "add_margins", "finished_tree", "grow_round_whole", "grow_tree",
           "grows_rounds_whole"]


def grow_tree(shardset, gh: list, scales, cuts, rules, feature_allowed, group: int,
              part_gh: list | None = None):
    """Grow one tree on fixed-point gradients ``gh`` (per shard (n_i, 2) int64 device arrays,
    integers of the ``scales``' units) under ``rules`` (``gbflow.rules.TreeRules``), splitting
    only on the features ``feature_allowed`` allows (a ``sampling.FeatureSample``, or (F,) host
    bool for every node, or (max_depth, F): row d for the nodes of depth d), for output
    ``group``. Per-node samples, monotone and interaction constraints (``rules.bounds``' signs,
    ``rules.interactions``) need the level-by-level loop; a weight cap alone does not.

    Returns the tree (a ``Tree``, or a ``PendingTree``: see ``finished_tree``) and per shard its
    margin update (``add_to(kernels, margin)``; call it before the next tree is grown).
    part_gh: the same pairs per part when gh's are views of them (a gathered sample's
    bookkeeping then runs per part)."""
    if not isinstance(feature_allowed, FeatureSample):
        feature_allowed = FeatureSample(np.broadcast_to(
            np.atleast_2d(feature_allowed), (rules.max_depth, np.shape(feature_allowed)[-1])))
    if can_gather(shardset):
        with shardset.timers("gather sample"):
            sample, pairs, kept = gather_sample(shardset, gh, part_gh)
            # Several processes grow each tree together (the same reductions in the same
            # order): each learns its sample's size before growing, and grows one tree, on the
            # sample or, where it outgrew its room, on the pages. A process alone grows first
            # and reads the size after (a sample that outgrew its room, rare, then costs a
            # second growth, on the pages).
            fits = None if shardset.collective.size == 1 else \
                int(kept.wait()[0][0]) <= shardset.sample_rows
        if fits is not False:
            tree = finished_tree(_grow(sample, [pairs], scales, cuts, rules, feature_allowed,
                                       group)[0])
            if fits or int(kept.wait()[0][0]) <= shardset.sample_rows:
                forest = device_forest(shardset.backend, FlatForest.from_trees(
                    [dataclasses.replace(tree, group=0)]))  # one upload for every page
                return tree, [WalkedMargins(shardset, s, tree, forest)
                              for s in range(len(shardset.shards))]
        # the sample outgrew its room (rows were lost): this tree is grown on the pages
    return _grow(shardset, gh, scales, cuts, rules, feature_allowed, group)


def grows_rounds_whole(shardset, rules, node_rate: float) -> bool:
    """Whether a round's trees may be grown in one backend call (``grow_round_whole``): each
    would be grown whole (``grow_tree_whole``), in core. (The caller also needs that no line
    search sets the leaves' values.) node_rate: the trees' ``FeatureSample.node_rate``
    (colsample_bynode)."""
    return shardset.backend.grow_whole_round is not None and not can_gather(shardset) and \
        _grows_whole(shardset, rules, node_rate)


def _level_masks(rules, node_rate: float) -> bool:
    """Whether the trees take per-depth feature masks only (no per-node sample, monotone or
    interaction constraint, no leaf budget that binds): what the planned and whole loops take."""
    return not rules.leaf_budget_binds and node_rate >= 1.0 and \
        (rules.bounds is None or rules.bounds.monotone is None) and rules.interactions is None


def _grows_whole(shardset, rules, node_rate: float) -> bool:
    """Whether ``_grow`` takes the whole-tree loop."""
    return _level_masks(rules, node_rate) and not shardset.uses_level_plans and \
        shardset.grows_whole_trees


def _grow(shardset, gh: list, scales, cuts, rules, feature_allowed, group: int):
    """``grow_tree`` on the shard set as it is (the loop its data and rules take)."""
    if rules.leaf_budget_binds and rules.lossguide:
        return grow_tree_best_first(shardset, gh, scales, cuts, rules, feature_allowed, group)
    level_masks = _level_masks(rules, feature_allowed.node_rate)
    grow = grow_tree_planned if level_masks and shardset.uses_level_plans else \
        grow_tree_whole if _grows_whole(shardset, rules, feature_allowed.node_rate) else \
        grow_tree_levels
    return grow(shardset, gh, scales, cuts, rules, feature_allowed, group)
