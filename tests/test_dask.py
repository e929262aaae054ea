"""Dask integration on the CPU: the same model file in-process and on 1, 2 and 4 workers, lazy
predict/transform, the scikit-learn estimators, bad input, progress and the memory report.

Clusters are LocalClusters of threads (processes=False: no start-up cost, the collective runs over
Dask's inproc comms), one per worker count, shared by the module. Worker loss and the TCP path
need worker processes: tests/test_dask_faults.py.
"""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

dask = pytest.importorskip("dask")
dd = pytest.importorskip("dask.dataframe")
distributed = pytest.importorskip("distributed")

from conftest import make_table  # noqa: E402

import gbflow  # noqa: E402
import gbflow.dask  # noqa: E402
from gbflow import boosting, inputs  # noqa: E402
from gbflow.backend import get_backend  # noqa: E402
from gbflow.evaluation import EvalOptions  # noqa: E402
from gbflow.params import make_params  # noqa: E402

PARAMS = {
    "regression": {"objective": "reg:squarederror", "max_depth": 4, "subsample": 0.8,
                   "colsample_bytree": 0.7},
    "binary": {"objective": "binary:logistic", "max_depth": 4, "subsample": 0.7,
               "eval_metric": ["logloss", "auc"]},
    "multiclass": {"objective": "multi:softprob", "num_class": 3, "max_depth": 3,
                   "colsample_bytree": 0.6},
}


@pytest.fixture(scope="module")
def clients():
    """clients(n): a Client of a module-wide LocalCluster of n single-thread workers (threads of
    this process). The clients are not made the default: each test picks one explicitly."""
    made = {}

    def get(n_workers: int):
        if n_workers not in made:
            cluster = distributed.LocalCluster(n_workers=n_workers, threads_per_worker=1,
                                               processes=False, dashboard_address=":0")
            made[n_workers] = (cluster, distributed.Client(cluster, set_as_default=False))
        return made[n_workers][1]

    yield get
    for cluster, client in made.values():
        client.close()
        cluster.close()


def _partitions(df: pd.DataFrame, bounds) -> list[pd.DataFrame]:
    return [df.iloc[a:b] for a, b in zip(bounds[:-1], bounds[1:])]


def _dask_frame(parts: list[pd.DataFrame]):
    """A Dask DataFrame with exactly these partitions (computed lazily, as a pipeline would)."""
    return dd.from_delayed([dask.delayed(p.copy)() for p in parts], meta=parts[0].iloc[:0],
                           verify_meta=False)


def _model_bytes(booster, tmp_path, name: str) -> bytes:
    path = tmp_path / f"{name}.json"
    booster.save_model(path)
    return path.read_bytes()


@pytest.mark.parametrize("task", list(PARAMS))
def test_same_model_file_in_process_and_on_1_2_4_workers(task, clients, tmp_path):
    """The key property: identical model bytes from pandas, from the Dask partitions in this
    process, and from LocalClusters of 1, 2, 3 and 4 workers (the same partitions, one empty),
    with weights, row and feature sampling, an evaluation set and (binary) early stopping."""
    df = make_table(n_rows=2400, task=task, seed=21)
    df["w"] = np.linspace(0.2, 3.0, len(df))
    valid = make_table(n_rows=600, task=task, seed=22).assign(w=1.0)
    bounds = [0, 400, 401, 900, 900, 1500, 2100, 2400]  # a one-row and an empty partition
    train_parts = _partitions(df, bounds)
    valid_parts = _partitions(valid, [0, 250, 600])
    params = PARAMS[task]
    stop = 3 if task == "binary" else None
    kwargs = dict(label="y", weight="w", params=params, num_boost_round=8,
                  early_stopping_rounds=stop, verbose=False)

    expected = _model_bytes(gbflow.train(df, evals=[(valid, "valid")], **kwargs), tmp_path,
                            "pandas")
    fitted = boosting.fit(get_backend("cpu"),
                          [inputs.load(p, "y", "w", allow_empty=True) for p in train_parts],
                          make_params(params), 8,
                          [([inputs.load(p, "y", "w") for p in valid_parts], "valid")],
                          EvalOptions(early_stopping_rounds=stop), verbose=False)
    assert _model_bytes(fitted, tmp_path, "parts") == expected
    local = gbflow.train(_dask_frame(train_parts), evals=[(_dask_frame(valid_parts), "valid")],
                         **kwargs)
    assert _model_bytes(local, tmp_path, "dask-local") == expected
    for n_workers in (1, 2, 3, 4):  # 3: ranks fold into a power of two, and back
        booster = gbflow.train(_dask_frame(train_parts),
                               evals=[(_dask_frame(valid_parts), "valid")],
                               client=clients(n_workers), **kwargs)
        assert len(booster.worker_report) == n_workers  # every worker took part
        assert _model_bytes(booster, tmp_path, f"dask-{n_workers}") == expected, n_workers
        assert booster.evals_result == local.evals_result


