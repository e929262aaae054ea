"""Sparse routing and sparse input: routing never changes the model, CSR equals dense-with-NaN."""
from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
import scipy.sparse as sp
from conftest import label_from_signal

import gbflow
from gbflow import _dtypes, binning, boosting, inputs, routing, sketch
from gbflow import cuts as cuts_mod
from gbflow.backend import get_backend, reference_kernels
from gbflow.params import make_params

PARAMS = {
    "regression": {"objective": "reg:squarederror", "max_depth": 5},
    "binary": {"objective": "binary:logistic", "max_depth": 4},
    "multiclass": {"objective": "multi:softprob", "num_class": 3, "max_depth": 3},
}


def make_mixed(n_rows=2000, task="regression", seed=0) -> pd.DataFrame:
    """Dense, mostly-missing, mostly-zero, mostly-one-value (with NaN), constant, all-missing and
    one-hot-like columns, with a target that uses several of them."""
    rng = np.random.default_rng(seed)
    n = n_rows
    cols = {
        "dense": rng.normal(size=n),
        "mostly_missing": np.where(rng.random(n) < 0.9, np.nan, rng.normal(size=n)),
        "mostly_zero": np.where(rng.random(n) < 0.85, 0.0, rng.exponential(size=n)),
        "mostly_seven": np.where(rng.random(n) < 0.9, 7.0,
                                 np.where(rng.random(n) < 0.5, np.nan, rng.normal(size=n))),
        "constant": np.full(n, 3.0),
        "all_missing": np.full(n, np.nan),
        "low_card": rng.integers(0, 4, n).astype(float),
    }
    category = rng.integers(0, 12, n)
    for k in range(12):  # one-hot: 1 where the row is in category k, missing elsewhere
        cols[f"hot{k}"] = np.where(category == k, 1.0, np.nan)
    df = pd.DataFrame(cols).astype(np.float32)
    signal = (df["dense"] + np.nan_to_num(df["mostly_missing"], nan=-1.0) + df["mostly_zero"]
              + 0.8 * (category % 3 == 0) - 0.5 * df["mostly_seven"].isna()).to_numpy()
    df["y"] = label_from_signal(rng, signal, task, noise=0.2, class_noise=0.3, edges=(-0.5, 1.0))
    return df


def _model(booster) -> dict:
    """The model file as a dict, without the routing parameter (which must not matter)."""
    d = json.loads(booster.to_json())
    d["params"].pop("sparse_threshold")
    return d


def _train(data, label, threshold, device="cpu", rounds=6, params=None, **kw):
    params = {**(params or PARAMS["regression"]), "device": device,
              "sparse_threshold": threshold}
    return gbflow.train(data, label=label, params=params, num_boost_round=rounds, verbose=False,
                        **kw)


def _routing_of(df: pd.DataFrame, threshold: float) -> routing.Routing:
    dataset = inputs.load(df, "y")
    backend = get_backend("cpu")
    cuts = sketch.compute_cuts(np, [dataset.X], None, 256)
    part = binning.bin_part(backend, dataset.X, cuts)
    return routing.decide(binning.bin_counts(backend, part, cuts), cuts, threshold)


def test_routing_follows_the_most_common_bins_share():
    df = make_mixed(n_rows=1000)
    names = [c for c in df.columns if c != "y"]
    route = _routing_of(df, 0.8)
    sparse = {names[j] for j in route.sparse}
    # The first three fall in their common bin in nearly every row (mostly-zero: 85% +- 1%).
    assert {"mostly_missing", "mostly_seven", "constant", "all_missing"} <= sparse
    assert {f"hot{k}" for k in range(12)} <= sparse
    assert "mostly_zero" in sparse and "dense" not in sparse and "low_card" not in sparse
    common = dict(zip((names[j] for j in route.sparse), route.common_bin))
    assert common["mostly_missing"] == 0 and common["hot3"] == 0  # the missing bin
    assert common["mostly_seven"] != 0 and common["mostly_zero"] != 0  # a value bin
    assert len(route.dense) + len(route.sparse) == len(names)
    assert not _routing_of(df, 1.0).has_sparse
    assert len(_routing_of(df, 0.0).dense) == 0  # every feature has a most common bin


