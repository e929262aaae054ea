"""Every fast sparse-column and split-column kernel against its NumPy twin, exactly, edge cases too.

The sparse store of each test is built from a random binned dense matrix the way routing builds it:
per sparse feature the common bin is its most frequent bin, and the entries are the other bins,
row-major, features ascending within a row.
"""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from gbflow import _dtypes
from gbflow.backend import cpu_kernels, numpy_kernels
from gbflow.backend.common import padded_width
from gbflow.stores import SparseBins, SparseColumns, entry_slots

# ---------------------------------------------------------------------------------------------
# Inputs

def sparse_store(bins, n_value_bins, id_dtype=None):
    """The sparse store of a binned (n_rows, S) matrix whose feature s has bins 0..n_value_bins[s].

    id_dtype: entry_feature's dtype, by default routing's (``_dtypes.entry_feature_dtype``).
    Returns dict(indptr, entry_feature, entry_bin, bin_offsets, common_bin, n_slots).
    """
    n_rows, n_features = bins.shape
    widths = np.asarray(n_value_bins, dtype=np.int64) + 1
    bin_offsets = np.concatenate([[0], np.cumsum(widths)]).astype(np.int64)
    common_bin = np.array([np.bincount(bins[:, s], minlength=widths[s]).argmax()
                           for s in range(n_features)], dtype=np.int32)
    stored = bins != common_bin[None, :]
    rows, features = np.nonzero(stored)  # row-major: features ascending within a row
    indptr = np.concatenate([[0], np.cumsum(stored.sum(axis=1))]).astype(np.int64)
    if id_dtype is None:
        id_dtype = _dtypes.entry_feature_dtype(n_features)
    return dict(indptr=indptr, entry_feature=features.astype(id_dtype),
                entry_bin=bins[rows, features], bin_offsets=bin_offsets, common_bin=common_bin,
                n_slots=int(bin_offsets[-1]))


def random_sparse_bins(rng, n_rows, n_features, n_bins):
    """(bins, n_value_bins): feature kinds by s % 4: mostly missing (common bin 0); mostly one
    value bin (a common value bin); one constant bin (no stored entries); uniform. The first
    feature uses every bin of the dtype (n_bins - 1 value bins)."""
    n_value_bins = rng.integers(1, n_bins, size=n_features).astype(np.int32)
    if n_features:
        n_value_bins[0] = n_bins - 1
    bins = np.zeros((n_rows, n_features), dtype=_dtypes.bin_dtype(n_bins))
    for s in range(n_features):
        nvb = int(n_value_bins[s])
        uniform = rng.integers(0, nvb + 1, size=n_rows)
        kind = s % 4
        if kind == 0:
            column = np.where(rng.random(n_rows) < 0.9, 0, uniform)
        elif kind == 1:
            column = np.where(rng.random(n_rows) < 0.85, 1 + s % nvb, uniform)
        elif kind == 2:
            column = np.full(n_rows, nvb)
        else:
            column = uniform
        bins[:, s] = column
    return bins, n_value_bins


def random_segments(rng, n_rows, n_nodes):
    """(row_index, seg_start, seg_count): rows dealt to nodes at random; node 0 is empty when
    there are several nodes."""
    node = rng.integers(0, n_nodes, size=n_rows)
    if n_nodes > 1:
        node[node == 0] = 1
    row_index = np.argsort(node, kind="stable").astype(_dtypes.ROW_INDEX)
    count = np.bincount(node, minlength=n_nodes).astype(np.int64)
    start = (np.cumsum(count) - count).astype(np.int64)
    return row_index, start, count


def random_gh(rng, n_rows):
    return np.stack([rng.integers(-2**40, 2**40, n_rows), rng.integers(1, 2**40, n_rows)],
                    axis=1).astype(_dtypes.FIXED)


def node_totals(gh, row_index, start, count):
    return np.array([gh[row_index[s:s + c]].sum(axis=0) for s, c in zip(start, count)],
                    dtype=_dtypes.FIXED).reshape(len(start), 2)


def compact(dense_hist, bin_offsets):
    """(n_nodes, S, n_bins, 2) dense histograms -> (n_nodes, n_slots, 2) compact ones."""
    widths = np.diff(bin_offsets)
    return np.concatenate([dense_hist[:, s, :w] for s, w in enumerate(widths)], axis=1) \
        if len(widths) else np.zeros((dense_hist.shape[0], 0, 2), dtype=_dtypes.FIXED)


CASES = [  # n_rows, n_sparse_features, n_bins, n_nodes
    (0, 3, 16, 1), (1, 3, 16, 1), (1, 4, 16, 3), (777, 4, 2, 3), (3001, 5, 256, 7),
    (777, 3, 300, 5), (3001, 4, 1000, 300),  # many nodes in one launch, most tiny, one empty
    (30011, 9, 64, 2),  # several thread blocks per node
    (2000, 20, 1000, 2),  # 9224 slots: too many for one block's shared memory (global path)
    (500, 0, 16, 3),  # no sparse feature at all
]


