"""Growing one tree, or a round's trees, in one backend call (``Backend.grow_whole_tree``,
``grow_whole_round``): no host work per level."""
from __future__ import annotations

import functools

import numpy as np

from .. import _dtypes
from ..backend.common import SparseSide, TreeFinish
from ..tree import Tree
from .margins import LeafRows


def grow_tree_whole(shardset, gh: list, scales, cuts, rules, feature_allowed,
                    group: int) -> tuple[Tree, list[LeafRows]]:
    """``gbflow.grow.grow_tree`` in one call of the backend's whole-tree grower: the tree and
    training margins the level-by-level loop gives (the same kernels on the same integers).
    For one shard of numeric features (a dense store, and a sparse one or not) in one process
    (``ShardSet.grows_whole_trees``), per-depth feature masks (no per-node sample), weights
    bounded by ``max_delta_step`` at most (no monotone or interaction constraint), no leaf
    budget that binds. (Training grows such trees a round at a time, ``grow_round_whole``,
    but where a line search sets the leaves: their ``LeafRows`` are returned.)"""
    dense = shardset.dense
    shardset.reset_row_index()
    rows = (shardset.row_index[0], shardset._spare_index[0])
    by_level = feature_allowed.by_level
    bounds = rules.bounds
    finish = TreeFinish(cuts.values, cuts.offsets, rules.leaf.constants(scales), None, group)
    with shardset.timers("whole trees"):
        grown = shardset.backend.grow_whole_tree(
            dense.rows(0), dense.columns(0), gh[0], *rows, dense.n_value_bins_host, cuts.n_bins,
            np.ascontiguousarray(by_level[:, dense.features]), *rules.split.constants(scales),
            rules.split.min_gain, None if bounds is None else bounds.max_delta_step,
            features=dense.features, sparse=_sparse_side(shardset, by_level), finish=finish)
    tree = _tree(grown, group)
    # the row arrays as the level loop leaves them (a LeafRows' split rows are in the current
    # one): the deepest partitioned level's array is current
    deepest = int(grown.depth[grown.seg_start >= 0].max()) % 2
    shardset.row_index, shardset._spare_index = [rows[deepest]], [rows[1 - deepest]]
    return tree, [_leaf_rows(shardset, rows, grown, rules.max_depth, tree.value)]


def grow_round_whole(shardset, grad, hess, scales: list, cuts, rules, samples: list,
                     gh) -> list[Tree]:
    """A boosting round's trees in one call of the backend's round grower
    (``Backend.grow_whole_round``), where ``grow.grows_rounds_whole`` holds and no line search
    sets the leaves: tree k of column k of the shard's (n, K) float gradients ``grad`` and
    ``hess`` (host), under ``scales[k]`` and the ``FeatureSample`` ``samples[k]``, each
    ``grow_tree_whole``'s tree, added to the shard's margins' column k in the call (a round of
    small trees cost some 0.2 ms of host work a tree, one tree a call). gh: (n, 2) int64
    scratch for the fixed-point gradients (overwritten)."""
    dense = shardset.dense
    shardset.reset_row_index()  # (allocates the row arrays; the grower writes the root's rows)
    bounds = rules.bounds
    by_level = np.stack([sample.by_level for sample in samples])  # (K, max_depth, F)
    allowed = np.ascontiguousarray(by_level[..., dense.features])
    with shardset.timers("whole trees"):
        grown = shardset.backend.grow_whole_round(
            dense.rows(0), dense.columns(0), grad, hess, [[s.g, s.h] for s in scales], gh,
            shardset.row_index[0], shardset._spare_index[0], dense.n_value_bins_host,
            cuts.n_bins, allowed, [rules.split.constants(s) for s in scales],
            rules.split.min_gain, None if bounds is None else bounds.max_delta_step,
            dense.features, cuts.values, cuts.offsets, [rules.leaf.constants(s) for s in scales],
            shardset.shards[0].margin, sparse=_sparse_side(shardset, by_level))
    return [_tree(g, k) for k, g in enumerate(grown)]


def _tree(grown, group: int) -> Tree:
    """The ``Tree`` of a finished ``GrownTree``: copies of its arrays (they are views of the
    grower's buffers, a single tree's sized for the most nodes its depth allows, a round's
    holding every tree of the round: a model keeps only its nodes), the children's ids as
    int32."""
    left = grown.left.astype(_dtypes.NODE)
    return Tree(feature=grown.feature.copy(), bin_threshold=grown.bin_threshold.copy(),
                threshold=grown.threshold.copy(), default_left=grown.default_left.copy(),
                left=left, right=np.where(left >= 0, left + 1, -1).astype(_dtypes.NODE),
                value=grown.value.copy(), gain=grown.gain.copy(), cover=grown.cover.copy(),
                group=group)


def _sparse_side(shardset, by_level: np.ndarray) -> SparseSide | None:
    """Shard 0's sparse store as the whole-tree growers take it (None without one), its mask
    ``by_level``'s (a tree's (max_depth, F), or a round's (K, max_depth, F)) on its features."""
    if len(shardset.stores) < 2:
        return None
    store = shardset.stores[1]
    entries = store.entries[0]
    return SparseSide(entries.indptr, entries.entry_feature, entries.entry_bin,
                      store.bin_offsets_host, store.n_value_bins_host, store.common_bin,
                      np.ascontiguousarray(by_level[..., store.features]), store.features,
                      shardset._split_column[0], store.columns[0], store.padded_bins)


def _leaf_rows(shardset, rows: tuple, grown, max_depth: int, node_value) -> LeafRows:
    """The shard's ``LeafRows``: the leaves whose rows were moved, by the row array their depth
    wrote (``rows[depth % 2]``); the splits at depth max_depth - 1 by their segments, in
    ``rows[(max_depth - 1) % 2]`` (the shard's current row array then), their split bins read
    from ``ShardSet.split_matrix`` when the margins are updated."""
    leaf = np.flatnonzero((grown.feature < 0) & (grown.seg_start >= 0))  # ids ascending
    odd = (grown.depth[leaf] & 1).astype(bool)
    leaves = [(rows[p], grown.seg_start[at], grown.seg_count[at], at)
              for p, at in ((0, leaf[~odd]), (1, leaf[odd])) if len(at)]
    last = np.flatnonzero((grown.feature >= 0) & (grown.depth == max_depth - 1))
    starts, counts, feature = grown.seg_start[last], grown.seg_count[last], grown.feature[last]
    return LeafRows(leaves, rows[(max_depth - 1) % 2], starts, counts,
                    shardset.split_ids(feature), grown.bin_threshold[last],
                    grown.default_left[last], grown.left[last], node_value=node_value,
                    by_feature=functools.partial(shardset.split_matrix, 0, starts, counts,
                                                 feature))