@pytest.mark.parametrize("task", list(PARAMS))
def test_routing_never_changes_the_model(task, device):
    """Routing off (1.0), the default (0.8) and everything sparse (0.0) give identical trees
    (splits, thresholds, default directions, leaf values) and identical predictions."""
    df = make_mixed(task=task, seed=3)
    df["w"] = np.linspace(0.5, 2.0, len(df))
    params = {**PARAMS[task], "subsample": 0.8, "colsample_bytree": 0.7, "reg_alpha": 0.1}
    models = [_train(df, "y", t, device, params=params, weight="w") for t in (1.0, 0.8, 0.0)]
    assert sum(not t.is_leaf.all() for t in models[0].trees) > 3  # the trees do split
    expected = _model(models[0])
    reference = models[0].predict(df)
    for booster in models[1:]:
        assert _model(booster) == expected
        assert np.array_equal(booster.predict(df), reference)


def test_routing_with_the_numpy_twins_equals_routing_off():
    """The same property with the plain NumPy kernels (the definitions)."""
    df = make_mixed(n_rows=300, seed=5)
    with reference_kernels():
        off = _train(df, "y", 1.0, rounds=3)
        routed = _train(df, "y", 0.8, rounds=3)
    assert _model(routed) == _model(off)


def test_routed_training_on_many_shards_equals_one_shard():
    df = make_mixed(n_rows=1500, seed=7)
    params = make_params({**PARAMS["regression"], "sparse_threshold": 0.8})
    backend = get_backend("cpu")
    whole = boosting.fit(backend, [inputs.load(df, "y")], params, 5, verbose=False)
    bounds = [0, 1, 400, 400, 1100, 1500]  # a one-row and an empty shard
    parts = [inputs.load(df.iloc[a:b], "y", allow_empty=True)
             for a, b in zip(bounds[:-1], bounds[1:])]
    many = boosting.fit(backend, parts, params, 5, verbose=False)
    assert many.to_json() == whole.to_json()


def _csr_pair(n_rows=1500, n_cols=40, seed=0):
    """A CSR matrix (with explicit zeros and a stored NaN) and the equal dense matrix with NaN in
    the absent places, plus a target."""
    rng = np.random.default_rng(seed)
    m = sp.random(n_rows, n_cols, density=0.08, format="csr", random_state=seed,
                  dtype=np.float32)
    m.data[::9] = 0.0  # stored zeros are values, not missing
    m.data[5] = np.nan  # a stored NaN is missing
    dense_column = sp.csr_matrix(rng.normal(size=(n_rows, 1)).astype(np.float32))
    m = sp.hstack([m[:, :3], dense_column, m[:, 4:]], format="csr")  # column 3 is dense
    coo = m.tocoo()
    dense = np.full(m.shape, np.nan, dtype=np.float32)
    dense[coo.row, coo.col] = coo.data
    y = np.nan_to_num(dense[:, :6]).sum(axis=1) + (~np.isnan(dense[:, 7])) \
        + 0.1 * rng.normal(size=n_rows)
    return m, dense, y


def _on_device(matrix, device):
    if device != "cuda":
        return matrix
    import cupy
    import cupyx.scipy.sparse as cusp
    return cusp.csr_matrix(matrix) if sp.issparse(matrix) else cupy.asarray(matrix)


def _host(values):
    return values.get() if hasattr(values, "get") else np.asarray(values)


@pytest.mark.parametrize("threshold", [1.0, 0.8])
def test_csr_and_dense_with_nan_give_the_same_model(threshold, device):
    m, dense, y = _csr_pair()
    from_csr = _train(_on_device(m, device), y, threshold, device)
    from_dense = _train(_on_device(dense, device), y, threshold, device)
    assert from_csr.to_json() == from_dense.to_json()
    predictions = _host(from_csr.predict(_on_device(m, device)))
    assert np.array_equal(predictions, _host(from_dense.predict(_on_device(dense, device))))
    assert np.array_equal(predictions, _host(from_csr.predict(dense)))


def test_csr_weights_evals_and_other_sparse_formats():
    m, dense, y = _csr_pair(seed=2)
    w = np.linspace(0.1, 1.0, len(y))
    evals_csr = [((m[:300], y[:300]), "valid")]
    evals_dense = [((dense[:300], y[:300]), "valid")]
    a = _train(m, y, 0.8, weight=w, evals=evals_csr)
    b = _train(dense, y, 0.8, weight=w, evals=evals_dense)
    assert a.to_json() == b.to_json() and a.evals_result == b.evals_result
    assert _train(m.tocsc(), y, 0.8, weight=w, evals=evals_csr).to_json() == a.to_json()
    coo = m.tocoo()  # duplicates are summed, as scipy defines them
    doubled = sp.coo_matrix((np.concatenate([coo.data / 2, coo.data / 2]),
                             (np.concatenate([coo.row, coo.row]),
                              np.concatenate([coo.col, coo.col]))), shape=m.shape)
    assert np.array_equal(a.predict(doubled), a.predict(m))


