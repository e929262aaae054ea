"""Units of tree growing on small synthetic binned data: the grower against a plain per-row
reference, the split search over stores, the level histograms, prediction on hand-made trees."""
from __future__ import annotations

import numpy as np
import pytest

from gbflow import _dtypes
from gbflow.backend import get_backend, numpy_kernels
from gbflow.cuts import Cuts
from gbflow.grow import finished_tree, grow_round_whole, grow_tree
from gbflow.histogram import Histograms, LevelBuffers
from gbflow.predictor import FlatForest, predict_margin
from gbflow.rules import LeafRule, Scales, SplitRule, TreeRules
from gbflow.sampling import FeatureSample
from gbflow.shards import Shard, ShardSet
from gbflow.split import find_splits
from gbflow.stores import DenseStore, SparseBins, SparseStore
from gbflow.tree import Tree


def _cuts(n_value_bins) -> Cuts:
    """Cut points 1.5, 2.5, ... of features with the given value bin counts (value v in bin v)."""
    per = [np.arange(1, k, dtype=np.float32) + np.float32(0.5) for k in n_value_bins]
    offsets = np.concatenate([[0], np.cumsum([len(c) for c in per])]).astype(np.int64)
    values = np.concatenate(per) if per else np.zeros(0, np.float32)
    return Cuts(values=values.astype(np.float32), offsets=offsets, max_bin=256)


def _shard_set(backend, bins, gh, sparse_features=(), level_plans=None) -> ShardSet:
    """A ShardSet of one shard from a binned (n, F) matrix: the listed features in a sparse
    store (common bin: the most frequent one), the others dense."""
    n, n_features = bins.shape
    xp = backend.xp
    cuts_bins = bins.max(axis=0)
    sparse = np.array(sorted(sparse_features), dtype=np.int64)
    dense = np.setdiff1d(np.arange(n_features), sparse)
    shardset = ShardSet(backend)
    shardset.level_plans = level_plans
    shardset.shards.append(Shard(label=xp.zeros(n), weight=None, row_offset=0))
    dense_store = DenseStore(backend, dense, np.maximum(cuts_bins[dense], 1))
    block = np.ascontiguousarray(bins[:, dense].astype(np.uint8))
    dense_store.add_shard(xp.asarray(block))
    stores = [dense_store]
    if len(sparse):
        n_value_bins = np.maximum(cuts_bins[sparse], 1).astype(np.int32)
        common = np.array([np.bincount(bins[:, f]).argmax() for f in sparse], np.int32)
        offsets = np.concatenate([[0], np.cumsum(n_value_bins.astype(np.int64) + 1)])
        store = SparseStore(backend, sparse, n_value_bins, common, offsets)
        rows, local = np.nonzero(bins[:, sparse] != common[None, :])
        indptr = np.concatenate([[0], np.cumsum(np.bincount(rows, minlength=n))])
        store.add_shard(SparseBins(xp.asarray(indptr.astype(np.int64)),
                                   xp.asarray(local.astype(np.int16)),
                                   xp.asarray(bins[:, sparse][rows, local].astype(np.uint8))))
        stores.append(store)
    shardset.set_stores(stores)
    return shardset