@pytest.mark.parametrize("seed,params,cut", [
    (23, {"max_depth": 4, "monotone_constraints": {"x0": 1, "x3": -1}, "max_delta_step": 0.3},
     [0, 900, 1700, 2400]),
    (29, {"grow_policy": "lossguide", "max_leaves": 11, "max_depth": 0}, [0, 700, 1900, 2400]),
])
def test_bounded_and_best_first_trees_on_workers_equal_in_process(seed, params, cut, clients,
                                                                  tmp_path):
    """What every worker keeps beside the histograms (the nodes' weight bounds; a best-first
    tree's splits searched ahead and its replay): the same model bytes on two workers as in
    process."""
    df = make_table(n_rows=2400, seed=seed)
    kwargs = dict(label="y", params=params, num_boost_round=6, verbose=False)
    expected = _model_bytes(gbflow.train(df, **kwargs), tmp_path, "pandas")
    booster = gbflow.train(_dask_frame(_partitions(df, cut)), client=clients(2), **kwargs)
    assert _model_bytes(booster, tmp_path, "dask") == expected


def test_base_margin_column_on_workers_equals_in_process(clients, tmp_path):
    """A base margin column: the same model bytes and evaluation history on two workers as
    in process, and the same lazy predictions and transform as pandas'."""
    rng = np.random.default_rng(24)
    df = make_table(n_rows=2400, seed=24).assign(offset=rng.normal(size=2400))
    valid = make_table(n_rows=600, seed=25).assign(offset=rng.normal(size=600))
    kwargs = dict(label="y", params={"max_depth": 4}, num_boost_round=6, verbose=False,
                  base_margin="offset")
    expected = gbflow.train(df, evals=[(valid, "valid")], **kwargs)
    booster = gbflow.train(_dask_frame(_partitions(df, [0, 900, 1700, 2400])),
                           evals=[(_dask_frame(_partitions(valid, [0, 300, 600])), "valid")],
                           client=clients(2), **kwargs)
    assert _model_bytes(booster, tmp_path, "dask") == _model_bytes(expected, tmp_path, "pandas")
    assert booster.evals_result == expected.evals_result
    ddf = _dask_frame(_partitions(valid, [0, 300, 600]))
    lazy = booster.predict(ddf.drop(columns="y"), base_margin="offset").compute()
    pd.testing.assert_series_equal(lazy, expected.predict(valid.drop(columns="y"),
                                                          base_margin="offset"))
    out = booster.transform(ddf, base_margin="offset").compute()
    assert np.array_equal(out["prediction"].to_numpy(), lazy.to_numpy())


def test_ranking_on_workers_equals_in_process(clients, tmp_path):
    """rank:ndcg with a qid column and query weights: the same model bytes and evaluation
    history (ndcg, and auc per query) on two workers as in process; a query split between
    workers is refused by name."""
    rng = np.random.default_rng(26)
    df = make_table(n_rows=2400, seed=26).assign(q=np.repeat(np.arange(60), 40))
    df["y"] = np.clip(np.round(df["y"] - df["y"].min()), 0, 4)
    df["w"] = rng.uniform(0.5, 2.0, 60)[df["q"]]
    kwargs = dict(label="y", weight="w", qid="q", num_boost_round=5, verbose=False,
                  params={"objective": "rank:ndcg", "max_depth": 4,
                          "eval_metric": ["auc", "ndcg@5"]})
    expected = gbflow.train(df, evals=[(df, "train")], **kwargs)
    frame = _dask_frame(_partitions(df, [0, 800, 1600, 2400]))  # at query boundaries
    booster = gbflow.train(frame, evals=[(frame, "train")], client=clients(2), **kwargs)
    assert _model_bytes(booster, tmp_path, "dask") == _model_bytes(expected, tmp_path, "pandas")
    assert booster.evals_result == expected.evals_result
    split = _dask_frame(_partitions(df, [0, 820, 1600, 2400]))  # query 20 in two partitions
    with pytest.raises(ValueError, match="query 20 lie in more than one partition"):
        gbflow.train(split, client=clients(2), **kwargs)


def test_ranking_metrics_without_query_ids_on_workers_are_refused(clients):
    """Without qid a set's rows are one query (XGBoost's meaning); on two workers that query
    would span their partitions, which gbflow does not rank: a clear error before training.
    A held-out set in one partition is one query there too, with the in-process value, the
    training data in two partitions (not evaluated: it needs no queries)."""
    df = make_table(n_rows=400, task="binary", seed=3)
    frame = _dask_frame(_partitions(df, [0, 200, 400]))
    params = {"objective": "binary:logistic", "eval_metric": "pre@10"}
    with pytest.raises(ValueError, match="no query ids .* lies in 2 parts"):
        gbflow.train(frame, "y", params, 2, evals=[(frame, "t")], client=clients(2),
                     verbose=False)
    valid = make_table(n_rows=300, task="binary", seed=4)
    expected = gbflow.train(df, "y", params, 3, evals=[(valid, "v")], verbose=False)
    booster = gbflow.train(frame, "y", params, 3, evals=[(_dask_frame([valid]), "v")],
                           client=clients(2), verbose=False)
    assert booster.evals_result == expected.evals_result