def test_sparse_input_errors():
    m, _, y = _csr_pair(n_rows=200)
    booster = _train(m, y, 0.8, rounds=2)
    with pytest.raises(TypeError, match="sparse matrix use predict"):
        booster.transform(m)
    bad = m.copy()
    bad.data[bad.indices == 4] = np.inf
    with pytest.raises(ValueError, match="infinite values .* 'f4'"):
        _train(bad, y, 0.8)
    with pytest.raises(ValueError, match="50 columns but the model was trained on 40"):
        booster.predict(sp.random(5, 50, format="csr"))  # (a narrower one: missing columns)
    with pytest.raises(ValueError, match="label has 10 values"):
        _train(m, y[:10], 0.8)


def test_routing_on_dask_workers_equals_routing_off_in_process():
    distributed = pytest.importorskip("distributed")
    import dask
    import dask.dataframe as dd

    import gbflow.dask
    df = make_mixed(n_rows=1200, seed=11)
    parts = [df.iloc[a:b] for a, b in [(0, 500), (500, 501), (501, 1200)]]
    frame = dd.from_delayed([dask.delayed(p.copy)() for p in parts], meta=parts[0].iloc[:0],
                            verify_meta=False)
    expected = _model(_train(df, "y", 1.0))
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=False,
                                  dashboard_address=":0") as cluster, \
            distributed.Client(cluster, set_as_default=False) as client:
        booster = gbflow.train(frame, label="y", params={**PARAMS["regression"],
                                                              "sparse_threshold": 0.8},
                               num_boost_round=6, verbose=False, client=client)
    assert _model(booster) == expected


def test_sklearn_estimators_take_sparse_matrices():
    pytest.importorskip("sklearn")
    from gbflow import GBFlowClassifier
    m, dense, y = _csr_pair(n_rows=600, seed=4)
    labels = (y > np.median(y)).astype(int)
    from_csr = GBFlowClassifier(n_estimators=5, max_depth=3).fit(m, labels)
    from_dense = GBFlowClassifier(n_estimators=5, max_depth=3).fit(dense, labels)
    assert from_csr.booster_.to_json() == from_dense.booster_.to_json()
    assert np.array_equal(from_csr.predict_proba(m), from_dense.predict_proba(dense))
    stacked = from_csr.transform(m)
    assert stacked.shape == (600, 41)
    assert np.array_equal(stacked[:, -1].toarray().ravel(), from_csr.predict(m))


def _stored_where_present(df: pd.DataFrame):
    """The features of ``df`` as a CSR storing every non-NaN value (zeros included)."""
    X = df.drop(columns="y").to_numpy(dtype=np.float32)
    rows, cols = np.nonzero(~np.isnan(X))
    return sp.csr_matrix((X[rows, cols], (rows, cols)), shape=X.shape)


def test_stores_built_in_small_blocks_give_the_same_model(monkeypatch):
    """Block-wise building of the stores is exact, for dense input and for CSR input with
    sparse features whose common bin is a value (stored 7.0 and 0.0), whose absent rows then
    become entries of the missing bin."""
    df = make_mixed(n_rows=700, seed=6)
    m, y = _stored_where_present(df), df["y"].to_numpy()

    def trees(booster):  # the CSR's features are named f0, f1, ...: compare cuts and trees
        d = _model(booster)
        return d["cuts"], d["trees"]

    reference = trees(_train(df, "y", 1.0))
    assert trees(_train(m, y, 0.8)) == reference
    monkeypatch.setattr(binning, "_ENTRY_BLOCK", 37)
    monkeypatch.setattr(binning, "_EXTRACT_VALUES", 50)
    assert trees(_train(m, y, 0.8)) == reference
    assert trees(_train(df, "y", 0.8)) == reference


def _stores(X, y, threshold=0.8):
    """(Routing, SparseBins or None) of ``X`` (a DataFrame with a "y" column, a dense array or a
    scipy CSR matrix) as training builds them on the CPU, in one part."""
    dataset = inputs.load(X, "y") if y is None else inputs.load(X, y)
    backend = get_backend("cpu")
    cuts = sketch.compute_cuts(np, [dataset.X], None, 256)
    part = binning.bin_part(backend, dataset.X, cuts)
    route = routing.decide(binning.bin_counts(backend, part, cuts), cuts, threshold)
    return route, binning.build_stores(backend, part, cuts, route)[1]


def test_entry_feature_dtype_is_int16_while_the_ids_fit():
    assert _dtypes.entry_feature_dtype(0) == np.int16
    assert _dtypes.entry_feature_dtype(32767) == np.int16  # ids 0..32766
    assert _dtypes.entry_feature_dtype(32768) == np.int32
    assert _dtypes.entry_feature_dtype(10**6) == np.int32