def _reference_tree(bins, gh, n_value_bins, rules: TreeRules, scales: Scales):
    """The tree the rules define, grown row by row in plain Python: per node every candidate
    (feature, threshold t = 1..n_value_bins, missing left then right; t = n_value_bins only
    with missing right: present versus missing, written with the missing rows on the left),
    the first of equal gains kept. Returns breadth-first node lists (feature, bin threshold,
    default_left, value) and each row's leaf value."""
    constants = rules.split.constants(scales)
    inv_g, inv_h, lam, alpha, mcw = constants

    def score(G, H):
        t = G - alpha if G > alpha else G + alpha if G < -alpha else 0.0
        return t * t / (H + lam)

    nodes, margin = [], np.zeros(len(gh))
    level = [np.arange(len(gh))]
    for depth in range(rules.max_depth + 1):
        below = []
        for rows in level:
            total = gh[rows].sum(axis=0)
            value = rules.leaf.values(total[None, :], scales)[0]
            best = None
            if depth < rules.max_depth:
                GP, HP = total[0] * inv_g, total[1] * inv_h
                for f in range(bins.shape[1]):
                    b = bins[rows, f]
                    for t in range(1, n_value_bins[f] + 1):
                        for missing_left in (True, False):
                            if t == n_value_bins[f] and missing_left:
                                continue
                            go_left = np.where(b == 0, missing_left, b <= t)
                            left = gh[rows[go_left]].sum(axis=0)
                            GL, HL = left[0] * inv_g, left[1] * inv_h
                            GR, HR = (total[0] - left[0]) * inv_g, (total[1] - left[1]) * inv_h
                            if HL < mcw or HR < mcw or not (HL + lam > 0 and HR + lam > 0):
                                continue
                            gain = (score(GL, HL) + score(GR, HR)) - score(GP, HP)
                            if best is None or gain > best[0]:
                                flipped = t == n_value_bins[f]  # stored missing-left, t = 0
                                best = (gain, f, 0 if flipped else t, missing_left or flipped,
                                        ~go_left if flipped else go_left)
            if best is not None and best[0] > rules.split.min_gain:
                nodes.append((best[1], best[2], best[3], value))
                below += [rows[best[4]], rows[~best[4]]]
            else:
                nodes.append((-1, 0, False, value))
                margin[rows] = value
        level = below
    return nodes, margin


RULES = TreeRules(max_depth=3, split=SplitRule(1.0, 0.0, 1.0, 1e-6),
                  leaf=LeafRule(1.0, 0.0, 0.3))


def _random_binned(rng, n=400, n_value_bins=(5, 1, 3, 8)):
    """Bins of features with the given value bin counts, missing (0) now and then, and integer
    gradients with a signal on features 0 and 1 (feature 1: present or missing)."""
    n_value_bins = np.array(n_value_bins)
    bins = rng.integers(1, n_value_bins + 1, size=(n, len(n_value_bins)))
    bins[rng.random(bins.shape) < 0.2] = 0
    g = np.where(bins[:, 0] > 2, 300, -200) + np.where(bins[:, 1] == 0, 250, -250) \
        + rng.integers(-100, 100, n)
    gh = np.stack([g, rng.integers(1, 40, n)], axis=1).astype(np.int64)
    return bins, gh, n_value_bins


@pytest.mark.parametrize("sparse,loop", [((), "levels"), ((), "planned"), ((), "whole"),
                                         ((1, 3), "levels"), ((1, 3), "whole"),
                                         ((0, 1, 2, 3), "whole")])