@pytest.mark.parametrize("n_valid", [600, 70_000])  # auc by value, and in dense buckets
def test_metrics_and_early_stopping_on_workers_equal_in_process(n_valid, clients):
    """Every metric, the training frame as an evaluation set, a custom metric and early
    stopping on a metric that is not the last: the same values and model on 2 and 3 workers as
    in this process (the custom metric sees every worker's rows)."""
    df = make_table(n_rows=3000, task="binary", seed=23)
    valid = make_table(n_rows=n_valid, task="binary", seed=24)
    train_parts = _partitions(df, [0, 700, 700, 1900, 3000])
    valid_parts = _partitions(valid, [0, n_valid // 3, n_valid // 2, n_valid])
    params = {"objective": "binary:logistic", "max_depth": 3,
              "eval_metric": ["auc", "aucpr", "logloss", "error@0.4", "rmse"]}

    def largest_error(prediction, data):  # independent of the order of rows
        return "largest", float(np.max(np.abs(prediction - data.get_label())))
    kwargs = dict(label="y", params=params, num_boost_round=12, early_stopping_rounds=3,
                  early_stopping_metric="auc", custom_metric=largest_error, verbose=False)
    expected = gbflow.train(df, evals=[(df, "train"), (valid, "valid")], **kwargs)
    assert list(expected.evals_result["valid"]) == params["eval_metric"] + ["largest"]
    for n_workers in (0, 2, 3):
        ddf = _dask_frame(train_parts)
        booster = gbflow.train(ddf, evals=[(ddf, "train"), (_dask_frame(valid_parts), "valid")],
                               client=clients(n_workers) if n_workers else None, **kwargs)
        assert booster.evals_result == expected.evals_result, n_workers
        assert booster.to_json() == expected.to_json(), n_workers
        assert (booster.best_iteration, booster.best_score) == \
            (expected.best_iteration, expected.best_score)


def test_a_worker_holding_only_an_empty_partition_takes_part(clients):
    df = make_table(n_rows=1000, seed=41)
    params = {"subsample": 0.8, "max_depth": 3}
    booster = gbflow.train(_dask_frame([df, df.iloc[:0]]), label="y", params=params,
                           num_boost_round=4, verbose=False, client=clients(2))
    assert sorted(r["rows"] for r in booster.worker_report) == [0, 1000]
    assert booster.to_json() == gbflow.train(df, label="y", params=params, num_boost_round=4,
                                             verbose=False).to_json()


@pytest.mark.parametrize("method", ["uniform", "gradient_based"])
def test_row_sampling_follows_the_global_row_number(clients, tmp_path, method):
    """subsample draws per global row (gradient-based: its threshold from one integer table of
    every worker's rows): another partitioning of the same rows, and any placement on the
    workers, give the same model."""
    df = make_table(n_rows=2000, seed=23)
    params = {"subsample": 0.5, "max_depth": 3, "sampling_method": method}
    expected = _model_bytes(gbflow.train(df, label="y", params=params, num_boost_round=6,
                                         verbose=False), tmp_path, "pandas")
    ddf = dd.from_pandas(df, npartitions=5)
    booster = gbflow.train(ddf, label="y", params=params, num_boost_round=6, verbose=False,
                           client=clients(2))
    assert _model_bytes(booster, tmp_path, "dask") == expected


def test_persisted_input_and_a_pandas_evaluation_set(clients):
    df = make_table(n_rows=1500, task="binary", seed=24)
    client = clients(2)
    ddf = client.persist(dd.from_pandas(df.iloc[:1000], npartitions=3))
    expected = gbflow.train(df.iloc[:1000], label="y", params=PARAMS["binary"],
                            num_boost_round=5, evals=[(df.iloc[1000:], "v")], verbose=False)
    booster = gbflow.train(ddf, label="y", params=PARAMS["binary"], num_boost_round=5,
                           evals=[(df.iloc[1000:], "v")], verbose=False, client=client)
    assert booster.to_json() == expected.to_json()
    assert len(client.compute(ddf).result()) == 1000  # the user's partitions are still there


def test_worker_report_measures_memory(clients):
    df = make_table(n_rows=3000, seed=25)
    booster = gbflow.train(dd.from_pandas(df, npartitions=4), label="y", num_boost_round=2,
                           verbose=False, client=clients(2))
    report = booster.worker_report
    assert sum(r["rows"] for r in report) == 3000
    assert sum(r["partitions"] for r in report) == 4
    raw = df.memory_usage(index=True).sum()
    assert 0.5 * raw < sum(r["raw_bytes"] for r in report) < 2 * raw
    for r in report:
        assert 0 < r["binned_bytes"] < r["raw_bytes"]
        assert r["peak_rss"] >= max(r["rss_start"], r["rss_loaded"], r["rss_quantized"])
    assert {"dask_compute", "dask_total", "quantize", "total"} <= set(booster.timings)
    for r in report:
        assert r["transport"] == "dask"  # CPU workers (no NCCL) of one process (inproc: no links)
        assert {"load partitions", "fit", "fingerprint"} <= set(r["stages"])
        assert 0 < r["stages"]["fit"] <= sum(r["stages"].values()) <= r["task_seconds"]


def test_progress_lines_reach_the_client_once(clients, caplog):
    import logging
    df = make_table(n_rows=800, seed=26)
    with caplog.at_level(logging.INFO, logger="gbflow"):
        gbflow.train(dd.from_pandas(df, npartitions=2), label="y", num_boost_round=6,
                     evals=[(dd.from_pandas(df, npartitions=2), "train")], verbose=2,
                     client=clients(2))
    lines = [r.getMessage() for r in caplog.records if r.name == "gbflow"]
    rounds = [line.split("]")[0] for line in lines if line.startswith("[")]
    assert rounds == ["[1/6", "[2/6", "[4/6", "[6/6"]  # every line once, in order
    assert any(line.startswith("gbflow.dask: training on 2 worker(s)") for line in lines)


def test_progress_lines_print_in_order_once_whatever_order_they_arrive(caplog):
    import logging

    from gbflow.dask.relay import OrderedLines
    lines = OrderedLines()
    with caplog.at_level(logging.INFO, logger="gbflow"):
        for seq in (1, 0, 0, 3, 2, 1, 4):  # events out of order, then the result's copies
            lines.put(seq, f"line {seq}")
    assert [r.getMessage() for r in caplog.records] == [f"line {i}" for i in range(5)]


def test_without_a_client_training_runs_in_process():
    df = make_table(n_rows=1000, seed=27)
    ddf = dd.from_pandas(df, npartitions=3)
    assert distributed.client._get_global_client() is None
    booster = gbflow.train(ddf, label="y", num_boost_round=3, verbose=False)
    assert not hasattr(booster, "worker_report")
    assert booster.to_json() == gbflow.train(df, label="y", num_boost_round=3,
                                             verbose=False).to_json()


# -- prediction ------------------------------------------------------------------------------


def test_predict_and_transform_are_lazy_and_keep_index_and_divisions(clients, tmp_path):
    df = make_table(n_rows=1200, task="binary", seed=28)
    df.index = pd.RangeIndex(0, 2 * len(df), 2)
    ddf = dd.from_pandas(df, npartitions=4)
    booster = gbflow.train(df, label="y", params={"objective": "binary:logistic"},
                           num_boost_round=5, verbose=False)
    with clients(2).as_current():
        prediction = booster.predict(ddf)
        assert isinstance(prediction, dd.Series) and prediction.name == "prediction"
        assert prediction.divisions == ddf.divisions
        pd.testing.assert_series_equal(prediction.compute(), booster.predict(df))
        margin = booster.predict(ddf, output_margin=True, name="m").compute()
        pd.testing.assert_series_equal(margin, booster.predict(df, output_margin=True, name="m"))
        scored = booster.transform(ddf.assign(id=1), name="p_y")
        assert list(scored.columns) == [*df.columns, "id", "p_y"]
        assert scored.divisions == ddf.divisions
        scored.to_parquet(tmp_path / "scored")
        back = dd.read_parquet(tmp_path / "scored").compute()
        pd.testing.assert_frame_equal(back, booster.transform(df.assign(id=1), name="p_y"),
                                      check_dtype=False)

    def explode(part):
        raise RuntimeError("computed")

    untouched = ddf.map_partitions(explode, meta=ddf._meta)
    lazy = booster.predict(untouched)  # builds the graph only
    with pytest.raises(RuntimeError, match="computed"):
        lazy.compute()


def test_transform_passes_passenger_columns_of_any_dtype_through():
    """Passenger columns (dates, time zones, durations, strings, categories, objects, nullable
    integers) come back untouched, lazily on Dask as in pandas."""
    df = make_table(n_rows=300, task="binary", seed=30)
    booster = gbflow.train(df, label="y", params={"max_depth": 3}, num_boost_round=3,
                           verbose=False)
    n = len(df)
    passengers = df.assign(
        when=pd.date_range("2024-01-01", periods=n, freq="h"),
        when_tz=pd.date_range("2024-01-01", periods=n, freq="h", tz="Europe/Paris"),
        took=pd.to_timedelta(np.arange(n), unit="s"), text=[f"r{i}" for i in range(n)],
        kind=pd.Categorical(["a", "b", "c"] * (n // 3)), blob=[{"i": i} for i in range(n)],
        count=pd.array(np.arange(n), dtype="Int64"))
    expected = booster.transform(passengers)
    pd.testing.assert_frame_equal(expected.drop(columns="prediction"), passengers)
    # (dask's from_pandas makes object columns strings itself: the dicts stay in pandas only)
    on_dask = passengers.drop(columns="blob")
    scored = booster.transform(dd.from_pandas(on_dask, npartitions=3)).compute()
    pd.testing.assert_frame_equal(scored, booster.transform(on_dask), check_dtype=False)
    assert scored["when_tz"].dtype == on_dask["when_tz"].dtype
    assert scored["took"].dtype == on_dask["took"].dtype


def test_multiclass_predict_on_dask_is_a_frame_of_classes():
    df = make_table(n_rows=900, task="multiclass", seed=29)
    booster = gbflow.train(df, label="y", params=PARAMS["multiclass"], num_boost_round=4,
                           verbose=False)
    proba = booster.predict(dd.from_pandas(df, npartitions=3), name="p")
    assert isinstance(proba, dd.DataFrame) and list(proba.columns) == ["p_0", "p_1", "p_2"]
    pd.testing.assert_frame_equal(proba.compute(), booster.predict(df, name="p"))


def test_prediction_columns_are_checked_before_any_work():
    df = make_table(n_rows=300, seed=30)
    booster = gbflow.train(df, label="y", num_boost_round=2, verbose=False)
    ddf = dd.from_pandas(df, npartitions=2)
    with pytest.raises(ValueError, match="'extra'.*not features in training"):
        booster.predict(ddf.assign(extra=1))
    with pytest.raises(ValueError, match="lacks training feature column.*'x2'"):
        booster.transform(ddf.drop(columns="x2"))
    with pytest.raises(ValueError, match="already exist"):
        booster.transform(ddf.assign(prediction=1.0))
    with pytest.raises(TypeError, match="Dask Series"):
        booster.predict(ddf["x0"])


# -- scikit-learn estimators -------------------------------------------------------------------


def test_classifier_on_dask_equals_the_in_memory_classifier(clients):
    df = make_table(n_rows=1500, task="multiclass", seed=31)
    df["y"] = np.array(["low", "mid", "high"])[df["y"].astype(int)]
    X, y = df.drop(columns="y"), df["y"]
    ddf = dd.from_pandas(df, npartitions=3)
    dX, dy = ddf.drop(columns="y"), ddf["y"]
    settings = dict(n_estimators=30, max_depth=3, learning_rate=0.5, early_stopping_rounds=2)
    expected = gbflow.GBFlowClassifier(**settings).fit(X, y, eval_set=[(X.iloc[:500],
                                                                        y.iloc[:500])])
    with clients(2).as_current():
        clf = gbflow.GBFlowClassifier(**settings).fit(
            dX, dy, eval_set=[(dX.partitions[0], dy.partitions[0])])
        assert clf.get_booster().to_json() == expected.get_booster().to_json()
        assert list(clf.classes_) == ["high", "low", "mid"] and clf.n_features_in_ == 6
        assert clf.best_iteration_ == expected.best_iteration_
        labels = clf.predict(dX)
        assert isinstance(labels, dd.Series) and labels.divisions == dX.divisions
        np.testing.assert_array_equal(labels.compute().to_numpy(), expected.predict(X))
        proba = clf.predict_proba(dX).compute()
        assert list(proba.columns) == ["high", "low", "mid"]
        np.testing.assert_array_equal(proba.to_numpy(), expected.predict_proba(X))
        assert list(clf.transform(dX).columns) == [*X.columns, "prediction"]


def test_regressor_on_dask_with_weights(clients):
    df = make_table(n_rows=1200, seed=32, missing=0)
    df["w"] = np.linspace(0.5, 2.0, len(df))
    X, y, w = df.drop(columns=["y", "w"]), df["y"], df["w"]
    ddf = dd.from_pandas(df, npartitions=3)
    expected = gbflow.GBFlowRegressor(n_estimators=5).fit(X, y, sample_weight=w.to_numpy())
    with clients(1).as_current():
        reg = gbflow.GBFlowRegressor(n_estimators=5).fit(ddf.drop(columns=["y", "w"]),
                                                         ddf["y"], sample_weight=ddf["w"])
        assert reg.get_booster().to_json() == expected.get_booster().to_json()
        prediction = reg.predict(ddf.drop(columns=["y", "w"])).compute()
        np.testing.assert_array_equal(prediction.to_numpy(), expected.predict(X))
        with pytest.raises(TypeError, match="y must be a Dask Series"):
            gbflow.GBFlowRegressor().fit(ddf.drop(columns=["y", "w"]), y)


# -- bad input -----------------------------------------------------------------------------------


def _never_computed(df: pd.DataFrame, npartitions: int = 2):
    """A Dask DataFrame whose partitions raise when computed: errors must come first."""
    def explode(part):
        raise AssertionError("a partition was computed before the input was checked")
    return dd.from_pandas(df, npartitions=npartitions).map_partitions(explode, meta=df.iloc[:0])


@pytest.mark.parametrize("change, error, match", [
    (lambda d: d.drop(columns="y"), KeyError, "label column 'y' is not in training data"),
    (lambda d: d.assign(name="text"), TypeError, "non-numeric feature column.*'name'"),
    (lambda d: d[["y"]], ValueError, "no feature columns"),
])
def test_bad_training_frames_fail_on_the_meta(change, error, match):
    df = make_table(n_rows=100, seed=33)
    with pytest.raises(error, match=match):
        gbflow.train(_never_computed(change(df)), label="y", verbose=False)


def test_bad_arguments_with_dask_data():
    df = make_table(n_rows=100, seed=34)
    ddf = _never_computed(df)
    with pytest.raises(TypeError, match="label must name one of its columns"):
        gbflow.train(ddf, label=df["y"].to_numpy(), verbose=False)
    with pytest.raises(TypeError, match="weight must name one of its columns"):
        gbflow.train(ddf, label="y", weight=np.ones(100), verbose=False)
    with pytest.raises(TypeError, match="Dask Series"):
        gbflow.train(ddf["x0"], label="y", verbose=False)
    with pytest.raises(KeyError, match=r"label column 'y' is not in evals\[0\] \('v'\)"):
        gbflow.train(ddf, label="y", evals=[(ddf.drop(columns="y"), "v")], verbose=False)
    with pytest.raises(ValueError, match=r"evals\[0\].*'extra'"):
        gbflow.train(ddf, label="y", evals=[(ddf.assign(extra=1), "v")], verbose=False)
    with pytest.raises(TypeError, match="must be a Dask DataFrame"):
        gbflow.train(ddf, label="y", evals=[(df.to_numpy(), "v")], verbose=False)
    with pytest.raises(TypeError, match="training data is not"):
        gbflow.train(df, label="y", evals=[(ddf, "v")], verbose=False)


def _mixed_columns(df: pd.DataFrame):
    """Four partitions; the third lacks x3 and has z instead, while the meta says x3."""
    parts = _partitions(df, [0, 100, 200, 300, 400])
    parts[2] = parts[2].drop(columns="x3").assign(z=1.0)
    return _dask_frame(parts)


@pytest.mark.parametrize("n_workers", [0, 2])
def test_partitions_with_other_columns_fail_before_training(n_workers, clients):
    df = make_table(n_rows=400, seed=35)
    client = clients(n_workers) if n_workers else None
    with pytest.raises(ValueError, match=r"training data partition 2 lacks column\(s\) 'x3' "
                                         r"and has unexpected column\(s\) 'z'"):
        gbflow.train(_mixed_columns(df), label="y", num_boost_round=2, verbose=False,
                     client=client)


@pytest.mark.parametrize("n_workers", [0, 2])
@pytest.mark.parametrize("value, match", [
    (np.nan, r"label column 'y' of training data partition 1 has 1 NaN"),
    (2.0, r"binary:logistic needs labels in \[0, 1\]; label column 'y' of training data "
          r"partition 1"),
])
def test_bad_labels_name_their_partition(n_workers, value, match, clients):
    df = make_table(n_rows=300, task="binary", seed=36)
    df.loc[150, "y"] = value
    client = clients(n_workers) if n_workers else None
    with pytest.raises(ValueError, match=match):
        gbflow.train(dd.from_pandas(df, npartitions=2), label="y",
                     params={"objective": "binary:logistic"}, num_boost_round=2,
                     verbose=False, client=client)


@pytest.mark.parametrize("n_workers", [0, 2])
def test_global_checks_see_every_partition(n_workers, clients):
    df = make_table(n_rows=300, task="binary", seed=37)
    client = clients(n_workers) if n_workers else None
    empty = _dask_frame([df.iloc[:0], df.iloc[:0]])
    with pytest.raises(ValueError, match="training data has no rows"):
        gbflow.train(empty, label="y", num_boost_round=2, verbose=False, client=client)
    one_class = _dask_frame([df[df.y == 1].iloc[:20], df[df.y == 1].iloc[20:40]])
    with pytest.raises(ValueError, match="'v' holds only one class"):
        gbflow.train(dd.from_pandas(df, npartitions=2), label="y",
                     params={"objective": "binary:logistic", "eval_metric": "auc"},
                     evals=[(one_class, "v")], num_boost_round=2, verbose=False,
                     client=client)
    zero = df.assign(w=0.0)
    with pytest.raises(ValueError, match="all training weights are zero"):
        gbflow.train(dd.from_pandas(zero, npartitions=2), label="y", weight="w",
                     num_boost_round=2, verbose=False, client=client)


def test_a_failing_pipeline_raises_its_own_error(clients):
    df = make_table(n_rows=200, seed=38)

    def broken(part):
        raise ZeroDivisionError("feature engineering went wrong")

    ddf = dd.from_pandas(df, npartitions=2).map_partitions(broken, meta=df.iloc[:0])
    with pytest.raises(ZeroDivisionError, match="feature engineering"):
        gbflow.train(ddf, label="y", verbose=False, client=clients(2))


def test_a_workers_partitions_are_joined_with_their_global_row_numbers():
    from gbflow.dask import loading, messages

    df = make_table(n_rows=100, seed=39)
    spec = messages.Spec(session="", topic="", params=make_params({}), num_boost_round=1,
                         options=EvalOptions(), verbose=False, label="y", weight=None,
                         features=tuple(c for c in df.columns if c != "y"),
                         train=messages.Table("training data", tuple(df.columns)), evals=(),
                         timeout=1.0)
    parts = _partitions(df, [0, 10, 10, 40, 70, 100])  # partition 1 is empty
    offsets = {0: 0, 1: 10, 2: 10, 3: 40, 4: 70}
    items = [(i, len(parts[i]), parts[i]) for i in range(3)]  # (index, rows, frame)
    joined = loading.JoinedPartitions(get_backend("cpu"), spec, spec.train, 0, items)
    assert items == [] and joined.lengths == {0: 10, 1: 0, 2: 30}
    assert joined.row_ids(offsets) == 0  # adjacent, the empty one in between: one offset
    np.testing.assert_array_equal(joined.part.X, df.iloc[:40].drop(columns="y").to_numpy())
    apart = loading.JoinedPartitions(get_backend("cpu"), spec, spec.train, 0,
                        [(2, 30, parts[2]), (4, 30, lambda: parts[4])])
    ids = apart.row_ids(offsets)
    np.testing.assert_array_equal(ids, np.r_[10:40, 70:100].astype(np.uint64))
    np.testing.assert_array_equal(apart.part.label, df["y"].to_numpy()[np.r_[10:40, 70:100]])


def test_model_digest_follows_the_model_file():
    """The ranks' digests are compared to catch ranks that built different models: equal for
    equal model files, different when any trained number differs."""
    import copy

    from gbflow.dask.task import model_digest
    df = make_table(n_rows=600, seed=28)
    one = gbflow.train(df, label="y", params={"max_depth": 3}, num_boost_round=3, verbose=False)
    two = gbflow.train(df, label="y", params={"max_depth": 3}, num_boost_round=3, verbose=False)
    assert one.to_json() == two.to_json() and model_digest(one) == model_digest(two)
    changed = copy.deepcopy(one)
    changed.trees[-1].value[-1] = np.nextafter(changed.trees[-1].value[-1], np.inf)
    assert changed.to_json() != one.to_json() and model_digest(changed) != model_digest(one)
    changed = copy.deepcopy(one)
    changed.best_iteration = 1
    assert model_digest(changed) != model_digest(one)


def test_several_quantiles_on_workers_equal_in_process(clients, tmp_path):
    """reg:quantileerror with three quantiles on 2 workers (weights, row sampling): the
    in-process model file and averaged metric, and a Dask prediction of one column per
    quantile."""
    df = make_table(n_rows=1500, seed=43)
    df["w"] = np.linspace(0.2, 3.0, len(df))
    params = {"objective": "reg:quantileerror", "quantile_alpha": [0.9, 0.1, 0.5],
              "max_depth": 4, "subsample": 0.8}
    parts = _partitions(df, [0, 500, 501, 1100, 1500])
    kwargs = dict(label="y", weight="w", params=params, num_boost_round=5, verbose=False)
    expected = gbflow.train(df, evals=[(df, "train")], **kwargs)
    booster = gbflow.train(_dask_frame(parts), evals=[(_dask_frame(parts), "train")],
                           client=clients(2), **kwargs)
    assert _model_bytes(booster, tmp_path, "dask") == _model_bytes(expected, tmp_path, "mem")
    assert booster.evals_result == expected.evals_result
    features = df.drop(columns=["y", "w"])
    with clients(2).as_current():
        prediction = booster.predict(dd.from_pandas(features, npartitions=3)).compute()
    assert list(prediction.columns) == ["prediction_0", "prediction_1", "prediction_2"]
    pd.testing.assert_frame_equal(prediction, expected.predict(features))


def test_cpu_workers_use_their_own_threads_only(clients, monkeypatch):
    """A worker's kernels run on as many threads as the worker has (1 here), not on every core:
    several workers of one machine must not oversubscribe it. The training thread's setting is
    restored afterwards."""
    numba = pytest.importorskip("numba")
    from gbflow.backend import cpu_kernels
    seen = []
    build = cpu_kernels.build_histograms

    def recording(*args, **kwargs):
        seen.append(numba.get_num_threads())
        return build(*args, **kwargs)

    monkeypatch.setattr(cpu_kernels, "build_histograms", recording)
    df = make_table(n_rows=1000, seed=29)
    booster = gbflow.train(dd.from_pandas(df, npartitions=2), label="y",
                           params={"device": "cpu"}, num_boost_round=2, verbose=False,
                           client=clients(2))
    assert seen and set(seen) == {1}
    assert [r["threads"] for r in booster.worker_report] == [1, 1]
    if numba.config.NUMBA_NUM_THREADS > 1:  # what the kernels would use without the limit
        assert numba.get_num_threads() == numba.config.NUMBA_NUM_THREADS


@pytest.mark.parametrize("objective", ["count:poisson", "reg:tweedie", "multi:softmax",
                                       "reg:quantileerror", "survival:cox"])
def test_new_objectives_on_workers_equal_in_process(objective, clients, tmp_path):
    """XGBoost's further objectives on 2 workers: the in-process model file and metrics, and
    multi:softmax's prediction of a Dask frame is one column of classes."""
    rng = np.random.default_rng(41)
    df = make_table(n_rows=1500, task="regression", seed=41)
    if objective == "multi:softmax":
        df["y"] = np.digitize(df["y"], np.quantile(df["y"], [0.3, 0.7])).astype(float)
        params = {"objective": objective, "num_class": 3, "max_depth": 4}
    elif objective == "reg:quantileerror":  # leaves by a line search over both workers' rows
        params = {"objective": objective, "quantile_alpha": 0.3, "max_depth": 4,
                  "subsample": 0.8}
    elif objective == "survival:cox":  # risk sets over both workers' rows; tied times
        time = np.round(np.exp(-0.3 * (df["y"] - df["y"].mean()) / df["y"].std()), 1) + 0.1
        df["y"] = np.where(rng.random(len(df)) < 0.3, -time, time)
        params = {"objective": objective, "max_depth": 4, "subsample": 0.8}
    else:
        df["y"] = rng.poisson(np.exp(0.3 * (df["y"] - df["y"].mean()) / df["y"].std()))
        params = {"objective": objective, "max_depth": 4}
    parts = _partitions(df, [0, 500, 1100, 1500])
    kwargs = dict(label="y", params=params, num_boost_round=6, verbose=False)
    expected = gbflow.train(df, evals=[(df, "train")], **kwargs)
    booster = gbflow.train(_dask_frame(parts), evals=[(_dask_frame(parts), "train")],
                           client=clients(2), **kwargs)
    assert _model_bytes(booster, tmp_path, "dask") == _model_bytes(expected, tmp_path, "mem")
    assert booster.evals_result == expected.evals_result
    with clients(2).as_current():
        prediction = booster.predict(dd.from_pandas(df.drop(columns="y"), npartitions=3),
                                     name="p").compute()
    assert isinstance(prediction, pd.Series) and prediction.name == "p"
    pd.testing.assert_series_equal(prediction, expected.predict(df.drop(columns="y"), name="p"))


# -- regressions -----------------------------------------------------------------------------------


@pytest.mark.parametrize("first", [
    pd.date_range("2024-01-01", periods=200, freq="h"),
    pd.to_timedelta(np.arange(200), unit="s"),
    pd.period_range("2024-01-01", periods=200, freq="D"),
], ids=["datetime", "timedelta", "period"])
def test_transform_on_dask_with_a_time_passenger_as_first_column(first, clients):
    """The output meta is built without casting the first column to float64 (which a datetime,
    timedelta or period column refuses): Dask's transform equals the in-process one."""
    df = make_table(n_rows=200, seed=42)
    df.insert(0, "when", first)
    booster = gbflow.train(df.drop(columns="when"), label="y", num_boost_round=2,
                           verbose=False)
    expected = booster.transform(df)
    with clients(1).as_current():
        scored = booster.transform(dd.from_pandas(df, npartitions=2)).compute()
    pd.testing.assert_frame_equal(scored, expected)


def test_checkpoint_of_training_without_a_client_counts_the_rows(tmp_path):
    """The in-process Dask path writes the training's row count (not the sum of partition
    numbers) into the checkpoint, so in-process training with it accepts it."""
    import json
    df = make_table(n_rows=600, seed=43)
    path = tmp_path / "ck.json"
    assert distributed.client._get_global_client() is None
    booster = gbflow.train(dd.from_pandas(df, npartitions=4), label="y", num_boost_round=3,
                           verbose=False, checkpoint=str(path))
    assert json.loads(path.read_text())["training_state"]["rows"] == len(df)
    resumed = gbflow.train(df, label="y", num_boost_round=3, verbose=False,
                           checkpoint=str(path))
    assert resumed.to_json() == booster.to_json()


def test_dask_estimator_with_a_pandas_eval_set_names_its_type():
    df = make_table(n_rows=200, seed=44)
    ddf = _never_computed(df)
    X, y = df.drop(columns="y"), df["y"]
    with pytest.raises(TypeError, match=r"X of eval_set\[0\] is a pandas DataFrame;"):
        gbflow.GBFlowRegressor(n_estimators=2).fit(ddf.drop(columns="y"), ddf["y"],
                                                   eval_set=[(X, y)])


@pytest.mark.parametrize("missing, dtype", [(None, object), (pd.NA, "string"),
                                            (np.nan, "float64")])
def test_dask_classifier_refuses_missing_labels_of_any_dtype(missing, dtype):
    df = make_table(n_rows=200, seed=45)
    labels = pd.Series(np.where(df["y"] > 0, "up", "down"), dtype=object)
    if dtype == "float64":
        labels = (df["y"] > 0).astype("float64")
    labels[5] = missing
    df["y"] = labels.astype(dtype)
    ddf = dd.from_pandas(df, npartitions=2)
    with pytest.raises(ValueError, match=r"y has 1 missing label\(s\)"):
        gbflow.GBFlowClassifier(n_estimators=2).fit(ddf.drop(columns="y"), ddf["y"])


def test_train_refuses_a_client_that_is_not_a_distributed_client():
    ddf = _never_computed(make_table(n_rows=100, seed=46))
    with pytest.raises(TypeError, match=r"client must be a distributed\.Client.*got str"):
        gbflow.train(ddf, label="y", verbose=False, client="tcp://127.0.0.1:8786")


def test_a_softmax_custom_metric_when_a_worker_holds_no_evaluation_rows(clients):
    """multi:softmax's custom_metric takes class ids ((n,)): a worker without rows of the
    evaluation set joins the others' with an empty array of that shape."""
    client = clients(2)
    df = make_table(n_rows=1200, task="multiclass", seed=71)
    valid = make_table(n_rows=300, task="multiclass", seed=72)
    seen = []

    def accuracy(prediction, data):
        seen.append(prediction.shape)
        return "accuracy", float(np.mean(prediction == data.get_label()))
    params = {"objective": "multi:softmax", "num_class": 3, "max_depth": 3}
    kwargs = dict(label="y", params=params, num_boost_round=3, verbose=False,
                  custom_metric=accuracy)
    ours = gbflow.train(dd.from_pandas(df, npartitions=2), client=client,
                        evals=[(dd.from_pandas(valid, npartitions=1), "v")], **kwargs)
    alone = gbflow.train(df, evals=[(valid, "v")], **kwargs)
    assert ours.evals_result == alone.evals_result
    assert set(seen) == {(300,)}