def test_stores_hold_int16_feature_ids_up_to_32767_sparse_features(monkeypatch):
    """Both store builders (dense input, CSR input) take the ids' dtype from
    ``entry_feature_dtype``: int16 here, int32 when it says so, the same ids either way."""
    df = make_mixed(n_rows=500, seed=2)
    m, dense, y = _csr_pair(n_rows=500)
    built = {}
    for narrow_max in (_dtypes.ENTRY_FEATURE_NARROW_MAX, 2):  # 2: fewer than S, so int32
        monkeypatch.setattr(_dtypes, "ENTRY_FEATURE_NARROW_MAX", narrow_max)
        wanted = np.int16 if narrow_max > 2 else np.int32
        for name, X, label in (("frame", df, None), ("csr", m, y), ("dense", dense, y)):
            route, store = _stores(X, label)
            assert len(route.sparse) > 2 and store.entry_feature.dtype == wanted, name
            assert store.nbytes == store.indptr.nbytes + store.nnz * (
                np.dtype(wanted).itemsize + store.entry_bin.itemsize)
            built.setdefault(name, []).append(store)
    for name, (narrow, wide) in built.items():
        assert np.array_equal(narrow.entry_feature, wide.entry_feature), name
        assert np.array_equal(narrow.entry_bin, wide.entry_bin), name
    csr, from_dense = built["csr"][0], built["dense"][0]  # the same matrix, the same store
    assert np.array_equal(csr.indptr, from_dense.indptr)
    assert np.array_equal(csr.entry_feature, from_dense.entry_feature)
    assert np.array_equal(csr.entry_bin, from_dense.entry_bin)


def test_csr_store_holds_int32_feature_ids_above_32767_sparse_features():
    """40,000 mostly-empty columns, all sparse with the missing bin as common bin: the store's
    entries are the CSR's own, so its ids (up to 39,999) must be the CSR's column ids."""
    n_rows, n_cols = 50, 40_000
    m = sp.random(n_rows, n_cols, density=0.0005, format="csr", random_state=1,
                  dtype=np.float32)
    m.sort_indices()
    route, store = _stores(m, np.zeros(n_rows))
    assert len(route.sparse) == n_cols and np.all(route.common_bin == _dtypes.MISSING_BIN)
    assert store.entry_feature.dtype == np.int32
    assert m.indices.max() > 32767
    assert np.array_equal(store.entry_feature, m.indices)
    assert np.array_equal(store.indptr, m.indptr)


def test_int32_and_int16_feature_ids_give_the_same_model(monkeypatch, device):
    """The kernels read either id width (CUDA: a module compiled per width) the same way."""
    df = make_mixed(n_rows=800, seed=4)
    m, _, y = _csr_pair(n_rows=800)
    narrow = [_train(df, "y", 0.8, device).to_json(),
              _train(_on_device(m, device), y, 0.8, device).to_json()]
    monkeypatch.setattr(_dtypes, "ENTRY_FEATURE_NARROW_MAX", 0)  # every store int32
    wide = [_train(df, "y", 0.8, device).to_json(),
            _train(_on_device(m, device), y, 0.8, device).to_json()]
    assert wide == narrow


def test_decide_takes_the_first_of_equal_counts_and_a_strict_threshold():
    cuts = cuts_mod.Cuts(values=np.array([0.5, 2.0], np.float32), offsets=np.array([0, 1, 2]),
                         max_bin=256)  # two features, bins 0 (missing), 1, 2 each
    counts = np.array([5, 5, 0,   0, 1, 9])  # 10 rows
    route = routing.decide(counts, cuts, 0.4)
    assert route.sparse.tolist() == [0, 1] and route.common_bin.tolist() == [0, 2]
    assert route.bin_offsets.tolist() == [0, 3, 6]
    route = routing.decide(counts, cuts, 0.5)  # 5 of 10 is not more than half
    assert route.sparse.tolist() == [1] and route.dense.tolist() == [0]
    assert not routing.decide(counts, cuts, 1.0).has_sparse


