"""The quantile sketch: exact weighted quantiles, independent of row order and partitioning."""
from __future__ import annotations

import numpy as np
import pytest

from gbflow import sketch
from gbflow.sketch import direct


@pytest.fixture(autouse=True, params=["passes", "direct"])
def cut_method(request, monkeypatch):
    """Every test twice: through the three passes, and with one process's data small enough for
    ``direct_cuts`` (the default below ``DIRECT_VALUES``). Both must give the same cuts."""
    monkeypatch.setattr(direct, "DIRECT_VALUES", 0 if request.param == "passes" else 1 << 40)
    return request.param


def _reference_cuts(column, weight, max_bin):
    """Cuts by the definition: sort, then the value holding each target rank starts a bin."""
    present = ~np.isnan(column)
    w = np.ones(present.sum(), np.int64) if weight is None else weight[present]
    v = column[present]
    order = np.argsort(v, kind="stable")
    v, w = v[order], w[order]
    distinct = np.unique(v)
    if len(distinct) == 0:
        return distinct
    if len(distinct) <= max_bin - 1:
        return distinct[1:]
    cumulative = np.cumsum(w)
    total = int(cumulative[-1])
    ranks = [total * i // (max_bin - 1) + 1 for i in range(1, max_bin - 1)]
    values = np.unique(v[np.searchsorted(cumulative, ranks)])
    return values[values > v[0]]


@pytest.mark.parametrize("max_bin", [2, 3, 16, 256])
def test_cuts_are_exact_quantiles(max_bin):
    rng = np.random.default_rng(max_bin)
    X = np.stack([rng.normal(size=5000), rng.exponential(size=5000) * 1e4,
                  rng.integers(0, 5, 5000), 1000 + rng.random(5000) * 1e-3,
                  np.where(rng.random(5000) < 0.3, np.nan, rng.normal(size=5000))], axis=1)
    X = X.astype(np.float32)
    cuts = sketch.compute_cuts(np, [X], None, max_bin)
    for f in range(X.shape[1]):
        assert np.array_equal(cuts.feature_cuts(f), _reference_cuts(X[:, f], None, max_bin)), f
    assert cuts.n_value_bins.max() <= max_bin - 1


def test_weighted_cuts_match_integer_replication():
    """Integer weights act like repeated rows."""
    rng = np.random.default_rng(1)
    X = rng.normal(size=(3000, 2)).astype(np.float32)
    w = rng.integers(0, 4, size=3000).astype(np.float64)
    weighted = sketch.compute_cuts(np, [X], [w], 64)
    repeated = sketch.compute_cuts(np, [np.repeat(X, w.astype(int), axis=0)], None, 64)
    assert np.array_equal(weighted.values, repeated.values)
    assert np.array_equal(weighted.offsets, repeated.offsets)


def test_cuts_do_not_depend_on_row_order_or_partitioning():
    rng = np.random.default_rng(2)
    X = rng.standard_t(3, size=(20000, 4)).astype(np.float32)
    X[rng.random(X.shape) < 0.1] = np.nan
    w = rng.random(20000)
    base = sketch.compute_cuts(np, [X], [w], 256)
    perm = rng.permutation(len(X))
    shuffled = sketch.compute_cuts(np, [X[perm]], [w[perm]], 256)
    split = np.array_split(np.arange(len(X)), 7)
    parts = sketch.compute_cuts(np, [X[i] for i in split], [w[i] for i in split], 256)
    for other in (shuffled, parts):
        assert np.array_equal(base.values, other.values)
        assert np.array_equal(base.offsets, other.offsets)


def test_keys_round_trip_and_order():
    values = np.array([-np.inf, -3.5, -1e-30, -0.0, 0.0, 1e-30, 2.0, 7e30, np.inf], np.float32)
    keys = sketch.ordered_keys(np, values[None, :])[0]
    assert np.all(np.diff(keys.astype(np.int64)) >= 0)
    assert keys[3] == keys[4]  # -0.0 and +0.0 are the same value
    back = sketch.keys_to_values(keys)
    assert np.array_equal(back[[0, 1, 2, 4, 5, 6, 7, 8]], values[[0, 1, 2, 4, 5, 6, 7, 8]])


def test_all_missing_and_constant_columns():
    X = np.stack([np.full(100, np.nan), np.full(100, 3.0)], axis=1).astype(np.float32)
    cuts = sketch.compute_cuts(np, [X], None, 256)
    assert cuts.feature_cuts(0).size == 0 and cuts.feature_cuts(1).size == 0
    assert list(cuts.n_value_bins) == [1, 1]


def _csr(dense):
    """A gbflow CSR of ``dense`` where NaN entries are absent (host arrays)."""
    from gbflow.csr import CSR
    rows, cols = np.nonzero(~np.isnan(dense))
    indptr = np.concatenate([[0], np.cumsum(np.bincount(rows, minlength=dense.shape[0]))])
    return CSR(indptr=indptr.astype(np.int64), indices=cols.astype(np.int32),
               data=dense[rows, cols].astype(np.float32), n_cols=dense.shape[1])


def _same(a, b):
    return np.array_equal(a.values, b.values) and np.array_equal(a.offsets, b.offsets)


def _sparse_matrix(rng, n_rows, n_cols, density):
    """Dense float32 with NaN where absent: mixed columns (continuous, few values, zeros)."""
    X = np.full((n_rows, n_cols), np.nan, dtype=np.float32)
    mask = rng.random((n_rows, n_cols)) < density
    values = np.where(rng.random((n_rows, n_cols)) < 0.5, rng.normal(size=(n_rows, n_cols)),
                      rng.integers(-3, 4, size=(n_rows, n_cols)))
    X[mask] = values[mask]
    return X


@pytest.mark.parametrize("block_values", [sketch.BLOCK_VALUES, 1000])
def test_csr_cuts_equal_dense_cuts(block_values):
    """Absent entries and stored NaN are missing, stored 0.0 is a value; weights per row; parts
    mixing CSR and dense; a column with no entries. Small blocks take the sorted tallies."""
    rng = np.random.default_rng(7)
    X = _sparse_matrix(rng, 3000, 40, 0.2)
    X[:, 5] = np.nan  # no entries at all
    X[rng.random(3000) < 0.3, 6] = 0.0  # stored zeros
    csr = _csr(X)
    stored_nan = rng.random(csr.nnz) < 0.05  # stored NaN: missing, like absent
    csr.data[stored_nan] = np.nan
    X = csr.to_dense(np)
    w = rng.random(3000) * 3
    for weights in (None, [w]):
        dense = sketch.compute_cuts(np, [X], weights, 64, block_values=block_values)
        sparse = sketch.compute_cuts(np, [csr], weights, 64, block_values=block_values)
        assert _same(dense, sparse)
        assert dense.feature_cuts(5).size == 0
        assert 0.0 in dense.feature_cuts(6)
    split = [0, 700, 701, 1900, 3000]
    parts = [csr.rows(a, b) if i % 2 else X[a:b] for i, (a, b) in enumerate(zip(split, split[1:]))]
    mixed = sketch.compute_cuts(np, parts, [w[a:b] for a, b in zip(split, split[1:])], 64,
                                block_values=block_values)
    assert _same(mixed, sketch.compute_cuts(np, [X], [w], 64, block_values=block_values))


def test_wide_mixed_columns_match_the_reference():
    rng = np.random.default_rng(8)
    X = _sparse_matrix(rng, 2000, 3000, 0.5)  # rows enough for every column kind's quantiles
    X[:, ::7] = rng.normal(size=(2000, len(range(0, 3000, 7))))  # dense continuous columns
    X[:, 3::11] = rng.integers(0, 400, size=(2000, len(range(3, 3000, 11))))
    X[:, 10] = np.nan
    cuts = sketch.compute_cuts(np, [X], None, 256)
    for f in range(X.shape[1]):
        assert np.array_equal(cuts.feature_cuts(f), _reference_cuts(X[:, f], None, 256)), f
    assert _same(cuts, sketch.compute_cuts(np, [_csr(X)], None, 256))


@pytest.mark.parametrize("block_values", [sketch.BLOCK_VALUES, 5000])
def test_partitions_and_table_choice_do_not_change_cuts(block_values):
    """Dense tables and sorted tallies, one part or many, CSR or dense: the same integers."""
    rng = np.random.default_rng(9)
    X = _sparse_matrix(rng, 20000, 12, 0.7)
    X[:, 0] = rng.standard_t(2, size=20000)
    w = rng.random(20000)
    base = sketch.compute_cuts(np, [X], [w], 256)
    split = np.array_split(rng.permutation(20000), 5)
    parts = [_csr(X[i]) if k % 2 else X[i] for k, i in enumerate(split)]
    other = sketch.compute_cuts(np, parts, [w[i] for i in split], 256, block_values=block_values)
    assert _same(base, other)


@pytest.mark.parametrize("weighted", [False, True])
def test_dense_tables_and_sorted_ids_give_the_same_summaries(monkeypatch, weighted):
    """Each pass tallies a group of features into a dense table or by sorting its ids
    (``_Group.dense_table``, by sizes): forced one way and then the other, every pass's
    summary and the cuts are the same integers, on a wide frame of every column kind with
    infinities, NaN payloads, -0.0, an empty and a constant column, dense and CSR."""
    from gbflow.sketch import blocks
    rng = np.random.default_rng(12)
    X = _sparse_matrix(rng, 1500, 400, 0.6)
    X[:, ::9] = rng.normal(size=(1500, len(range(0, 400, 9))))
    X[:5, 1] = [np.inf, -np.inf, -0.0, 0.0, np.float32(1e-40)]
    X[:, 2] = np.nan
    X[:, 3] = 7.0
    payloads = np.array([0x7F800001, 0xFF800001, 0x7FC0FFFF], dtype=np.uint32).view(np.float32)
    X[5:8, 4] = payloads
    w = rng.integers(0, 4, 1500).astype(np.float64) if weighted else None
    results = []
    for dense in (True, False):
        monkeypatch.setattr(blocks._Group, "dense_table", lambda self, size, d=dense: d)
        for data in ([X], [_csr(X)]):
            cuts = sketch.compute_cuts(np, data, None if w is None else [w], 64,
                                       block_values=50_000)
            results.append(cuts)
    for other in results[1:]:
        assert _same(results[0], other)
    assert len(results[0].feature_cuts(2)) == 0 and len(results[0].feature_cuts(3)) == 0
    assert all(len(results[0].feature_cuts(f)) >= 60 for f in range(9, 400, 9))  # quantiles


class _ThreadCollective:
    """One simulated process of several, each in its own thread: every call waits for all of
    them, and answers from their values in process order."""

    def __init__(self, rank, slots, barrier):
        self.rank, self.slots, self.barrier = rank, slots, barrier
        self.size = len(slots)

    def _exchange(self, value):
        self.slots[self.rank] = value
        self.barrier.wait()
        values = list(self.slots)
        self.barrier.wait()
        return values

    def allreduce_sum(self, array):
        return sum(self._exchange(array))

    def allreduce_max(self, value):
        return max(self._exchange(value))

    def allgather(self, value):
        return self._exchange(value)


def _cuts_in_processes(process_parts, process_weights, max_bin):
    import threading
    barrier, slots = threading.Barrier(len(process_parts)), [None] * len(process_parts)
    results = [None] * len(process_parts)

    def work(rank):
        try:
            results[rank] = sketch.compute_cuts(
                np, process_parts[rank], process_weights[rank], max_bin,
                collective=_ThreadCollective(rank, slots, barrier))
        except BaseException as error:  # noqa: BLE001 - reported by the test
            barrier.abort()
            results[rank] = error

    threads = [threading.Thread(target=work, args=(r,)) for r in range(len(process_parts))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return results


def test_processes_merge_exactly():
    """Three processes (one with no rows): each gets the cuts of all the rows, in any order."""
    rng = np.random.default_rng(10)
    X = _sparse_matrix(rng, 6000, 9, 0.6)
    w = rng.random(6000)
    expected = sketch.compute_cuts(np, [X], [w], 32)
    parts = [[X[:2500], _csr(X[2500:4000])], [X[:0]], [_csr(X[4000:])]]
    weights = [[w[:2500], w[2500:4000]], [w[:0]], [w[4000:]]]
    for order in ([0, 1, 2], [2, 1, 0]):
        for cuts in _cuts_in_processes([parts[i] for i in order], [weights[i] for i in order], 32):
            assert not isinstance(cuts, BaseException), cuts
            assert _same(cuts, expected)


@pytest.mark.parametrize("use_table", [True, False])
def test_processes_sum_the_middle_table_or_merge_its_summaries_alike(monkeypatch, use_table):
    """Pass 2 across processes: summing the dense table (the default while it fits) and
    gathering and merging sparse summaries (wider data) give the cuts of all the rows."""
    rng = np.random.default_rng(12)
    X = _sparse_matrix(rng, 8000, 7, 0.7)
    X[:, 0] = rng.normal(size=8000)
    w = rng.random(8000)
    expected = sketch.compute_cuts(np, [X], [w], 64)
    tables = []
    real_add = sketch.MiddleTable.add

    def add(table, *args):
        tables.append(table)
        real_add(table, *args)
    monkeypatch.setattr(sketch.MiddleTable, "add", add)
    if not use_table:
        monkeypatch.setattr(sketch.passes, "MIDDLE_TABLE_ENTRIES", 0)
    parts = [[X[:3000], _csr(X[3000:5000])], [X[:0]], [X[5000:]]]
    weights = [[w[:3000], w[3000:5000]], [w[:0]], [w[5000:]]]
    for cuts in _cuts_in_processes(parts, weights, 64):
        assert not isinstance(cuts, BaseException), cuts
        assert _same(cuts, expected)
    assert len(tables) == (4 if use_table else 0)  # one add per part


@pytest.mark.parametrize("block_values", [sketch.BLOCK_VALUES, 5000])
def test_middle_table_equals_the_merged_sparse_summaries(device, block_values):
    """Pass 2 through one dense table that every part adds into gives the merge of the parts'
    sparse summaries, id for id and weight for weight: at every slot resolution (masks keeping
    0 to 8 bits), through both tallies (dense per-group tables with the default blocks, sorted
    ids with small ones), with missing values, weights, and (on the CPU) a CSR part."""
    xp = np if device == "cpu" else pytest.importorskip("cupy")
    rng = np.random.default_rng(21)
    n = 60000
    X = np.stack([rng.normal(size=n), 1.0 + rng.random(n) * 1e-5, rng.integers(-3, 4, n),
                  rng.standard_cauchy(n)], axis=1).astype(np.float32)
    X[rng.random(X.shape) < 0.1] = np.nan
    w = np.rint(rng.random(n) * 1000.0)
    split = np.array_split(rng.permutation(n), 4)
    parts = [xp.asarray(X[i]) for i in split]
    if device == "cpu":
        parts[1] = _csr(X[split[1]])
    weights = [xp.asarray(w[i]) for i in split]
    coarse = sketch.merge([sketch.coarse_summary(xp, p, q, block_values)
                           for p, q in zip(parts, weights)])
    slots = sketch.bucket_slots(sketch.candidate_buckets(coarse, 255), coarse, n)
    resolutions = set(slots.dropped_bits.tolist())
    assert {0, 8} < resolutions, resolutions  # full, single and in-between sub-buckets
    expected = sketch.merge([sketch.middle_summary(xp, p, q, slots, block_values)
                             for p, q in zip(parts, weights)])
    table = sketch.MiddleTable(xp, slots, X.shape[1])
    for p, q in zip(parts, weights):
        table.add(p, q, block_values)
    merged = table.summary()
    assert len(expected.ids) > 1000 and merged.shift == expected.shift == sketch.MIDDLE_SHIFT
    assert np.array_equal(merged.ids, expected.ids)
    assert np.array_equal(merged.weight, expected.weight)


def test_large_fixed_point_totals_stay_exact():
    """Fixed-point totals near 2**52 with i up to 8,190 (total * i passes int64), and a sum over
    6,000 such features that passes 2**64 (the sorted tallies' running sums wrap)."""
    rng = np.random.default_rng(11)
    X = rng.normal(size=(20000, 3)).astype(np.float32)
    w = rng.integers(1, 5, size=20000).astype(np.float64)
    weighted = sketch.compute_cuts(np, [X], [w], 8192)
    repeated = sketch.compute_cuts(np, [np.repeat(X, w.astype(int), axis=0)], None, 8192)
    assert _same(weighted, repeated) and weighted.n_value_bins.max() > 4000
    X = rng.normal(size=(3000, 6000)).astype(np.float32)
    w = rng.integers(3, 5, size=3000).astype(np.float64)
    wide = sketch.compute_cuts(np, [X], [w], 64)
    narrow = sketch.compute_cuts(np, [X[:, :5]], [w], 64)
    assert np.array_equal(wide.values[: wide.offsets[5]], narrow.values)
    assert np.array_equal(wide.offsets[:6], narrow.offsets)


def test_zero_weights_act_like_absent_rows():
    X = np.array([[1.0], [1.5], [2.0], [3.0]], np.float32)
    w = np.array([1.0, 0.0, 1.0, 1.0])
    assert list(sketch.compute_cuts(np, [X], [w], 256).feature_cuts(0)) == [2.0, 3.0]


@pytest.mark.parametrize("block_values", [sketch.BLOCK_VALUES, 3000])
def test_infinities_and_nan_payloads(block_values):
    """NaNs of any bit pattern are missing, also those whose key shares infinity's bucket."""
    rng = np.random.default_rng(12)
    n = 20000
    X = np.stack([rng.normal(size=n), rng.integers(0, 5, n).astype(float),
                  rng.normal(size=n)], axis=1).astype(np.float32)
    X[rng.random(n) < 0.3, 0] = np.inf
    X[rng.random(n) < 0.2, 0] = -np.inf
    X[rng.random(n) < 0.2, 1] = np.inf
    X[:, 2] = np.where(rng.random(n) < 0.5, -np.inf, X[:, 2])
    bits = X.view(np.uint32)
    odd_nans = np.array([0x7F800001, 0xFF800001, 0x7FC00000, 0xFFFFFFFF], np.uint32)
    for f in range(3):
        rows = rng.random(n) < 0.1
        bits[rows, f] = odd_nans[rng.integers(0, 4, rows.sum())]
    assert np.isnan(X).any(axis=0).all()
    with np.errstate(invalid="ignore"):  # signalling NaNs, quieted by the key's addition
        _check_infinities(X, block_values)


def _check_infinities(X, block_values):
    for max_bin in (4, 256):
        cuts = sketch.compute_cuts(np, [X], None, max_bin, block_values=block_values)
        for f in range(3):
            assert np.array_equal(cuts.feature_cuts(f), _reference_cuts(X[:, f], None, max_bin)), f
        assert _same(cuts, sketch.compute_cuts(np, [_csr(X)], None, max_bin,
                                               block_values=block_values))


def test_segment_searches_match_the_single_search(monkeypatch):
    """Ranks are found by one search in a summary's running sums while they cannot wrap, else by a
    binary search per feature, bucket and sub-bucket: both give the same cuts (mixed columns,
    weights, coarser sub-buckets, few-valued features, empty and missing columns)."""
    rng = np.random.default_rng(13)
    X = _sparse_matrix(rng, 6000, 30, 0.6)
    X[:, 0] = rng.standard_t(2, size=6000)
    X[:, 1] = rng.integers(0, 300, 6000)
    X[:, 2] = np.nan
    w = rng.random(6000) * 5
    cases = [(X, None, 256), (X, [w], 256), (X, [w], 16), (X, None, 2)]
    expected = [sketch.compute_cuts(np, [x], weights, b) for x, weights, b in cases]
    monkeypatch.setattr(sketch.summary, "ONE_SEARCH_LIMIT", 0.0)
    for (x, weights, b), cuts in zip(cases, expected):
        assert _same(cuts, sketch.compute_cuts(np, [x], weights, b))
        if weights is None:
            for f in range(x.shape[1]):
                assert np.array_equal(cuts.feature_cuts(f), _reference_cuts(x[:, f], None, b)), f


def test_csr_blocks_are_capped(monkeypatch):
    """A CSR is read in blocks of at most ``CSR_BLOCK_ENTRIES`` entries whatever block_values
    says (bounded temporaries): the same cuts as the dense matrix, weighted or not."""
    rng = np.random.default_rng(14)
    X = _sparse_matrix(rng, 4000, 50, 0.3)
    X[:, 0] = rng.normal(size=4000)
    w = rng.random(4000)
    monkeypatch.setattr(sketch.blocks, "CSR_BLOCK_ENTRIES", 700)
    for weights in (None, [w]):
        assert _same(sketch.compute_cuts(np, [X], weights, 64),
                     sketch.compute_cuts(np, [_csr(X)], weights, 64))


def test_compute_cuts_refuses_other_than_float32():
    """The sketch orders float32 bit patterns: float64 input must not reach it."""
    X = np.random.default_rng(0).normal(size=(50, 3))
    with pytest.raises(TypeError, match="float32 values, got float64"):
        sketch.compute_cuts(np, [X], None, 16)
    assert sketch.compute_cuts(np, [X.astype(np.float32)], None, 16).n_features == 3


@pytest.mark.parametrize("weighted", [False, True])
def test_direct_cuts_equal_the_passes(monkeypatch, cut_method, weighted):
    """One sort of every value and the three passes: the same cuts, value for value, on
    continuous, few-valued, one-hot CSR, infinite and mostly missing columns, in several parts;
    the direct way taken only at or below ``DIRECT_VALUES``."""
    if cut_method == "passes":
        pytest.skip("compares both ways itself")
    rng = np.random.default_rng(31)
    n = 9000
    X = np.stack([rng.normal(size=n), rng.integers(0, 7, n), np.full(n, np.inf),
                  rng.standard_cauchy(n), np.where(rng.random(n) < 0.97, np.nan, 1.0)],
                 axis=1).astype(np.float32)
    X[rng.random(X.shape) < 0.05] = -0.0
    X[:, 2][rng.random(n) < 0.5] = -np.inf
    hot = np.zeros((n, 40), np.float32) * np.nan
    hot[np.arange(n), rng.integers(0, 40, n)] = 1.0
    X = np.concatenate([X, hot], axis=1)
    w = rng.random(n) * (rng.random(n) < 0.9) if weighted else None  # some zero weights
    split = np.array_split(rng.permutation(n), 3)
    parts = [X[split[0]], _csr(X[split[1]]), X[split[2]]]
    weights = None if w is None else [w[i] for i in split]
    size = direct.n_values(parts)
    assert size == 2 * (n // 3) * X.shape[1] + np.count_nonzero(~np.isnan(X[split[1]]))
    calls = []
    real = direct.direct_cuts
    monkeypatch.setattr(sketch.compute, "direct_cuts",
                        lambda *a: calls.append(1) or real(*a))
    for max_bin in (2, 5, 256):
        monkeypatch.setattr(direct, "DIRECT_VALUES", size)  # at the bound: direct
        got = sketch.compute_cuts(np, parts, weights, max_bin)
        assert len(calls) == 1
        monkeypatch.setattr(direct, "DIRECT_VALUES", size - 1)  # one over: the passes
        expected = sketch.compute_cuts(np, parts, weights, max_bin)
        assert len(calls) == 1
        calls.clear()
        assert _same(got, expected), max_bin
        assert got.n_value_bins.max() <= max_bin - 1


def test_ordered_keys_of_subnormal_values_are_their_own(device):
    """The keys come from the bit patterns alone: subnormal values keep their order on the GPU
    too (whose kernels flush subnormals to zero in float arithmetic), -0.0 is +0.0, and the
    input is not written."""
    xp = np if device == "cpu" else pytest.importorskip("cupy")
    values = np.float32([-1.0, -1e-40, -1e-45, -0.0, 0.0, 1e-45, 1e-40, 1.0])
    X = xp.asarray(np.stack([values, values[::-1]], axis=1))[:, :1]  # a strided view
    keys = np.asarray(sketch.ordered_keys(xp, X) if xp is np else
                      sketch.ordered_keys(xp, X).get()).reshape(-1)
    assert np.array_equal(np.asarray(X if xp is np else X.get()).reshape(-1).view(np.uint32),
                          values.view(np.uint32))
    assert keys[3] == keys[4] == 2**31
    assert np.all(np.diff(np.delete(keys, 3).astype(np.int64)) > 0)
