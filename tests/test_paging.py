"""Paged training (issue F8): binned pages in host memory give the model of resident training.

``device_memory_limit`` below the binned size turns each part into pages of rows whose bins live
in host memory (page-locked on the GPU) and reach the device two at a time. Paging changes speed
and memory, never the model: every test here compares model files (and evaluation results) by
equality with training that pages nothing. The CPU runs the same paged code with host views, so
tiny limits that force many pages are tested here; on the GPU the pages really stream.
"""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import scipy.sparse as sp

import gbflow
from gbflow import prepare, sketch
from gbflow.backend import get_backend
from gbflow.inputs import DataSet
from gbflow.params import make_params

# a limit of a few KB: pages of a few hundred rows, tens of pages per part
TINY = 8_000


def _data(n=6000, n_features=7, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, n_features)).astype(np.float32)
    X[rng.random(X.shape) < 0.05] = np.nan
    X[:, 2] = rng.integers(0, 5, n)
    signal = X[:, 0] + np.sin(2 * np.nan_to_num(X[:, 1])) + 0.5 * (X[:, 2] == 3)
    y = (signal + rng.normal(size=n) * 0.5 > 0).astype(np.float64)
    return X, y, rng


def _same(params, data, label, device, rounds=8, **kwargs):
    """Trains without and with a tiny limit; returns both boosters after checking they agree."""
    params = dict(params, device=device)
    resident = gbflow.train(data, label, params, num_boost_round=rounds, verbose=False, **kwargs)
    paged = gbflow.train(data, label, dict(params, device_memory_limit=TINY),
                         num_boost_round=rounds, verbose=False, **kwargs)
    assert paged.to_json() == resident.to_json()
    assert paged.evals_result == resident.evals_result
    assert paged.best_iteration == resident.best_iteration
    return resident, paged


@pytest.mark.parametrize("extra", [
    {},
    {"subsample": 0.7, "colsample_bytree": 0.6, "seed": 3},
    {"subsample": 0.3, "sampling_method": "gradient_based"},
    {"objective": "multi:softprob", "num_class": 3},
    {"objective": "reg:squarederror", "max_depth": 3, "reg_alpha": 0.5},
    {"objective": "survival:cox", "eval_metric": "cox-nloglik"},  # risk sets span the pages
])
def test_paged_training_gives_the_resident_model(extra, device):
    X, y, rng = _data()
    if extra.get("num_class"):
        y = np.digitize(X[:, 0], [-0.5, 0.5]).astype(np.float64)
    if extra.get("objective") == "survival:cox":  # times, a third of them censored
        y = np.round(rng.exponential(np.exp(-np.nan_to_num(X[:, 0]).clip(-2, 2))), 2) + 0.01
        y[rng.random(len(y)) < 0.3] *= -1
        _same({"max_depth": 5, **extra}, X, y, device, evals=[((X, y), "train")])
        return
    params = {"objective": "binary:logistic", "max_depth": 5, **extra}
    _same(params, X, y, device)


# a limit with room for a fifth of _data()'s 6,000 rows gathered (8 bytes a binned row) and
# pages of a few hundred rows beside it
ROOMY = 40_000