def test_canonical_csr_is_shared_and_others_are_copied(device):
    """A canonical float32 CSR is read in place (no second copy of the input while it is
    binned); any other matrix is canonicalised in a copy, the user's matrix left unchanged."""
    from gbflow.backend import frames
    m, _, _ = _csr_pair(n_rows=300)
    m = _on_device(m, device)
    assert m.has_canonical_format
    shared = frames.csr_from_matrix(m)
    xp = np if device == "cpu" else __import__("cupy")
    assert xp.shares_memory(shared.data, m.data) and xp.shares_memory(shared.indices, m.indices)
    copied = frames.csr_from_matrix(m.tocsc())
    assert not xp.shares_memory(copied.data, m.data)
    assert np.array_equal(_host(copied.data), _host(shared.data), equal_nan=True)
    assert np.array_equal(_host(copied.indices), _host(shared.indices))
    assert np.array_equal(_host(copied.indptr), _host(shared.indptr))


def test_default_routing_stores_sparse_only_what_saves_memory():
    """``sparse_threshold=None`` (the default): of the features above 0.8, the sparsest ones
    whose entries (8 bytes of row starts, then 3 a uint8-bin entry) cost less than their dense
    columns (2 bytes a row each): two such columns stay dense, twelve one-hot ones go sparse,
    and a long tail of fuller columns is left out when it costs more than it saves."""
    n = 40_000  # 1.6M cells: above the small tables kept dense whole
    offsets = np.arange(0, 3 * 41, 3)  # 40 features, bins 0 (missing), 1, 2 each
    cuts = cuts_mod.Cuts(values=np.full(40, 0.5, np.float32), offsets=np.arange(41),
                         max_bin=256)

    def counts_of(present):  # feature f: present[f] rows in bin 1, the rest missing
        counts = np.zeros(3 * 40, np.int64)
        counts[offsets[:-1]] = n - np.asarray(present)
        counts[offsets[:-1] + 1] = present
        return counts

    dense_like = [n // 2] * 38  # every feature below 0.8 but two
    two = counts_of(dense_like + [n // 20, n // 20])  # 5% entries: 8 + 2 * 0.15 bytes a row > 2 * 2
    assert routing.decide(two, cuts, 0.8).sparse.tolist() == [38, 39]
    assert not routing.decide(two, cuts, None).has_sparse
    one_hot = counts_of([n // 2] * 28 + [n // 12] * 12)  # 12 one-hot columns: 24 vs 8 + 3 bytes
    auto = routing.decide(one_hot, cuts, None)
    assert auto.sparse.tolist() == list(range(28, 40))
    assert auto.dense.tolist() == list(range(28))
    # 4 columns of 1% and 10 of 19.9%: the 4 alone cost 8.12 bytes a row against 8 dense; all
    # 14 cost 8 + 3 * (0.04 + 1.99) = 14.1 against 28: the sparsest first, as many as pay most
    mixed = counts_of([n // 2] * 26 + [n // 100] * 4 + [n * 199 // 1000] * 10)
    chosen = routing.decide(mixed, cuts, None).sparse
    assert chosen.tolist() == list(range(26, 40))
    # the model is the same whichever way (test_routing_never_changes_the_model); the default
    # is None and an explicit threshold is followed exactly
    assert gbflow.params.make_params({}).sparse_threshold is None


def test_default_routing_keeps_a_small_table_of_alike_columns_dense():
    """A table of at most ``SMALL_TABLE_CELLS`` cells whose features have alike bin counts stays
    dense whole by default (what the memory rule would store sparse); one-hot columns among
    256-bin ones (dense histograms 50x the compact ones) still go sparse; so does a table one
    row larger, and an explicit threshold is followed whatever the size."""
    def routed(n, n_value_bins, present):
        offsets = np.concatenate([[0], np.cumsum(np.asarray(n_value_bins) + 1)])
        values = np.concatenate([np.arange(k, dtype=np.float32) + 0.5 for k in
                                 np.asarray(n_value_bins) - 1])
        cuts = cuts_mod.Cuts(values=values, offsets=np.concatenate(
            [[0], np.cumsum(np.asarray(n_value_bins) - 1)]).astype(np.int64), max_bin=256)
        counts = np.zeros(offsets[-1], np.int64)
        counts[offsets[:-1]] = n - np.asarray(present)  # missing
        counts[offsets[:-1] + 1] = present  # every present value in the first value bin
        return lambda threshold=None: routing.decide(counts, cuts, threshold).sparse.tolist()

    cells = routing.SMALL_TABLE_CELLS
    n = cells // 40
    alike = routed(n, [16] * 40, [n // 2] * 28 + [n // 12] * 12)
    assert alike() == [] and alike(0.8) == list(range(28, 40))
    assert routed(n + 1, [16] * 40, [n // 2] * 28 + [n // 12] * 12)() == list(range(28, 40))
    one_hot = routed(n, [255] * 4 + [1] * 36, [n // 2] * 4 + [n // 12] * 36)
    assert one_hot() == list(range(4, 40))