# The store's feature id dtypes (routing picks int16 while S <= 32767, int32 above); a kernel
# that reads entry_feature must give the same results with either.
ID_DTYPES = [np.int16, np.int32]


def _level(n_rows, n_features, n_bins, n_nodes, seed, id_dtype=None):
    rng = np.random.default_rng(seed)
    bins, n_value_bins = random_sparse_bins(rng, n_rows, n_features, n_bins)
    if n_rows > 10:
        bins[5:10] = sparse_store(bins, n_value_bins)["common_bin"]  # rows with no entries
    store = sparse_store(bins, n_value_bins, id_dtype)
    row_index, start, count = random_segments(rng, n_rows, n_nodes)
    return rng, bins, n_value_bins, store, random_gh(rng, n_rows), row_index, start, count


def _histograms(store, gh, row_index, start, count, fill_from=numpy_kernels):
    s = store
    hist = numpy_kernels.build_sparse_histograms(s["indptr"], s["entry_feature"], s["entry_bin"],
                                                 s["bin_offsets"], gh, row_index, start, count,
                                                 s["n_slots"])
    return fill_from.fill_common_bins(hist, node_totals(gh, row_index, start, count),
                                      s["bin_offsets"], s["common_bin"])


# ---------------------------------------------------------------------------------------------
# bin_entries