def test_the_grower_grows_the_reference_tree(device, sparse, loop):
    """Every loop and store layout grows the tree the rules define, and sends every row's
    margin its leaf's value."""
    rng = np.random.default_rng(3)
    bins, gh, n_value_bins = _random_binned(rng)
    backend = get_backend(device)
    if loop == "whole" and backend.grow_whole_tree is None:
        pytest.skip(f"the {backend.name} backend grows no whole trees")
    shardset = _shard_set(backend, bins, gh, sparse, loop == "planned")
    shardset.whole_trees = loop == "whole"
    assert shardset.uses_level_plans == (loop == "planned")
    assert shardset.grows_whole_trees == (loop == "whole")
    assert len(shardset.stores) == 1 + bool(sparse)
    assert shardset.dense.n_features == len(n_value_bins) - len(sparse)
    scales = Scales(64.0, 16.0)
    tree, rows = grow_tree(shardset, [backend.xp.asarray(gh)], scales, _cuts(n_value_bins),
                           RULES, np.ones(len(n_value_bins), bool), 0)
    margin = backend.xp.zeros(len(gh))
    rows[0].add_to(backend.kernels, margin)
    tree = finished_tree(tree)
    nodes, expected_margin = _reference_tree(bins, gh, n_value_bins, RULES, scales)
    assert [tuple(n[:3]) for n in nodes] == list(zip(tree.feature.tolist(),
                                                     tree.bin_threshold.tolist(),
                                                     tree.default_left.tolist()))
    assert np.array_equal(tree.value, [n[3] for n in nodes])
    assert np.array_equal(backend.to_host(margin), expected_margin)
    assert (tree.bin_threshold[tree.feature == 1] == 0).all()  # present versus missing
    assert (tree.feature == 1).any() and tree.n_nodes > 7
    assert ("whole trees" in shardset.timers.seconds) == (loop == "whole")
    # the whole-tree grower adds a round's trees to the margins' columns itself (three trees
    # of float gradients that quantise to gh); the other loops leave them to their updates
    margins = backend.xp.full((len(gh), 3), 0.25)
    if loop == "whole":
        shardset.shards[0].margin = margins
        grad = np.repeat((gh[:, 0] / scales.g)[:, None], 3, axis=1).astype(np.float32)
        hess = np.repeat((gh[:, 1] / scales.h)[:, None], 3, axis=1).astype(np.float32)
        trees = grow_round_whole(shardset, grad, hess, [scales] * 3, _cuts(n_value_bins),
                                 RULES, [FeatureSample(np.ones((RULES.max_depth,
                                                                len(n_value_bins)), bool))] * 3,
                                 np.empty((len(gh), 2), np.int64))
        assert [t.to_dict() for t in trees] == [dict(tree.to_dict(), group=k) for k in range(3)]
        assert (backend.to_host(margins) == (0.25 + expected_margin)[:, None]).all()
    else:
        again, updates = grow_tree(shardset, [backend.xp.asarray(gh)], scales,
                                   _cuts(n_value_bins), RULES, np.ones(len(n_value_bins), bool),
                                   1)
        assert finished_tree(again).to_dict() == dict(tree.to_dict(), group=1)
        assert len(updates) == 1
        updates[0].add_to(backend.kernels, margins[:, 1])
        margins = backend.to_host(margins)
        assert np.array_equal(margins[:, 1], 0.25 + expected_margin)
        assert (margins[:, [0, 2]] == 0.25).all()


def test_the_grower_follows_the_rules_and_the_feature_sample():
    rng = np.random.default_rng(4)
    bins, gh, n_value_bins = _random_binned(rng)
    backend = get_backend("cpu")
    cuts, scales = _cuts(n_value_bins), Scales(64.0, 16.0)

    def tree(rules, allowed=np.ones(4, bool)):
        shardset = _shard_set(backend, bins, gh)
        return grow_tree(shardset, [gh], scales, cuts, rules, allowed, 0)[0]

    only_2 = tree(RULES, np.array([False, False, True, False]))
    assert set(only_2.feature[~only_2.is_leaf]) == {2}
    heavy = TreeRules(3, SplitRule(1.0, 0.0, gh[:, 1].sum() / 3, 1e-6), RULES.leaf)
    assert (tree(heavy).cover >= gh[:, 1].sum() / 3 / scales.h).all()
    assert tree(TreeRules(3, SplitRule(1.0, 0.0, 1.0, 1e12), RULES.leaf)).n_nodes == 1
    stump = tree(TreeRules(1, RULES.split, RULES.leaf))
    assert stump.n_nodes == 3 and list(stump.left) == [1, -1, -1]