@pytest.mark.parametrize("extra", [
    {"subsample": 0.3},
    {"subsample": 0.2, "sampling_method": "gradient_based", "eval_metric": "auc"},
    {"subsample": 0.5, "objective": "multi:softprob", "num_class": 3, "colsample_bynode": 0.6},
    {"subsample": 0.3, "max_leaves": 6, "grow_policy": "lossguide", "max_depth": 0},
    {"subsample": 0.3, "monotone_constraints": "(1,0,0,0,0,0,0)"},
    # line-searched leaves: each page walked for its rows' leaves, then for the margins
    {"subsample": 0.3, "objective": "reg:absoluteerror"},
    {"subsample": 0.3, "sampling_method": "gradient_based", "objective": "reg:quantileerror",
     "quantile_alpha": [0.2, 0.8]},
    {"subsample": 0.4, "objective": "survival:cox"},  # a whole-set loss: shard by shard
])
def test_sampled_paged_trees_grow_on_their_rows_gathered(extra, device, monkeypatch):
    """With row sampling, a paged training's tree is grown on the sampled rows gathered onto
    the device (two reads of the pages a tree): the resident model and evaluation results."""
    from gbflow import grow
    X, y, rng = _data()
    if extra.get("num_class"):
        y = np.digitize(X[:, 0], [-0.5, 0.5]).astype(np.float64)
    w = rng.uniform(0.5, 2.0, len(y))
    sizes = []
    gather = grow.gather_sample
    monkeypatch.setattr(grow, "gather_sample", lambda shardset, *a: sizes.append(
        (shardset.sample_rows, len(shardset.shards))) or gather(shardset, *a))
    params = dict({"max_depth": 4, "seed": 5}, **extra, device=device)
    evals = [((X[:2000], y[:2000]), "held")]
    kwargs = {"weight": w, "evals": evals}
    if extra.get("objective") == "survival:cox":  # times, a third of them censored
        y = np.round(rng.exponential(np.exp(-np.nan_to_num(X[:, 0]).clip(-2, 2))), 2) + 0.01
        y[rng.random(len(y)) < 0.3] *= -1
        kwargs = {"weight": w}
    resident = gbflow.train(X, y, params, 6, verbose=False, **kwargs)
    paged = gbflow.train(X, y, dict(params, device_memory_limit=ROOMY), 6, verbose=False,
                         **kwargs)
    assert paged.to_json() == resident.to_json()
    assert paged.evals_result == resident.evals_result
    n_groups = extra.get("num_class", len(extra.get("quantile_alpha", [0])))
    assert len(sizes) == 6 * n_groups
    budget, pages = sizes[0]
    assert budget == int(np.ceil(extra["subsample"] * 6000 * 1.01 + 4 * np.sqrt(6000) + 64))
    assert pages > 2  # pages beside the sample's room


@pytest.mark.parametrize("objective", ["reg:squarederror", "reg:absoluteerror"])
def test_walked_margins_keep_the_sign_of_a_zero(objective, device, monkeypatch):
    """Labels of -0.0 make leaves of -0.0 (a zero gradient sum; a residual quantile of -0.0);
    rows starting at -0.0 (a base_margin) keep it when the tree is walked on the pages, as the
    resident loop's direct addition does: the training margins are the same bits."""
    from gbflow import boosting, grow, inputs, shards
    rng = np.random.default_rng(0)
    X, _, _ = _data()
    df = pd.DataFrame(X, columns=list("abcdefg")).assign(y=-0.0)
    # most rows' residual -0.0 - 0.0 = -0.0: the absolute error's leaf quantiles are -0.0
    base_margin = np.where(rng.random(len(df)) < 0.8, 0.0, -0.0)
    calls = []
    gather = grow.gather_sample
    monkeypatch.setattr(grow, "gather_sample", lambda *a: calls.append(1) or gather(*a))
    backend = get_backend(device)

    def fit(extra):
        params = make_params({"max_depth": 3, "subsample": 0.5, "objective": objective,
                              "device": device, **extra})
        return boosting.fit(backend, [inputs.load(df, "y", base_margin=base_margin)], params,
                            3, verbose=False, keep_training_margins=True,
                            shardset=shards.ShardSet(backend))
    resident, paged = fit({}), fit({"device_memory_limit": ROOMY})
    assert calls and resident.to_json() == paged.to_json()
    a, b = (np.asarray(backend.to_host(m.training_margins[0]), dtype=np.float64)
            for m in (resident, paged))
    assert np.signbit(a).any()  # the case this checks: -0.0 margins after training
    assert np.array_equal(a.view(np.uint64), b.view(np.uint64))


def test_gathered_samples_with_categorical_features(device, monkeypatch):
    """Categorical splits (one-hot and partition) on gathered samples, walked on the pages:
    the resident model."""
    from gbflow import grow
    rng = np.random.default_rng(4)
    n = 6000
    df = pd.DataFrame(rng.normal(size=(n, 5)).astype(np.float32), columns=list("abcde"))
    df["k"] = pd.Categorical(rng.choice([f"c{i}" for i in range(12)], n))
    df["y"] = ((df.a + (df.k.cat.codes % 3 == 1) * 1.5 + rng.normal(size=n)) > 0).astype(float)
    calls = []
    gather = grow.gather_sample
    monkeypatch.setattr(grow, "gather_sample", lambda *a: calls.append(1) or gather(*a))
    params = {"max_depth": 4, "subsample": 0.3, "max_cat_to_onehot": 4, "device": device}
    resident = gbflow.train(df, "y", params, 6, verbose=False)
    paged = gbflow.train(df, "y", dict(params, device_memory_limit=ROOMY), 6, verbose=False)
    assert paged.to_json() == resident.to_json() and len(calls) == 6
    assert any(t.categories for t in paged.trees)  # categorical splits were made


