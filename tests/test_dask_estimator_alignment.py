"""The scikit-learn estimators pair a Dask X with y, sample_weight and each eval_set entry as
xgboost.dask does: partition by partition, row by row (by position), never by index. So an X whose
index restarts in every partition (``dd.from_dask_array``) or whose divisions are unknown trains
the same model as in memory, and y partitioned unlike X is refused, naming what does not match.

Clusters are LocalClusters of threads (as in tests/test_dask.py), one for the module.
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
from gbflow.dask.estimators import LABEL, WEIGHT, _training_frame  # noqa: E402

SETTINGS = dict(n_estimators=4, max_depth=3, device="cpu")


@pytest.fixture(scope="module")
def client():
    """A Client of a LocalCluster of two single-thread workers (threads of this process), made
    current by each test that trains on it."""
    cluster = distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=False,
                                       dashboard_address=":0")
    with distributed.Client(cluster, set_as_default=False) as made:
        yield made
    cluster.close()


def _table(n_rows=1200, task="binary", seed=0):
    df = make_table(n_rows=n_rows, task=task, seed=seed, missing=0)
    df["w"] = np.linspace(0.5, 2.0, n_rows)
    return df.drop(columns=["y", "w"]), df["y"], df["w"]


def _restarting_index(X: pd.DataFrame, npartitions: int):
    """X as a Dask DataFrame whose index restarts at 0 in every partition (as
    ``dd.from_dask_array`` makes it), with unknown divisions."""
    arrays = dd.from_pandas(X, npartitions=npartitions).to_dask_array()  # unknown chunks
    return dd.from_dask_array(arrays, columns=list(X.columns))


def _dask_series(values: pd.Series, lengths):
    """A Dask Series with exactly these partition lengths (computed lazily, as a pipeline)."""
    bounds = np.cumsum([0, *lengths])
    parts = [values.iloc[a:b] for a, b in zip(bounds[:-1], bounds[1:])]
    return dd.from_delayed([dask.delayed(p.copy)() for p in parts], meta=values.iloc[:0],
                           verify_meta=False)


def _never_computed(frame):
    """``frame`` (Dask) whose partitions raise when computed: a check must come first."""
    def explode(part):
        raise AssertionError("a partition was computed before the input was checked")
    return frame.map_partitions(explode, meta=frame._meta)


def test_x_with_an_index_restarting_per_partition_trains_the_in_memory_model(client):
    X, y, _ = _table(seed=1)
    expected = gbflow.GBFlowClassifier(**SETTINGS).fit(X, y)
    dX = _restarting_index(X, 4)
    assert not dX.known_divisions and dX.index.compute().max() < len(X) // 4
    with client.as_current():
        model = gbflow.GBFlowClassifier(**SETTINGS).fit(dX, dd.from_pandas(y, npartitions=4))
        assert model.get_booster().to_json() == expected.get_booster().to_json()
        proba = model.predict_proba(dX).compute()
    pd.testing.assert_index_equal(proba.index, dX.index.compute())  # X's own index is kept
    np.testing.assert_array_equal(proba.to_numpy(), expected.predict_proba(X))


def test_unknown_divisions_with_subsample_train_the_in_memory_model(client):
    X, y, _ = _table(seed=2, task="regression")
    settings = dict(SETTINGS, subsample=0.5, random_state=1)
    expected = gbflow.GBFlowRegressor(**settings).fit(X, y)
    dX = dd.from_pandas(X, npartitions=4).clear_divisions()
    dy = dd.from_pandas(y, npartitions=4).clear_divisions()
    with client.as_current():
        model = gbflow.GBFlowRegressor(**settings).fit(dX, dy)
    assert model.get_booster().to_json() == expected.get_booster().to_json()


def test_x_and_y_both_from_dask_arrays_train(client):
    X, y, _ = _table(seed=3)
    dX = _restarting_index(X, 3)
    dy = dd.from_dask_array(dd.from_pandas(y, npartitions=3).to_dask_array())
    expected = gbflow.GBFlowClassifier(**SETTINGS).fit(X, y)
    assert list(dy.index.compute()) == list(dX.index.compute())  # 0..399 three times
    with client.as_current():
        model = gbflow.GBFlowClassifier(**SETTINGS).fit(dX, dy)
        # y as the Dask array itself (xgboost.dask takes it): its chunks are its partitions
        from_array = gbflow.GBFlowClassifier(**SETTINGS).fit(
            dX, dd.from_pandas(y, npartitions=3).to_dask_array(lengths=True))
    assert model.get_booster().to_json() == expected.get_booster().to_json()
    assert from_array.get_booster().to_json() == expected.get_booster().to_json()


@pytest.mark.parametrize("estimator", [gbflow.GBFlowClassifier, gbflow.GBFlowRegressor])
def test_numbers_of_partitions_must_match_and_are_checked_first(estimator):
    X, y, w = _table(n_rows=200, seed=4)
    dX = _never_computed(dd.from_pandas(X, npartitions=4))
    dy, dw = (_never_computed(dd.from_pandas(v, npartitions=4)) for v in (y, w))
    short = _never_computed(dd.from_pandas(y, npartitions=3))
    with pytest.raises(ValueError, match=r"X and y have different numbers of partitions: "
                                         r"4 != 3; y is paired with X partition by partition"):
        estimator(**SETTINGS).fit(dX, short)
    one = _never_computed(dd.from_pandas(w, npartitions=1))  # (Dask would broadcast it)
    if estimator is gbflow.GBFlowRegressor:  # (the classifier computes its classes first)
        with pytest.raises(ValueError, match=r"X and sample_weight have different numbers of "
                                             r"partitions: 4 != 1"):
            estimator(**SETTINGS).fit(dX, dy, sample_weight=one)
        with pytest.raises(ValueError, match=r"X of eval_set\[0\] and y of eval_set\[0\] have "
                                             r"different numbers of partitions: 4 != 3"):
            estimator(**SETTINGS).fit(dX, dy, sample_weight=dw, eval_set=[(dX, short)])
        with pytest.raises(ValueError, match=r"X of eval_set\[1\] and sample_weight of "
                                             r"eval_set\[1\] have different numbers of "
                                             r"partitions: 4 != 1"):
            estimator(**SETTINGS).fit(dX, dy, eval_set=[(dX, dy), (dX, dy)],
                                      sample_weight_eval_set=[None, one])


def test_a_partition_of_another_length_is_named(client):
    X, y, _ = _table(n_rows=400, seed=5, task="regression")
    dX = dd.from_pandas(X, npartitions=4)  # 100 rows each
    ragged = _dask_series(y, [100, 100, 100, 95])
    match = (r"y has 95 rows in partition 3 but X has 100: y is paired with X partition by "
             r"partition and row by row")
    with pytest.raises(ValueError, match=match):  # in this process
        gbflow.GBFlowRegressor(**SETTINGS).fit(dX, ragged)
    with client.as_current(), pytest.raises(ValueError, match=match):
        gbflow.GBFlowRegressor(**SETTINGS).fit(dX, ragged)
    dy = dd.from_pandas(y, npartitions=4)
    longer = pd.Series(np.ones(410), name="w")
    with pytest.raises(ValueError, match=r"sample_weight has 110 rows in partition 1 but X has "
                                         r"100"):
        gbflow.GBFlowRegressor(**SETTINGS).fit(
            dX, dy, sample_weight=_dask_series(longer, [100, 110, 100, 100]))
    with pytest.raises(ValueError, match=r"y of eval_set\[0\] has 95 rows in partition 3 but X "
                                         r"of eval_set\[0\] has 100"):
        gbflow.GBFlowRegressor(**SETTINGS).fit(dX, dy, eval_set=[(dX, ragged)])


def test_weights_and_eval_sets_are_paired_by_position(client):
    X, y, w = _table(n_rows=1600, seed=6)
    train, valid = slice(0, 1200), slice(1200, None)
    Xv, yv, wv = X.iloc[valid], y.iloc[valid], w.iloc[valid]
    settings = dict(SETTINGS, eval_metric="logloss")
    expected = gbflow.GBFlowClassifier(**settings).fit(
        X.iloc[train], y.iloc[train], sample_weight=w.iloc[train].to_numpy(),
        eval_set=[(Xv, yv)], sample_weight_eval_set=[wv.to_numpy()])

    def normally(values, npartitions):
        return dd.from_pandas(values, npartitions=npartitions)
    with client.as_current():
        model = gbflow.GBFlowClassifier(**settings).fit(
            _restarting_index(X.iloc[train], 3), normally(y.iloc[train], 3),
            sample_weight=normally(w.iloc[train], 3),
            eval_set=[(_restarting_index(Xv, 2), normally(yv, 2))],
            sample_weight_eval_set=[normally(wv, 2)])
    assert model.get_booster().to_json() == expected.get_booster().to_json()
    assert model.evals_result_ == expected.evals_result_


def test_in_memory_labels_and_weights_with_a_dask_x_are_refused():
    X, y, w = _table(n_rows=200, seed=7)
    dX = _never_computed(dd.from_pandas(X, npartitions=2))
    dy = _never_computed(dd.from_pandas(y, npartitions=2))
    for labels in (y, y.to_numpy()):
        with pytest.raises(TypeError, match=r"y must be a Dask Series \(partitioned like X: "
                                            r"paired with it partition by partition, by "
                                            r"position\)"):
            gbflow.GBFlowRegressor(**SETTINGS).fit(dX, labels)
    with pytest.raises(TypeError, match=r"sample_weight must be a Dask Series.*numpy ndarray"):
        gbflow.GBFlowRegressor(**SETTINGS).fit(dX, dy, sample_weight=w.to_numpy())


def test_the_training_frame_keeps_x_index_and_divisions_and_pairs_by_position():
    X, y, w = _table(n_rows=90, seed=8)
    X.index = np.arange(1000, 1090)
    dX = dd.from_pandas(X, npartitions=3)
    dy = dd.from_pandas(y, npartitions=3)  # index 0..89: no value shared with X's
    frame = _training_frame(dX, dy, None, "fit", weighted=True)
    assert frame.divisions == dX.divisions and frame.npartitions == 3
    assert list(frame.columns) == [*X.columns, LABEL, WEIGHT]
    got = frame.compute()
    pd.testing.assert_index_equal(got.index, X.index)
    np.testing.assert_array_equal(got[LABEL].to_numpy(), y.to_numpy())
    np.testing.assert_array_equal(got[WEIGHT].to_numpy(), np.ones(len(X)))
    weighted = _training_frame(dX, dy, dd.from_pandas(w, npartitions=3), "fit", weighted=True)
    np.testing.assert_array_equal(weighted[WEIGHT].compute().to_numpy(), w.to_numpy())