@pytest.mark.parametrize("n_cuts", [0, 1, 2, 7, 254, 298, 998])
def test_bin_entries(kernels, n_cuts):
    rng = np.random.default_rng(n_cuts)
    cuts = [np.unique(rng.normal(size=n_cuts)).astype(np.float32) for _ in range(3)]
    cuts[1] = cuts[1][: n_cuts // 2]
    offsets = np.concatenate([[0], np.cumsum([len(c) for c in cuts])]).astype(np.int64)
    cut_values = np.concatenate(cuts).astype(np.float32)
    nnz = 3001
    entry_feature = rng.integers(0, 3, size=nnz).astype(np.int32)
    values = rng.normal(size=nnz).astype(np.float32)
    on_cut = np.flatnonzero(entry_feature == 0)[:20]  # values exactly on a cut
    values[on_cut[: len(cuts[0])]] = cuts[0][: len(on_cut)]
    values[rng.random(nnz) < 0.1] = np.nan
    values[:3] = [-0.0, 0.0, np.inf]
    dtype = _dtypes.bin_dtype(n_cuts + 2)  # 256 bins (uint8) at 254 cuts, uint16 above
    expected = numpy_kernels.bin_entries(values, entry_feature, cut_values, offsets,
                                         np.empty(nnz, dtype))
    got = kernels.bin_entries(values, entry_feature, cut_values, offsets,
                              np.full(nnz, 7, dtype))
    assert got.dtype == dtype and np.array_equal(got, expected)
    assert np.all(expected[np.isnan(values)] == 0) and np.all(expected[~np.isnan(values)] >= 1)
    # the same bins as bin_features on the dense column of each entry
    dense = numpy_kernels.bin_features(values[:, None], cut_values[offsets[0]:offsets[1]],
                                       np.array([0, offsets[1]], np.int64),
                                       np.empty((nnz, 1), dtype))
    assert np.array_equal(expected[entry_feature == 0], dense[entry_feature == 0, 0])


def test_bin_entries_empty(kernels):
    out = np.empty(0, np.uint8)
    got = kernels.bin_entries(np.empty(0, np.float32), np.empty(0, np.int32),
                              np.array([0.5], np.float32), np.array([0, 1], np.int64), out)
    assert len(got) == 0


# ---------------------------------------------------------------------------------------------
# build_sparse_histograms, fill_common_bins

def _with_int32_ids(args, position):
    """``args`` with the entry_feature at ``position`` as int32: the twin on the widest ids is
    the reference whatever dtype the kernel under test is given."""
    return args[:position] + (args[position].astype(np.int32),) + args[position + 1:]


@pytest.mark.parametrize("id_dtype", ID_DTYPES)
@pytest.mark.parametrize("n_rows,n_features,n_bins,n_nodes", CASES)
def test_build_sparse_histograms(kernels, n_rows, n_features, n_bins, n_nodes, id_dtype):
    _, bins, n_value_bins, s, gh, row_index, start, count = _level(
        n_rows, n_features, n_bins, n_nodes, seed=n_rows + n_bins, id_dtype=id_dtype)
    assert s["entry_feature"].dtype == id_dtype
    args = (s["indptr"], s["entry_feature"], s["entry_bin"], s["bin_offsets"], gh, row_index,
            start, count, s["n_slots"])
    expected = numpy_kernels.build_sparse_histograms(*_with_int32_ids(args, 1))
    assert np.array_equal(numpy_kernels.build_sparse_histograms(*args), expected)  # the twin
    got = kernels.build_sparse_histograms(*args)
    assert got.dtype == np.int64 and got.shape == (n_nodes, s["n_slots"], 2)
    assert np.array_equal(got, expected)
    # each entry's slot precomputed (narrow and wide), as the CPU store keeps them: the same
    slots = entry_slots(SparseBins(s["indptr"], s["entry_feature"], s["entry_bin"]),
                        s["bin_offsets"])
    assert slots.dtype == (np.uint16 if s["n_slots"] <= 65536 else np.int32)
    for given in (slots, slots.astype(np.int32)):
        assert np.array_equal(kernels.build_sparse_histograms(*args, slots=given), expected)
        assert np.array_equal(numpy_kernels.build_sparse_histograms(*args, slots=given),
                              expected)
    # invariant: with the common bins filled, the dense histograms of the same columns
    if n_features:
        dense = numpy_kernels.build_histograms(bins, gh, row_index, start, count, n_bins)
        totals = node_totals(gh, row_index, start, count)
        filled = numpy_kernels.fill_common_bins(got.copy(), totals, s["bin_offsets"],
                                                s["common_bin"])
        assert np.array_equal(filled, compact(dense, s["bin_offsets"]))


@pytest.mark.parametrize("id_dtype", ID_DTYPES)
@pytest.mark.parametrize("n_rows,n_features,n_bins,n_nodes", CASES)
def test_build_sparse_histograms_adds_into_out(kernels, n_rows, n_features, n_bins, n_nodes,
                                               id_dtype):
    rng, _, _, s, gh, row_index, start, count = _level(n_rows, n_features, n_bins, n_nodes,
                                                       seed=5 + n_rows + n_bins,
                                                       id_dtype=id_dtype)
    args = (s["indptr"], s["entry_feature"], s["entry_bin"], s["bin_offsets"], gh, row_index,
            start, count, s["n_slots"])
    expected = numpy_kernels.build_sparse_histograms(*_with_int32_ids(args, 1))
    # out: the second half of a level's array, holding other shards' sums already
    level = rng.integers(-2**50, 2**50, size=(2 * n_nodes, s["n_slots"], 2))
    out = level[n_nodes:]
    prefill, siblings = out.copy(), level[:n_nodes].copy()
    got = kernels.build_sparse_histograms(*args, out=out)
    assert got is out
    assert np.array_equal(out, prefill + expected)
    assert np.array_equal(level[:n_nodes], siblings)  # nothing written outside out
    # the twin adds the same way
    twin_out = prefill.copy()
    assert numpy_kernels.build_sparse_histograms(*args, out=twin_out) is twin_out
    assert np.array_equal(twin_out, out)


@pytest.mark.parametrize("n_rows,n_features,n_bins,n_nodes", CASES)
def test_build_sparse_histograms_of_built_children(kernels, n_rows, n_features, n_bins,
                                                   n_nodes):
    """Given split segments and their left counts (left child first), each node's histogram is
    its built child's: the left part or the rest, as built_left says."""
    rng, _, _, s, gh, row_index, start, count = _level(n_rows, n_features, n_bins, n_nodes,
                                                       seed=11 + n_rows + n_bins)
    left = np.floor(rng.random(n_nodes) * (count + 1)).astype(np.int64)  # 0..count
    built_left = rng.random(n_nodes) < 0.5
    args = (s["indptr"], s["entry_feature"], s["entry_bin"], s["bin_offsets"], gh, row_index,
            start, count, s["n_slots"])
    child_start = np.where(built_left, start, start + left)
    child_count = np.where(built_left, left, count - left)
    expected = numpy_kernels.build_sparse_histograms(*args[:6], child_start, child_count,
                                                     s["n_slots"])
    for module in (numpy_kernels, kernels):
        got = module.build_sparse_histograms(*args, split_left=left, built_left=built_left)
        assert np.array_equal(got, expected)
        out = np.ones_like(expected)
        assert np.array_equal(module.build_sparse_histograms(
            *args, out=out, split_left=left, built_left=built_left), expected + 1)
    if n_rows > 100 and n_features:  # a real test: parts of segments, not whole ones
        assert ((left > 0) & (left < count)).any()
        assert not np.array_equal(expected, numpy_kernels.build_sparse_histograms(*args))


@pytest.mark.parametrize("n_rows,n_features,n_bins,n_nodes", CASES)
def test_fill_common_bins(kernels, n_rows, n_features, n_bins, n_nodes):
    _, _, _, s, gh, row_index, start, count = _level(n_rows, n_features, n_bins, n_nodes,
                                                     seed=3 + n_rows)
    hist = numpy_kernels.build_sparse_histograms(s["indptr"], s["entry_feature"], s["entry_bin"],
                                                 s["bin_offsets"], gh, row_index, start, count,
                                                 s["n_slots"])
    totals = node_totals(gh, row_index, start, count)
    expected = numpy_kernels.fill_common_bins(hist.copy(), totals, s["bin_offsets"],
                                              s["common_bin"])
    got_hist = hist.copy()
    got = kernels.fill_common_bins(got_hist, totals, s["bin_offsets"], s["common_bin"])
    assert np.array_equal(got_hist, expected) and np.array_equal(got, expected)
    # every feature's bins now add up to the node total
    for f in range(n_features):
        lo, hi = s["bin_offsets"][f], s["bin_offsets"][f + 1]
        assert np.array_equal(got_hist[:, lo:hi].sum(axis=1), totals)


def test_fill_common_bins_not_zero(kernels):
    """A common bin that already holds a value is overwritten the twin's way (sum includes it)."""
    rng = np.random.default_rng(5)
    hist = rng.integers(-1000, 1000, size=(4, 7, 2)).astype(np.int64)
    offsets, common = np.array([0, 3, 4, 7], np.int64), np.array([1, 0, 2], np.int32)
    totals = rng.integers(-5000, 5000, size=(4, 2)).astype(np.int64)
    expected = numpy_kernels.fill_common_bins(hist.copy(), totals, offsets, common)
    got = hist.copy()
    kernels.fill_common_bins(got, totals, offsets, common)
    assert np.array_equal(got, expected)


# ---------------------------------------------------------------------------------------------
# evaluate_sparse_splits

def _assert_same_splits(expected, got):
    assert len(expected) == len(got) == 5
    for e, g in zip(expected, got):
        assert e.dtype == g.dtype and e.shape == g.shape and np.array_equal(e, g), (e, g)
    assert np.array_equal(expected[0].view(np.int64), got[0].view(np.int64))  # bit for bit


EVAL_CASES = [  # n_rows, n_features, n_bins, n_nodes
    (4000, 1, 2, 1), (4000, 4, 16, 3), (4000, 5, 256, 64), (3001, 3, 300, 2),
    (3001, 40, 64, 5), (777, 300, 16, 2),  # more features than one block of threads
    (3001, 6, 1000, 300), (1, 3, 16, 1), (0, 3, 16, 2),
]


@pytest.mark.parametrize("n_rows,n_features,n_bins,n_nodes", EVAL_CASES)
@pytest.mark.parametrize("reg_alpha,min_child_weight", [(0.0, 1.0), (0.5, 0.0), (2.0, 50.0)])
def test_evaluate_sparse_splits(kernels, n_rows, n_features, n_bins, n_nodes, reg_alpha,
                                min_child_weight):
    rng, _, n_value_bins, s, gh, row_index, start, count = _level(
        n_rows, n_features, n_bins, n_nodes, seed=n_nodes * n_bins + n_features)
    gh[:, 1] = rng.integers(1, 2**20, size=n_rows)
    hist = _histograms(s, gh, row_index, start, count)
    allowed = rng.random(n_features) < 0.8
    args = (hist, s["bin_offsets"], n_value_bins, allowed, 2.0**-30, 2.0**-20, 1.0, reg_alpha,
            min_child_weight)
    expected = numpy_kernels.evaluate_sparse_splits(*args)
    _assert_same_splits(expected, kernels.evaluate_sparse_splits(*args))
    # the padded width given once by the store: the same splits; a wrong one is refused
    width = padded_width(s["bin_offsets"])
    _assert_same_splits(expected, kernels.evaluate_sparse_splits(*args, padded_bins=width))
    _assert_same_splits(expected, numpy_kernels.evaluate_sparse_splits(*args,
                                                                        padded_bins=width))
    if n_features:
        with pytest.raises(ValueError, match="padded_bins"):
            numpy_kernels.evaluate_sparse_splits(*args, padded_bins=width + 1)
    # fewer usable thresholds than the bins stored (n_value_bins below a feature's width - 1)
    fewer = np.minimum(n_value_bins, rng.integers(1, n_bins, size=n_features)).astype(np.int32)
    args = (hist, s["bin_offsets"], fewer, allowed, 2.0**-30, 2.0**-20, 1.0, reg_alpha,
            min_child_weight)
    _assert_same_splits(numpy_kernels.evaluate_sparse_splits(*args),
                        kernels.evaluate_sparse_splits(*args))
    # a mask per node (colsample_bynode)
    per_node = rng.random((n_nodes, n_features)) < 0.6
    args = (hist, s["bin_offsets"], n_value_bins, per_node, 2.0**-30, 2.0**-20, 1.0,
            reg_alpha, min_child_weight)
    _assert_same_splits(numpy_kernels.evaluate_sparse_splits(*args),
                        kernels.evaluate_sparse_splits(*args))


def test_evaluate_sparse_splits_ties_between_features(kernels):
    """Identical features of different widths: the lower feature id wins, as argmax's first."""
    rng = np.random.default_rng(1)
    column = rng.integers(0, 5, size=2000)
    bins = np.stack([column, column, column, column], axis=1).astype(np.uint8)
    n_value_bins = np.array([4, 4, 4, 7], np.int32)  # feature 3 also has empty bins 5..7
    s = sparse_store(bins, n_value_bins)
    gh = random_gh(rng, 2000)
    row_index, start, count = random_segments(rng, 2000, 3)
    hist = _histograms(s, gh, row_index, start, count)
    for allowed in (np.ones(4, bool), np.array([False, True, True, False]),
                    np.array([False, False, True, True])):
        args = (hist, s["bin_offsets"], n_value_bins, allowed, 2.0**-30, 2.0**-30, 1.0, 0.0, 0.0)
        expected = numpy_kernels.evaluate_sparse_splits(*args)
        got = kernels.evaluate_sparse_splits(*args)
        _assert_same_splits(expected, got)
        # features 0..2 tie everywhere; feature 3 can beat them only by its extra thresholds
        first = np.flatnonzero(allowed)[0]
        assert np.all(np.isin(got[1][count > 0], [first, 3]))
        if not allowed[3]:
            assert np.all(got[1][count > 0] == first)


@pytest.mark.parametrize("min_child_weight", [0.0, 1e-12, 1.0])
def test_evaluate_sparse_splits_features_absent_from_nodes(kernels, min_child_weight):
    """One-hot-like columns (missing unless 1.0) absent from most nodes, and value bins whose
    hessians sum to 0: the twin's candidates on them, whatever min_child_weight rules out."""
    rng = np.random.default_rng(3)
    n_rows, n_features = 4000, 40
    bins = np.zeros((n_rows, n_features), np.uint8)
    hot = rng.integers(0, n_features, size=n_rows)
    bins[np.arange(n_rows), hot] = 1
    n_value_bins = np.ones(n_features, np.int32)
    s = sparse_store(bins, n_value_bins)
    gh = random_gh(rng, n_rows)
    gh[hot % 3 == 0, 1] = 0  # some present values with zero hessian: a bin of (g, 0)
    gh[hot % 6 == 0, 0] = 0  # and some all zero: present, yet every sum is 0
    row_index = np.argsort(hot, kind="stable").astype(np.int32)  # nodes hold few features
    start = np.arange(0, n_rows, 250, dtype=np.int64)
    count = np.full(len(start), 250, dtype=np.int64)
    hist = _histograms(s, gh, row_index, start, count, fill_from=kernels)
    args = (hist, s["bin_offsets"], n_value_bins, np.ones(n_features, bool), 2.0**-30,
            2.0**-30, 1.0, 0.0, min_child_weight)
    _assert_same_splits(numpy_kernels.evaluate_sparse_splits(*args),
                        kernels.evaluate_sparse_splits(*args))


def test_evaluate_sparse_splits_one_feature_holds_every_entry(kernels):
    rng = np.random.default_rng(2)
    bins = np.zeros((3001, 5), np.uint16)
    bins[:, 3] = rng.integers(0, 300, size=3001)
    n_value_bins = np.array([299, 1, 5, 299, 2], np.int32)
    s = sparse_store(bins, n_value_bins)
    assert np.all(s["entry_feature"] == 3)
    gh = random_gh(rng, 3001)
    row_index, start, count = random_segments(rng, 3001, 4)
    hist = _histograms(s, gh, row_index, start, count, fill_from=kernels)
    # a positive min_child_weight rules out the empty-child candidates of the constant features
    args = (hist, s["bin_offsets"], n_value_bins, np.ones(5, bool), 2.0**-30, 2.0**-30, 1.0,
            0.0, 1e-12)
    expected = numpy_kernels.evaluate_sparse_splits(*args)
    _assert_same_splits(expected, kernels.evaluate_sparse_splits(*args))
    assert np.all(expected[1][count > 0] == 3)


def test_evaluate_sparse_splits_of_one_hot_columns(kernels):
    """One-hot columns (one value bin each: value or missing, the store's common bin being the
    missing one) split present versus missing: threshold 0, missing values left, the same as
    the dense search on the same data."""
    rng = np.random.default_rng(3)
    n_rows, n_features = 3000, 4
    hot = rng.integers(0, n_features, size=n_rows)  # one column present per row
    bins = np.zeros((n_rows, n_features), np.uint8)
    bins[np.arange(n_rows), hot] = 1
    n_value_bins = np.ones(n_features, np.int32)
    s = sparse_store(bins, n_value_bins)
    gh = random_gh(rng, n_rows)
    gh[:, 0] = np.where(hot == 2, -2**35, 2**33) + rng.integers(-2**32, 2**32, n_rows)  # 2 wins
    row_index, start, count = random_segments(rng, n_rows, 3)
    hist = _histograms(s, gh, row_index, start, count, fill_from=kernels)
    args = (hist, s["bin_offsets"], n_value_bins, np.ones(n_features, bool), 2.0**-30,
            2.0**-30, 1.0, 0.0, 1.0)
    expected = numpy_kernels.evaluate_sparse_splits(*args)
    _assert_same_splits(expected, kernels.evaluate_sparse_splits(*args))
    busy = count > 0
    assert np.all(expected[1][busy] == 2) and np.all(expected[2][busy] == 0)
    assert np.all(expected[3][busy])
    dense = numpy_kernels.build_histograms(bins, gh, row_index, start, count, 2)
    _assert_same_splits(numpy_kernels.evaluate_splits(dense, *args[2:]), expected)


def test_evaluate_sparse_splits_nothing_valid(kernels):
    hist = np.zeros((2, 9, 2), dtype=np.int64)
    offsets = np.array([0, 4, 5, 9], np.int64)
    hist[:, [1, 4, 6]] = [3, 1]  # every feature holds all rows in one bin
    args = (hist, offsets, np.array([3, 0, 3], np.int32), np.ones(3, bool), 1.0, 1.0, 1.0, 0.0,
            0.5)
    expected = numpy_kernels.evaluate_sparse_splits(*args)
    got = kernels.evaluate_sparse_splits(*args)
    _assert_same_splits(expected, got)
    assert np.all(got[0] == -np.inf) and np.all(got[1] == -1)


def test_evaluate_sparse_splits_no_features(kernels):
    # (The twin cannot take S = 0: evaluate_splits reads feature 0 for the node total.)
    hist = np.zeros((3, 0, 2), dtype=np.int64)
    gain, feature, threshold, default_left, left_sum = kernels.evaluate_sparse_splits(
        hist, np.zeros(1, np.int64), np.zeros(0, np.int32), np.zeros(0, bool), 1.0, 1.0, 1.0,
        0.0, 0.0)
    assert np.all(gain == -np.inf) and np.all(feature == -1) and np.all(threshold == 0)
    assert not default_left.any() and np.all(left_sum == 0) and gain.shape == (3,)


# ---------------------------------------------------------------------------------------------
# split_column

SPLIT_CASES = [  # n_rows, n_dense, n_sparse, n_bins, n_nodes
    (0, 2, 3, 16, 1), (1, 2, 3, 16, 1), (777, 3, 4, 2, 3), (3001, 2, 5, 256, 7),
    (777, 2, 3, 300, 5), (3001, 3, 4, 1000, 300), (30011, 4, 6, 64, 2), (1000, 0, 4, 16, 4),
    (1000, 3, 0, 16, 4),
]


@pytest.mark.parametrize("layout", ["copy", "view"])
@pytest.mark.parametrize("id_dtype", ID_DTYPES)
@pytest.mark.parametrize("n_rows,n_dense,n_sparse,n_bins,n_nodes", SPLIT_CASES)
def test_split_column(kernels, n_rows, n_dense, n_sparse, n_bins, n_nodes, id_dtype,
                      monkeypatch, layout):
    rng, sparse_bins, n_value_bins, s, _, row_index, start, count = _level(
        n_rows, n_sparse, n_bins, n_nodes, seed=17 + n_rows + n_bins, id_dtype=id_dtype)
    assert s["entry_feature"].dtype == id_dtype
    dtype = _dtypes.bin_dtype(n_bins)
    bins_by_feature = rng.integers(0, n_bins, size=(n_dense, n_rows)).astype(dtype)
    if layout == "view":  # the dense store's rows read by feature (no column copy)
        bins_by_feature = np.ascontiguousarray(bins_by_feature.T).T
    on_dense = rng.random(n_nodes) < 0.4 if n_sparse else np.ones(n_nodes, bool)
    if not n_dense:
        on_dense[:] = False
    dense_feature = np.where(on_dense, rng.integers(0, max(n_dense, 1), n_nodes), -1)
    sparse_feature = np.where(on_dense, -1, rng.integers(0, max(n_sparse, 1), n_nodes))
    listed = np.flatnonzero(rng.random(n_nodes) < 0.7) if n_nodes > 2 else np.arange(n_nodes)
    args = (bins_by_feature, s["indptr"], s["entry_feature"], s["entry_bin"], s["common_bin"],
            row_index, start[listed], count[listed], dense_feature[listed].astype(np.int32),
            sparse_feature[listed].astype(np.int32))
    poison = np.full(n_rows, 5, dtype)  # rows outside the listed segments keep it
    expected = numpy_kernels.split_column(*_with_int32_ids(args, 2), poison.copy())
    assert np.array_equal(numpy_kernels.split_column(*args, poison.copy()), expected)  # twin
    out = poison.copy()
    got = kernels.split_column(*args, out)
    assert got.dtype == dtype and np.array_equal(out, expected) and np.array_equal(got, expected)
    # with the entries indexed by feature: some features walked (all, some, none), the same bins
    columns = SparseColumns.of(SparseBins(s["indptr"], s["entry_feature"], s["entry_bin"]),
                               n_sparse, s["bin_offsets"])
    for walk_ratio in (0, 4, 10**9):
        monkeypatch.setattr(cpu_kernels, "_WALK_ENTRIES_PER_ROW", walk_ratio)
        out = poison.copy()
        kernels.split_column(*args, out, columns=columns)
        assert np.array_equal(out, expected) and (columns.marks == -1).all()
        if kernels is cpu_kernels and len(columns.col_bins):
            # the ratio is honoured: a walked feature's bins are read from the column index
            # (here made wrong), a searched one's from the rows' entries
            wrong = dataclasses.replace(columns, col_bins=columns.col_bins ^ np.array(
                1, columns.col_bins.dtype))
            out = poison.copy()
            kernels.split_column(*args, out, columns=wrong)
            # rows of the listed sparse-split nodes that hold an entry of their feature (a bin
            # other than its common one)
            with_entry = any((expected[row_index[start[k]:start[k] + count[k]]]
                              != s["common_bin"][sparse_feature[k]]).any()
                             for k in listed if dense_feature[k] < 0)
            changed = not np.array_equal(out, expected)
            if walk_ratio == 0:
                assert not changed
            elif walk_ratio == 10**9:
                assert changed == with_entry
    # each listed node's rows hold their bins of its split feature
    for k in listed:
        rows = row_index[start[k]:start[k] + count[k]]
        column = bins_by_feature[dense_feature[k]] if dense_feature[k] >= 0 \
            else sparse_bins[:, sparse_feature[k]]
        assert np.array_equal(expected[rows], column[rows])


@pytest.mark.gpu
def test_store_kernels_refuse_other_id_dtypes():
    """The CUDA wrappers pass the store's ids as they are (never widened: that would copy the
    whole store), so an id dtype without a compiled kernel is an error, not a silent copy."""
    from gbflow.backend import cuda_available
    if not cuda_available():
        pytest.skip("no CUDA GPU with CuPy on this machine")
    import cupy

    from gbflow.backend import cuda_kernels
    _, _, _, s, gh, row_index, start, count = _level(300, 4, 16, 2, seed=3)
    d = {k: cupy.asarray(v) if isinstance(v, np.ndarray) else v for k, v in s.items()}
    for wrong in (np.int64, np.uint16, np.int8):
        ids = d["entry_feature"].astype(wrong)
        with pytest.raises(TypeError, match="int16 or int32"):
            cuda_kernels.build_sparse_histograms(
                d["indptr"], ids, d["entry_bin"], s["bin_offsets"], cupy.asarray(gh),
                cupy.asarray(row_index), start, count, s["n_slots"])
        with pytest.raises(TypeError, match="int16 or int32"):
            cuda_kernels.split_column(
                cupy.zeros((0, 300), np.uint8), d["indptr"], ids, d["entry_bin"],
                s["common_bin"], cupy.asarray(row_index), start, count,
                np.full(2, -1, np.int32), np.zeros(2, np.int32), cupy.zeros(300, np.uint8))


# ---------------------------------------------------------------------------------------------
# predict_margins_csr

def _random_forest(rng, n_features, n_trees, n_groups):
    """Flat arrays of complete depth-3 trees (children of i at 2i+1, 2i+2), one after another."""
    parts = {k: [] for k in ("feature", "threshold", "default_left", "left", "right", "value")}
    roots, groups = [], []
    for t in range(max(n_trees, 1)):  # with n_trees = 0, one tree's nodes and no root
        base = 15 * t
        parts["feature"].append(np.concatenate([rng.integers(0, n_features, 7), np.full(8, -1)]))
        parts["threshold"].append(rng.normal(size=15).astype(np.float32))
        parts["default_left"].append(rng.random(15) < 0.5)
        parts["left"].append(np.concatenate([base + 2 * np.arange(7) + 1, np.full(8, -1)]))
        parts["right"].append(np.concatenate([base + 2 * np.arange(7) + 2, np.full(8, -1)]))
        parts["value"].append(rng.normal(size=15))
        roots.append(base)
        groups.append(t % n_groups)
    dtypes = dict(feature=np.int32, threshold=np.float32, default_left=bool, left=np.int32,
                  right=np.int32, value=np.float64)
    arrays = tuple(np.concatenate(parts[k]).astype(dtypes[k]) for k in dtypes)
    return arrays + (np.array(roots[:n_trees], np.int64), np.array(groups[:n_trees], np.int32))


def _random_csr(rng, n_rows, n_cols):
    """(indptr, indices, data, dense): about half the entries absent, some stored NaN, a few rows
    empty, some values exactly on cut-like points; dense has NaN where absent."""
    dense = rng.normal(size=(n_rows, n_cols)).astype(np.float32)
    stored = rng.random((n_rows, n_cols)) < 0.5
    stored[::7] = False  # rows with no entries
    dense[stored & (rng.random((n_rows, n_cols)) < 0.1)] = np.nan
    rows, cols = np.nonzero(stored)
    indptr = np.concatenate([[0], np.cumsum(stored.sum(axis=1))]).astype(np.int64)
    data = dense[rows, cols]
    dense[~stored] = np.nan
    return indptr, cols.astype(np.int32), data, dense


@pytest.mark.parametrize("n_rows,n_groups,n_trees", [(0, 1, 3), (1, 1, 3), (777, 1, 9),
                                                     (3001, 3, 9), (300, 2, 0)])
def test_predict_margins_csr(kernels, n_rows, n_groups, n_trees):
    rng = np.random.default_rng(n_rows + n_groups)
    forest = _random_forest(rng, 6, n_trees, n_groups)
    indptr, indices, data, dense = _random_csr(rng, n_rows, 6)
    if n_rows > 10 and n_trees:
        # values exactly on thresholds (they go right) in the stored entries of rows 1..9
        lo, hi = indptr[1], indptr[10]
        data[lo:hi] = rng.choice(forest[1], size=hi - lo)
        dense[np.repeat(np.arange(n_rows), np.diff(indptr)), indices] = data
    base = rng.normal(size=(n_rows, n_groups))
    expected = numpy_kernels.predict_margins_csr(indptr, indices, data, *forest, base.copy())
    out = base.copy()
    got = kernels.predict_margins_csr(indptr, indices, data, *forest, out)
    assert np.array_equal(out, expected) and np.array_equal(got, expected)
    # the same as prediction on the dense matrix with NaN in the absent places
    assert np.array_equal(expected, numpy_kernels.predict_margins(dense, *forest, base.copy()))


# ---------------------------------------------------------------------------------------------
# map_sides (categorical splits: each row's bin mapped through its node's side map)

@pytest.mark.parametrize("layout", ["copy", "view"])
@pytest.mark.parametrize("n_rows,n_features,n_bins,n_nodes", [
    (0, 2, 16, 1), (1, 1, 16, 1), (777, 3, 300, 3), (3001, 2, 5000, 7), (30011, 4, 64, 300)])
def test_map_sides(kernels, n_rows, n_features, n_bins, n_nodes, layout):
    rng = np.random.default_rng(n_rows + n_bins)
    dtype = _dtypes.bin_dtype(n_bins)
    bins_by_feature = rng.integers(0, n_bins, size=(n_features, n_rows)).astype(dtype)
    if layout == "view":
        bins_by_feature = np.ascontiguousarray(bins_by_feature.T).T
    row_index, start, count = random_segments(rng, n_rows, n_nodes)
    listed = np.flatnonzero(rng.random(n_nodes) < 0.7) if n_nodes > 2 else np.arange(n_nodes)
    side_map = rng.integers(0, 3, size=(len(listed), n_bins)).astype(np.uint8)
    ids = rng.integers(0, n_features, len(listed)).astype(np.int32)
    args = (bins_by_feature, row_index, start[listed], count[listed], ids, side_map)
    poison = np.full(n_rows, 7, dtype)  # rows outside the listed segments keep it
    expected = numpy_kernels.map_sides(*args, poison.copy())
    for j, k in enumerate(listed):  # the twin against its definition, row by row
        for row in row_index[start[k]:start[k] + count[k]][:50]:
            assert expected[row] == side_map[j, bins_by_feature[ids[j], row]]
    out = poison.copy()
    got = kernels.map_sides(*args, out)
    assert got is out and got.dtype == dtype and np.array_equal(out, expected)


@pytest.mark.parametrize("n_rows,n_features,n_bins,n_nodes", EVAL_CASES[:6])
@pytest.mark.parametrize("max_delta_step", [0.0, 0.5])
def test_evaluate_sparse_splits_with_weight_bounds(kernels, n_rows, n_features, n_bins, n_nodes,
                                                   max_delta_step):
    """max_delta_step and monotone constraints on the compact histograms: the twin's result."""
    from test_kernels import random_bounds
    rng, _, n_value_bins, s, gh, row_index, start, count = _level(
        n_rows, n_features, n_bins, n_nodes, seed=n_nodes * n_bins + n_features + 1)
    gh[:, 1] = rng.integers(1, 2**20, size=n_rows)
    hist = _histograms(s, gh, row_index, start, count)
    args = (hist, s["bin_offsets"], n_value_bins, rng.random(n_features) < 0.9, 2.0**-30,
            2.0**-20, 1.0, 0.5, 0.0)
    bounds = random_bounds(rng, n_nodes, n_features, max_delta_step)
    _assert_same_splits(numpy_kernels.evaluate_sparse_splits(*args, bounds=bounds),
                        kernels.evaluate_sparse_splits(*args, bounds=bounds))