def test_a_sample_larger_than_its_room_grows_on_the_pages(device, monkeypatch):
    """A tree whose sample holds more rows than the pages left room for is grown on the pages
    (the same model); the room is kept only when it is at most 90% of the limit."""
    X, y, _ = _data()
    monkeypatch.setattr(prepare, "_SAMPLE_SLACK", -0.5)  # room for half the expected rows
    _same({"subsample": 0.4}, X, y, device, rounds=4)
    params = make_params({"subsample": 0.4, "device_memory_limit": ROOMY})
    part = DataSet(X=X, label=y, weight=None, feature_names=[f"x{i}" for i in range(7)])
    backend = get_backend(device)
    rows, room, copy = prepare.page_plan(backend, params, [part], 7, np.uint8)
    assert room == int(np.ceil(0.4 * 6000 * 0.5 + 4 * np.sqrt(6000) + 64))
    # a sample row: 8 bytes of padded bins and a 7-byte column copy (room left for it)
    assert copy and rows == (ROOMY - room * (8 + 7)) // 2 // 8
    snug = make_params({"subsample": 0.4, "device_memory_limit": int(room * 8 / 0.9) + 8})
    assert prepare.page_plan(backend, snug, [part], 7, np.uint8)[1:] == (room, False)
    crowded = make_params({"subsample": 0.4, "device_memory_limit": 8_000})
    assert prepare.page_plan(backend, crowded, [part], 7, np.uint8) == \
        (8_000 // 2 // 8, None, False)
    unsampled = make_params({"device_memory_limit": ROOMY})
    assert prepare.page_plan(backend, unsampled, [part], 7, np.uint8) == \
        (ROOMY // 2 // 8, None, False)
    line_search = make_params({"subsample": 0.4, "device_memory_limit": ROOMY,
                               "objective": "reg:absoluteerror"})  # gathers as the others do
    assert prepare.page_plan(backend, line_search, [part], 7, np.uint8) == (rows, room, copy)


def test_paged_training_with_weights_and_an_early_stopped_evaluation_set(device):
    X, y, rng = _data(seed=1)
    w = rng.random(len(y)) + 0.1
    valid = (X[:2000], y[:2000])
    resident, _ = _same({"objective": "binary:logistic", "eval_metric": ["logloss", "auc"]},
                        X[2000:], y[2000:], device, rounds=60, weight=w[2000:],
                        evals=[(valid, "valid")], early_stopping_rounds=3)
    assert resident.best_iteration < 59  # stopping did happen (so the comparison covers it)


def test_paged_training_of_a_sparse_one_hot_matrix_routes_as_resident_training(device):
    """A CSR: most features become sparse entries (on the device), the dense ones paged."""
    rng = np.random.default_rng(2)
    n = 5000
    onehot = sp.random(n, 200, density=0.03, format="csr", random_state=2,
                       data_rvs=lambda k: np.ones(k)).astype(np.float32)
    dense = sp.csr_matrix(rng.normal(size=(n, 3)).astype(np.float32))
    X = sp.hstack([dense, onehot], format="csr")
    y = ((np.asarray(onehot[:, :15].sum(1)).ravel() > 0) ^ (rng.random(n) < 0.1)).astype(float)
    _same({"objective": "binary:logistic", "max_depth": 6}, X, y, device)


def test_paged_training_with_categorical_features(device):
    X, y, rng = _data(seed=4)
    df = pd.DataFrame(X, columns=[f"x{i}" for i in range(X.shape[1])])
    df["shop"] = pd.Categorical(rng.integers(0, 30, len(df)).astype(str))
    label = y + (df["shop"].cat.codes.to_numpy() % 4 == 0)
    _same({"objective": "reg:squarederror", "max_depth": 4}, df, label, device)


def test_the_sketch_reads_host_data_a_block_at_a_time(device, monkeypatch):
    """Paged training leaves the raw values in host memory: the sketch's passes (not its
    one-sort shortcut for small data) upload a block at a time, with the same cuts."""
    monkeypatch.setattr(sketch.direct, "DIRECT_VALUES", 0)
    X, y, _ = _data(n=3000, seed=5)
    _same({"objective": "binary:logistic", "max_depth": 4}, X, y, device, rounds=4)


def test_continued_training_pages_as_the_first_part(device):
    X, y, _ = _data(seed=6)
    params = {"objective": "binary:logistic", "max_depth": 4, "device": device}
    first = gbflow.train(X, y, params, num_boost_round=3, verbose=False)
    resident = gbflow.train(X, y, params, num_boost_round=3, verbose=False, xgb_model=first)
    paged = gbflow.train(X, y, dict(params, device_memory_limit=TINY), num_boost_round=3,
                         verbose=False, xgb_model=first)
    assert paged.to_json() == resident.to_json()


def test_page_rows_pages_only_what_does_not_fit(device):
    X, y, _ = _data(n=5000)
    backend = get_backend(device)
    from gbflow.inputs import DataSet
    part = DataSet(X=X, label=y, weight=None, feature_names=[f"x{i}" for i in range(7)])
    row_bytes = 8  # 7 uint8 bins padded to 8 bytes
    fits = make_params({"device_memory_limit": 5000 * row_bytes})
    assert prepare.page_rows(backend, fits, [part], 7, np.uint8) is None
    tight = make_params({"device_memory_limit": 5000 * row_bytes - 1})
    # two pages fit the limit at a time
    assert prepare.page_rows(backend, tight, [part], 7, np.uint8) == (5000 * 8 - 1) // 2 // 8
    if device == "cpu":  # the CPU pages only when asked
        assert prepare.page_rows(backend, make_params({}), [part], 7, np.uint8) is None


def test_pages_are_shards_in_host_memory_and_stream_in_order(device):
    """Each page is a shard whose bins are in host memory; the training margins, page after
    page, are the resident ones."""
    from gbflow import boosting, inputs
    from gbflow.shards import ShardSet
    X, y, _ = _data(n=4000)
    params = make_params({"objective": "binary:logistic", "max_depth": 3, "device": device})
    backend = get_backend(device)
    resident = boosting.fit(backend, [inputs.load(X, y)], params, 2, verbose=False,
                            keep_training_margins=True)
    shardset = ShardSet(backend)
    paged = boosting.fit(backend, [inputs.load(X, y)],
                         make_params(dict(params.to_dict(), device_memory_limit=4000)), 2,
                         verbose=False, keep_training_margins=True, shardset=shardset)
    assert np.array_equal(paged.training_margins[0], resident.training_margins[0])
    dense = shardset.dense
    assert dense.paged and len(shardset.shards) == -(-4000 // (4000 // 2 // 8))
    assert sum(s.n_rows for s in shardset.shards) == 4000
    assert isinstance(dense._bins[0], np.ndarray)  # host memory
    if device == "cuda":  # every level reads every page once, in order
        assert dense.bytes_streamed >= 2 * sum(dense.nbytes(s) for s in range(len(dense._bins)))


def test_page_reader_gives_every_page_in_any_order(device):
    backend = get_backend(device)
    rng = np.random.default_rng(7)
    pages = [backend.to_page(rng.integers(0, 255, size=(n, 8)).astype(np.uint8))
             for n in (100, 37, 100, 0, 64)]
    reader = backend.page_reader(pages)
    for i in [0, 1, 2, 3, 4, 0, 0, 2, 4, 1, 3, 3, 0]:
        assert np.array_equal(backend.to_host(reader.get(i)), pages[i])


@pytest.mark.parametrize("value,expected", [
    (1000, 1000), ("8GB", 8 * 10**9), ("512 MiB", 512 * 2**20), ("1.5e9", 1_500_000_000),
    ("2kib", 2048)])
def test_device_memory_limit_takes_dasks_spellings(value, expected):
    assert make_params({"device_memory_limit": value}).device_memory_limit == expected


@pytest.mark.parametrize("value", ["eight GB", "8XB", 0, -5, True, "nan"])
def test_a_bad_device_memory_limit_names_the_parameter(value):
    with pytest.raises(ValueError, match="device_memory_limit"):
        make_params({"device_memory_limit": value})


def test_the_model_file_does_not_hold_the_limit():
    X, y, _ = _data(n=500)
    booster = gbflow.train(X, y, {"device_memory_limit": "1GB"}, num_boost_round=2,
                           verbose=False)
    assert "device_memory_limit" not in booster.to_json()


@pytest.mark.parametrize("sampling, limit", [
    ({"subsample": 0.8}, TINY),
    # room for the gathered sample: each worker grows the trees on its sampled rows
    ({"subsample": 0.2, "sampling_method": "gradient_based"}, 11_500),
    # one worker pages and gathers, the other's rows fit: resident
    ({"subsample": 0.2, "sampling_method": "gradient_based"}, 25_000),
])
def test_paged_dask_workers_give_the_in_process_model(sampling, limit, monkeypatch):
    """Each of two workers pages its own shards: the model of in-process resident training."""
    chosen = []
    page_plan = prepare.page_plan
    monkeypatch.setattr(prepare, "page_plan", lambda *a: chosen.append(page_plan(*a)[0]) or
                        page_plan(*a))
    dd = pytest.importorskip("dask.dataframe")
    distributed = pytest.importorskip("distributed")
    import dask
    X, y, _ = _data(n=6000, seed=8)
    df = pd.DataFrame(X, columns=[f"x{i}" for i in range(X.shape[1])])
    df["y"] = y
    parts = [df.iloc[a:b] for a, b in ((0, 2500), (2500, 4000), (4000, 6000))]
    ddf = dd.from_delayed([dask.delayed(p.copy)() for p in parts], meta=parts[0].iloc[:0],
                          verify_meta=False)
    params = {"objective": "binary:logistic", "max_depth": 4, **sampling}
    expected = gbflow.train(df, "y", params, num_boost_round=5, verbose=False)
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=False,
                                  dashboard_address=":0") as cluster, \
            distributed.Client(cluster, set_as_default=False) as client:
        got = gbflow.train(ddf, "y", dict(params, device_memory_limit=limit), num_boost_round=5,
                           verbose=False, client=client)
    assert got.to_json() == expected.to_json()
    assert len(chosen) == 3 and chosen[0] is None  # in process: resident
    paged = [c is not None for c in chosen[1:]]  # the workers
    assert all(paged) if limit < 25_000 else sum(paged) == 1


@pytest.mark.parametrize("params", [
    {"objective": "binary:logistic", "scale_pos_weight": 2.0},
    {"objective": "multi:softprob", "num_class": 3},
    {"objective": "reg:tweedie"},
    {"objective": "reg:pseudohubererror"},
])
def test_gradients_a_block_of_rows_at_a_time_give_the_same_model(params, device, monkeypatch):
    """Row-wise losses compute their gradients in blocks of rows (bounded temporaries on large
    shards): the model of computing them all at once."""
    from gbflow import round_gradients
    X, y, rng = _data(n=5000, seed=9)
    if params.get("num_class"):
        y = np.digitize(X[:, 0], [-0.5, 0.5]).astype(np.float64)
    if params["objective"] == "reg:tweedie":
        y = y * rng.gamma(2.0, size=len(y))
    w = rng.random(len(y)) + 0.5
    full = dict(params, device=device, max_depth=4)
    whole = gbflow.train(X, y, full, num_boost_round=4, weight=w, verbose=False)
    monkeypatch.setattr(round_gradients, "GRADIENT_ROWS", 999)
    blocks = gbflow.train(X, y, full, num_boost_round=4, weight=w, verbose=False)
    assert blocks.to_json() == whole.to_json()


def test_held_out_sets_let_their_raw_matrix_go_once_binned(device):
    """With drop_features (gbflow.train, Dask workers) the evaluation sets' float32 matrices go
    once binned, as the training data's do; the model and the evaluation are the same."""
    from gbflow import boosting, inputs
    X, y, _ = _data(n=3000, seed=10)
    params = make_params({"objective": "binary:logistic", "max_depth": 3, "device": device})
    backend = get_backend(device)
    results = []
    for drop in (False, True):
        train, valid = inputs.load(X[:2000], y[:2000]), inputs.load(X[2000:], y[2000:])
        booster = boosting.fit(backend, [train], params, 5, evals=[(valid, "valid")],
                               verbose=False, drop_features=drop)
        assert (valid.X is None) == drop and (train.X is None) == drop
        results.append((booster.to_json(), booster.evals_result))
    assert results[0] == results[1]


def test_the_default_limit_is_the_devices_free_memory_less_the_rows_state():
    """A device's default limit: its free memory less ~48 bytes a row of training state, but
    at least a quarter of what is free (a nearly full device pages in large pages, never in
    pages of a row)."""
    from gbflow.inputs import DataSet

    class Device:
        def __init__(self, free):
            self.free = free

        def device_free_bytes(self):
            return self.free

    X, y, _ = _data(n=5000)
    part = DataSet(X=X, label=y, weight=None, feature_names=[f"x{i}" for i in range(7)])
    params = make_params({})
    row_bytes = 256  # 200 features, padded: the bins outweigh the rows' state
    roomy = 5000 * row_bytes + 5000 * prepare._ROW_STATE_BYTES  # the bins and the state fit
    assert prepare.page_rows(Device(roomy), params, [part], 200, np.uint8) is None
    assert prepare.page_rows(Device(roomy - 1), params, [part], 200, np.uint8) == \
        (5000 * row_bytes - 1) // 2 // row_bytes
    # nearly full: the state alone is more than is free; pages of a quarter of it, not of a row
    assert prepare.page_rows(Device(100_000), params, [part], 200, np.uint8) == \
        100_000 // 4 // 2 // row_bytes


def test_a_ranking_metric_of_paged_training_data_is_refused_by_name():
    """Paged training data cannot be one query (its rows are split between pages): a ranking
    metric of it is refused naming the metric's need; a held-out set is evaluated as usual."""
    X, y, _ = _data()
    params = {"objective": "binary:logistic", "eval_metric": "pre@10",
              "device_memory_limit": TINY, "device": "cpu"}
    with pytest.raises(ValueError, match="a ranking metric of the training data needs it in "
                                         "device memory"):
        gbflow.train(X, y, params, 2, evals=[((X, y), "train")], verbose=False)
    booster = gbflow.train(X[:4000], y[:4000], params, 2, evals=[((X[4000:], y[4000:]), "v")],
                           verbose=False)
    assert len(booster.evals_result["v"]["pre@10"]) == 2


class _Driver:
    """A stand-in for CuPy's runtime: records registrations and refuses overlapping ones, as
    the CUDA driver does (cudaErrorHostMemoryAlreadyRegistered)."""

    class CUDARuntimeError(Exception):
        pass

    def __init__(self):
        self.ranges: dict = {}  # address -> bytes
        self.calls: list = []

    def hostRegister(self, address, size, flags):
        if any(a < address + size and address < a + n for a, n in self.ranges.items()):
            raise self.CUDARuntimeError("already registered")
        self.ranges[address] = size
        self.calls.append(("register", address, size))

    def hostUnregister(self, address):
        del self.ranges[address]
        self.calls.append(("unregister", address))


def test_registry_shares_ranges_and_releases_them_with_their_last_block(tmp_path):
    """The GPU's registry of page-locked host ranges, on a stand-in driver: a range is
    registered once and released by its last user; an overlapping array (a row slice) holds
    the range it overlaps rather than nothing; memory maps, also through a memoryview, are
    never registered; a base chain that returns to itself ends."""
    import mmap
    import types

    from gbflow.backend import cuda as cuda_backend
    driver = _Driver()
    cupy = types.SimpleNamespace(cuda=types.SimpleNamespace(runtime=driver))
    registry = cuda_backend._Registry()
    X = np.zeros((1000, 8), np.float32)
    a = registry.acquire(cupy, X)
    b = registry.acquire(cupy, X)
    c = registry.acquire(cupy, X[100:200])  # inside X's range: holds X's registration
    assert a == b == c == [(X.ctypes.data, X.nbytes)]
    assert driver.ranges == {X.ctypes.data: X.nbytes}
    registry.release(cupy, a)
    registry.release(cupy, c)
    assert driver.ranges  # b still holds it
    registry.release(cupy, b)
    assert driver.ranges == {} and [k for k, *_ in driver.calls] == ["register", "unregister"]
    path = tmp_path / "x.bin"
    path.write_bytes(bytes(1 << 20))
    with open(path, "r+b") as f:
        mapped = mmap.mmap(f.fileno(), 0)
        for view in (np.frombuffer(mapped, np.float32), np.asarray(memoryview(mapped)),
                     np.memmap(path, np.float32, "r+")):
            assert view.nbytes >= 1 << 20
            assert not cuda_backend._registrable(view)
        del view
        mapped.close()
    assert cuda_backend._registrable(np.zeros(1 << 23, np.float32))
    assert not cuda_backend._registrable(np.zeros((1 << 12, 1 << 10), np.float32)[:, ::2])

    class Loop:  # an array-like owner whose base is itself
        def __init__(self, array):
            self.__array_interface__ = array.__array_interface__
            self.keep = array

        @property
        def base(self):
            return self
    assert cuda_backend._registrable(np.asarray(Loop(np.zeros(1 << 23, np.float32))))


@pytest.mark.parametrize("dtype,width", [(np.uint8, 32), (np.uint8, 128), (np.uint8, 3),
                                         (np.uint16, 3), (np.uint8, 12), (np.uint16, 8)])
def test_scatter_page_rows_writes_the_kept_rows_to_their_places(device, dtype, width,
                                                                monkeypatch):
    """``Backend.scatter_page_rows`` puts row i of page j at ``places[j][i]`` where that lies in
    [0, room), and touches no other row before the spare, for rows of 1-, 2-, 4- and 8-byte
    words, over several pages (empty ones among them) in one call; on the GPU the pages are
    read where they lie, in page-locked host memory (the copying fallback is not taken but for
    places given as strided columns); bad shapes are refused before anything is written."""
    from gbflow.backend.base import Backend
    backend = get_backend(device)
    xp = backend.xp
    forbid = [device == "cuda"]
    original = Backend.scatter_page_rows

    def guarded(*args):
        if forbid[0]:
            raise AssertionError("the page was copied, not read where it lies")
        return original(*args)
    monkeypatch.setattr(Backend, "scatter_page_rows", guarded)
    rng = np.random.default_rng(width)
    for sizes, room, share in (((1000,), 300, 0.25), ((400, 0, 333, 91), 50, 0.5),
                               ((700, 300, 5), 400, 0.3), ((0, 60, 7, 0), 30, 0.5)):
        pages = [backend.to_page(rng.integers(0, 2**12, (n, width)).astype(dtype))
                 for n in sizes]
        kept = rng.random(sum(sizes)) < share
        place = np.where(kept, np.minimum(np.cumsum(kept) - 1, room), room).astype(np.int64)
        place[:3] = [-1, -5, room + 2]  # outside [0, room): not kept
        places = np.split(place, np.cumsum(sizes)[:-1])
        out = xp.full((room + 1, width), 7, dtype=dtype)
        strided = sizes[0] == 0  # places as strided columns: the GPU copies the pages then
        forbid[0] = device == "cuda" and not strided
        given = [xp.asarray(np.c_[p, p])[:, 1] if strided else xp.asarray(p) for p in places]
        backend.scatter_page_rows(pages, given, room, out)
        expected = np.full((room, width), 7, dtype=dtype)
        inside = (place >= 0) & (place < room)
        expected[place[inside]] = np.concatenate([np.asarray(p) for p in pages])[inside]
        assert np.array_equal(backend.to_host(out)[:room], expected)
    forbid[0] = False
    page, place = pages[1], xp.asarray(places[1])
    with pytest.raises(ValueError, match="out must be"):
        backend.scatter_page_rows([page], [place], room, out[:, :1])
    with pytest.raises(ValueError, match="place must be"):
        backend.scatter_page_rows(pages[1:2], [place[:-1]], room, out)
    with pytest.raises(ValueError, match="must be 2-D"):
        backend.scatter_page_rows([np.asarray(page)[0]], [place], room, out)
    with pytest.raises(ValueError):  # a place list of another length
        backend.scatter_page_rows(pages, [place], room, out)
    assert np.array_equal(backend.to_host(out)[:room], expected)


def _random_forest(rng, n_features: int, n_bins: int, n_trees: int, categorical: bool):
    """``FlatForest`` of complete depth-4 trees on random features and bin thresholds (a few
    categorical splits on feature 0 when asked), groups 0 and 1."""
    from gbflow.predictor import FlatForest
    from gbflow.tree import Tree
    trees = []
    for t in range(n_trees):
        inner, n_nodes = 15, 31
        feature = np.full(n_nodes, -1, dtype=np.int32)
        feature[:inner] = rng.integers(0, n_features, inner)
        threshold = np.zeros(n_nodes, np.int32)
        threshold[:inner] = rng.integers(0, n_bins, inner)
        left = np.full(n_nodes, -1, dtype=np.int32)
        left[:inner] = 2 * np.arange(inner) + 1
        right = np.where(left >= 0, left + 1, -1).astype(np.int32)
        categories = {}
        if categorical:
            for node in rng.choice(inner, 3, replace=False):
                feature[node] = 0
                categories[int(node)] = np.sort(rng.choice(n_bins - 1, 4, replace=False)) \
                    .astype(np.int32)
        trees.append(Tree(feature=feature, bin_threshold=threshold,
                          threshold=threshold.astype(np.float32),
                          default_left=rng.random(n_nodes) < 0.5, left=left, right=right,
                          value=rng.normal(size=n_nodes), gain=np.zeros(n_nodes),
                          cover=np.zeros(n_nodes), group=t % 2, categories=categories))
    return FlatForest.from_trees(trees)


@pytest.mark.parametrize("dtype,n_features,categorical", [
    (np.uint8, 28, False), (np.uint8, 3, True), (np.uint16, 5, False), (np.uint8, 1, False),
    (np.uint8, 300, False), (np.uint16, 400, True),  # 320- and 832-byte rows: smaller blocks
    (np.uint8, 1100, False)])  # 1,152-byte rows: a launch a page on the GPU
def test_predict_pages_binned_walks_every_page_as_the_kernel_does(device, dtype, n_features,
                                                                  categorical, monkeypatch):
    """``Backend.predict_pages_binned`` adds to each page's margins exactly what
    ``predict_margins_binned`` (the NumPy twin) adds walking that page, and writes nothing
    else: padded pages, empty pages first, last and between, pages smaller than a block, two
    groups, categorical splits, uint8 and uint16 bins; margins C-contiguous, a two-column
    slice of wider rows (guard rows after), or transposed views of one (3, n) buffer (groups
    n apart). On the GPU the pages are walked where they lie (in one launch; rows over 1 KB a
    launch a page, into C-contiguous margins): the copying fallback is not taken."""
    from gbflow import binning
    from gbflow.backend import numpy_kernels
    from gbflow.backend.base import Backend
    backend = get_backend(device)
    xp = backend.xp
    forbid = [False]
    original = Backend.predict_pages_binned

    def guarded(*args, **kwargs):
        if forbid[0]:
            raise AssertionError("the pages were copied and walked one by one")
        return original(*args, **kwargs)
    monkeypatch.setattr(Backend, "predict_pages_binned", guarded)
    rng = np.random.default_rng(n_features)
    n_bins = 40 if dtype == np.uint8 else 700
    forest = _random_forest(rng, n_features, n_bins, 5, categorical)
    arrays = (forest.feature, forest.bin_threshold, forest.default_left, forest.left,
              forest.right, forest.value, forest.tree_root, forest.tree_group)
    sets = (forest.cat_start, forest.cat_bits) if categorical else ()
    width = binning.padded_width(n_features, np.dtype(dtype).itemsize)
    sizes = (0, 70, 5, 0, 1000, 3, 517, 0)
    host = [rng.integers(0, n_bins, (n, width)).astype(dtype) for n in sizes]
    start = [rng.normal(size=(n, 2)) for n in sizes]
    expected = [numpy_kernels.predict_margins_binned(h[:, :n_features], *arrays, m.copy(), *sets)
                for h, m in zip(host, start)]
    pages = [backend.to_page(h) for h in host]
    bounds = np.concatenate([[0], np.cumsum(sizes)])
    for layout in ("contiguous", "sliced", "transposed"):
        forbid[0] = device == "cuda" and (layout == "contiguous" or n_features < 1000)
        if layout == "transposed":
            whole = np.full((3, bounds[-1] + 2), 9.0)
            for j, m in enumerate(start):
                whole[:2, bounds[j]:bounds[j + 1]] = m.T
            holder = xp.asarray(whole)
            outs = [holder[:2, bounds[j]:bounds[j + 1]].T for j in range(len(sizes))]
        else:
            holders = [xp.asarray(np.concatenate([np.c_[m, np.full(len(m), 9.0)],
                                                  np.full((2, 3), 9.0)])) for m in start]
            outs = [h[:n, :2] for h, n in zip(holders, sizes)]
            if layout == "contiguous":
                holders = outs = [xp.ascontiguousarray(o) for o in outs]
        backend.predict_pages_binned(pages, n_features, *arrays, outs, *sets)
        for out, want in zip(outs, expected):
            assert np.array_equal(backend.to_host(out), want), layout
        if layout == "transposed":  # the third row and the guard columns are untouched
            rest = backend.to_host(holder)
            assert (rest[2] == 9.0).all() and (rest[:, bounds[-1]:] == 9.0).all()
        elif layout == "sliced":
            for h, n in zip(holders, sizes):
                rest = backend.to_host(h)
                assert (rest[:, 2] == 9.0).all() and (rest[n:] == 9.0).all()
    forbid[0] = False
    with pytest.raises(ValueError, match="margin matrices"):
        backend.predict_pages_binned(pages, n_features, *arrays, outs[:1], *sets)
    with pytest.raises(ValueError, match="page 1 of shape"):
        backend.predict_pages_binned(pages, n_features, *arrays, outs[:1] + outs[2:3] + outs[2:],
                                     *sets)
    with pytest.raises(ValueError, match="at least"):
        backend.predict_pages_binned(pages, width + 1, *arrays, outs, *sets)
    with pytest.raises(ValueError, match="float64"):
        backend.predict_pages_binned(pages, n_features, *arrays,
                                     [o.astype(np.float32) for o in outs], *sets)
    for out, want in zip(outs, expected):  # nothing was walked
        assert np.array_equal(backend.to_host(out), want)
