"""Which worker trains each Dask partition (``gbflow.dask.placement``), and the copies that even
out the workers' rows."""
from __future__ import annotations

import dask
import dask.dataframe as dd
import distributed
import numpy as np
import pytest
from conftest import make_table

import gbflow
from gbflow.dask.placement import MIN_GAIN, training_owners

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


def _loads(owner, rows) -> dict:
    out: dict = {}
    for a, n in zip(owner, rows):
        out[a] = out.get(a, 0) + n
    return out


def test_uneven_holders_are_evened_out_by_moving_whole_partitions():
    holders = [["a"]] * 5 + [["b"]] * 3
    rows = [125] * 8
    owner = training_owners(holders, rows)
    assert _loads(owner, rows) == {"a": 500, "b": 500}
    assert sum(o not in h for o, h in zip(owner, holders)) == 1  # one partition copied
    assert training_owners(holders, rows, balance=False) == ["a"] * 5 + ["b"] * 3


def test_a_partition_held_twice_goes_to_the_holder_with_fewer_rows():
    holders = [["a"], ["a", "b"], ["b", "a"], ["b"]]
    rows = [300, 100, 100, 50]
    owner = training_owners(holders, rows, balance=False)
    assert owner == ["a", "b", "b", "b"]  # by rows, not by partition count


@pytest.mark.parametrize("seed", range(20))
def test_moves_never_raise_the_busiest_share_and_stay_among_training_workers(seed):
    rng = np.random.default_rng(seed)
    workers = [f"w{i}" for i in range(rng.integers(2, 6))]
    n = int(rng.integers(1, 30))
    holders = [sorted(rng.choice(workers, rng.integers(1, 3), replace=False).tolist())
               for _ in range(n)]
    rows = rng.integers(0, 1000, n).tolist()
    kept = training_owners(holders, rows, balance=False)
    owner = training_owners(holders, rows)
    assert all(o in h for o, h in zip(kept, holders))
    assert set(owner) <= set(kept)  # no worker that held nothing for training is added
    before, after = max(_loads(kept, rows).values()), max(_loads(owner, rows).values())
    assert after <= before
    assert owner == kept or after <= (1 - MIN_GAIN) * before


def test_a_small_gain_moves_nothing():
    holders = [["a"]] * 3 + [["b"]] * 3
    rows = [100, 100, 104, 100, 100, 100]  # a holds 304, b 300: nothing to win
    assert training_owners(holders, rows) == ["a"] * 3 + ["b"] * 3


@pytest.fixture(scope="module")
def client2():
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=False,
                                  dashboard_address=":0") as cluster, \
            distributed.Client(cluster, set_as_default=False) as client:
        yield client


def _uneven_frame(client, df, counts):
    """``df`` in equal partitions, counts[i] of them held by worker i alone."""
    workers = sorted(client.scheduler_info()["workers"])
    parts = np.array_split(np.arange(len(df)), sum(counts))
    futures, at = [], 0
    for worker, count in zip(workers, counts):
        for p in parts[at:at + count]:
            futures.append(client.scatter(df.iloc[p], workers=[worker], broadcast=False))
        at += count
    return dd.from_delayed(futures, meta=df.iloc[:0], verify_meta=False)


@pytest.mark.parametrize("balance", [True, False])
def test_training_evens_out_the_workers_rows_with_the_same_model(client2, balance, caplog):
    """Five partitions on one worker and one on the other: the training copies two over (and
    says so) and each worker trains 1,500 rows; the model and its evaluation equal the
    in-process ones, as they do without the balancing (the config turns it off)."""
    df = make_table(n_rows=3000, task="binary", seed=61)
    valid = make_table(n_rows=600, task="binary", seed=62)
    params = {"objective": "binary:logistic", "max_depth": 4, "subsample": 0.7}
    expected = gbflow.train(df, label="y", params=params, num_boost_round=5,
                            evals=[(valid, "v")], verbose=False)
    ddf = _uneven_frame(client2, df, [5, 1])
    caplog.set_level("INFO", logger="gbflow")
    with dask.config.set({"gbflow.balance-partitions": balance}):
        booster = gbflow.train(ddf, label="y", params=params, num_boost_round=5,
                               evals=[(dd.from_pandas(valid, npartitions=2), "v")],
                               verbose=True, client=client2)
    rows = sorted(r["rows"] for r in booster.worker_report)
    said = caplog.text
    if balance:
        assert rows == [1500, 1500]
        assert "copying 2 training partition(s) (1,000 rows) to even out" in said
    else:
        assert rows == [500, 2500] and "to even out" not in said
    assert booster.to_json() == expected.to_json()
    assert booster.evals_result == expected.evals_result
    assert len(client2.compute(ddf).result()) == 3000  # the user's partitions are untouched