def test_find_splits_keeps_the_better_store_and_the_lower_feature_on_ties():
    """Two identical features, one per store: the lower global id wins the tie whichever store
    holds it; a split is taken only above min_gain."""
    rng = np.random.default_rng(5)
    column = rng.integers(1, 4, 300)
    bins = np.stack([column, column], axis=1)
    gh = np.stack([np.where(column == 1, -50, 40), np.full(300, 3)], axis=1).astype(np.int64)
    backend = get_backend("cpu")
    scales = Scales(1.0, 1.0)
    for sparse in ((0,), (1,)):
        shardset = _shard_set(backend, bins, gh, sparse)
        shardset.reset_row_index()
        hist = shardset.build_histograms([gh], [np.zeros(1, np.int64)], [np.array([300])], 4)
        totals = gh.sum(axis=0)[None, :]
        shardset.fill_common_bins(hist, totals)
        constants = RULES.split.constants(scales)
        found, fetched = find_splits(backend, shardset.stores, hist, np.ones(2, bool), constants,
                                     1e-6, fetch=[np.arange(3)])
        assert found.feature[0] == 0 and found.bin_threshold[0] == 1 and found.do_split[0]
        assert np.array_equal(fetched[0], np.arange(3))
        found, _ = find_splits(backend, shardset.stores, hist, np.array([False, True]),
                               constants, 1e-6)
        assert found.feature[0] == 1
        found, _ = find_splits(backend, shardset.stores, hist, np.ones(2, bool), constants,
                               float(found.gain[0]))
        assert not found.do_split[0]  # gain must exceed min_gain


def test_level_histograms_siblings_are_parents_minus_built_children():
    rng = np.random.default_rng(6)
    parent = Histograms((rng.integers(-99, 99, (3, 2, 4, 2)), rng.integers(-99, 99, (3, 5, 2))))
    buffers = LevelBuffers(np)
    children = Histograms.next_level(buffers, parent, 2, depth=1)
    assert [a.shape for a in children.arrays] == [(4, 2, 4, 2), (4, 5, 2)]
    assert all(not a[2:].any() for a in children.arrays)  # the built half starts at zero
    built = children.nodes(2, 4)
    for a in built.arrays:
        a += rng.integers(-9, 9, a.shape)
    children.fill_siblings(numpy_kernels, parent, np.array([2, 0]))
    for mine, theirs in zip(children.arrays, parent.arrays):
        assert np.array_equal(mine[0], theirs[2] - mine[2])
        assert np.array_equal(mine[1], theirs[0] - mine[3])


def test_prediction_walks_hand_made_trees(device):
    """Thresholds (``x < t`` left), default directions for NaN, the present-versus-missing
    threshold and output groups, on a hand-made forest."""
    nan = np.nan
    below = _dtypes.BELOW_EVERY_VALUE
    first = Tree(feature=np.array([0, -1, 1, -1, -1]), bin_threshold=np.array([2, 0, 0, 0, 0]),
                 threshold=np.array([1.5, 0, below, 0, 0], np.float32),
                 default_left=np.array([False, False, True, False, False]),
                 left=np.array([1, -1, 3, -1, -1]), right=np.array([2, -1, 4, -1, -1]),
                 value=np.array([0, 1.0, 0, 10.0, 100.0]), gain=np.zeros(5), cover=np.zeros(5),
                 group=0)
    second = Tree(feature=np.array([-1]), bin_threshold=np.zeros(1, np.int32),
                  threshold=np.zeros(1, np.float32), default_left=np.zeros(1, bool),
                  left=np.array([-1]), right=np.array([-1]), value=np.array([0.5]),
                  gain=np.zeros(1), cover=np.zeros(1), group=1)
    X = np.array([[1.0, 7.0], [2.0, nan], [2.0, -3e38], [nan, 0.0]], np.float32)
    backend = get_backend(device)
    margin = predict_margin(backend, backend.xp.asarray(X), FlatForest.from_trees([first, second]),
                            np.array([0.25, -1.0]))
    expected = [[1.25, -0.5], [10.25, -0.5], [100.25, -0.5], [100.25, -0.5]]
    assert np.array_equal(backend.to_host(margin), expected)
