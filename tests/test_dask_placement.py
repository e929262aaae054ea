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


def test_a_small_gain_moves_nothing_and_empty_partitions_never_move():
    # a 1,000 rows, b 900: moving the 40-row partition gives 960 / 940, a 4% gain
    assert training_owners([["a"], ["a"], ["b"]], [960, 40, 900]) == ["a", "a", "b"]
    assert training_owners([["a"], ["a"], ["b"]], [940, 60, 800]) == ["a", "b", "b"]
    owner = training_owners([["a"]] * 4 + [["b"]], [0, 0, 600, 600, 0])
    assert owner[:2] == ["a", "a"] and sorted(owner[2:4]) == ["a", "b"]


def test_the_move_taken_is_the_one_nearest_half_the_gap():
    # a 1,000 rows, b 0 (an empty partition): 500 evens them out exactly
    owner = training_owners([["a"]] * 4 + [["b"]], [100, 500, 400, 0, 0])
    assert owner == ["a", "b", "a", "a", "b"]


def test_many_partitions_are_planned_quickly():
    import time
    holders = [["a"]] * 9000 + [["b"]] * 1000
    rows = np.random.default_rng(0).integers(1, 1000, 10_000).tolist()
    start = time.perf_counter()
    owner = training_owners(holders, rows)
    assert time.perf_counter() - start < 2.0
    loads = _loads(owner, rows)
    assert abs(loads["a"] - loads["b"]) < 1000


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


def test_an_evaluation_set_sharing_the_moved_partitions_reads_their_copies(client2):
    """The training frame itself as an evaluation set (the same keys, as the estimators'
    ``fit(X, y, eval_set=[(X, y)])`` give): a moved partition is read from its copy by both,
    and its original, released once copied, is never read (``on_worker_lost="raise"``: the
    partitions are not kept for restarts)."""
    df = make_table(n_rows=3000, task="binary", seed=63)
    params = {"objective": "binary:logistic", "max_depth": 3}
    expected = gbflow.train(df, label="y", params=params, num_boost_round=4,
                            evals=[(df, "train")], verbose=False)
    # computed from the scattered frame where it lies: its keys held by the training alone
    ddf = _uneven_frame(client2, df, [5, 1]).map_partitions(lambda p: p.copy())
    booster = gbflow.train(ddf, label="y", params=params, num_boost_round=4,
                           evals=[(ddf.copy(), "train")], verbose=False, client=client2,
                           on_worker_lost="raise")
    assert sorted(r["rows"] for r in booster.worker_report) == [1500, 1500]
    assert booster.to_json() == expected.to_json()
    assert booster.evals_result == expected.evals_result

    X, y = ddf.drop(columns="y"), ddf["y"]
    settings = dict(n_estimators=4, max_depth=3)
    in_memory = gbflow.GBFlowClassifier(**settings).fit(
        df.drop(columns="y"), df["y"], eval_set=[(df.drop(columns="y"), df["y"])])
    with client2.as_current():
        model = gbflow.GBFlowClassifier(**settings).fit(X, y, eval_set=[(X, y)])
    assert model.get_booster().to_json() == in_memory.get_booster().to_json()
    assert model.evals_result() == in_memory.evals_result()


def test_without_room_for_the_moves_the_partitions_stay(client2, monkeypatch):
    from gbflow.dask import driver
    monkeypatch.setattr(driver._Cluster, "_room_for", lambda self, owner, rows: False)
    df = make_table(n_rows=3000, task="binary", seed=64)
    booster = gbflow.train(_uneven_frame(client2, df, [5, 1]), label="y", num_boost_round=2,
                           verbose=False, client=client2)
    assert sorted(r["rows"] for r in booster.worker_report) == [500, 2500]


def test_row_counting_groups_are_a_workers_partitions_up_to_a_byte_bound():
    """One counting task per run of a worker's partitions of at most COUNT_GROUP_BYTES (one
    partition at least: a large one alone), partitions of no known holder counted anywhere."""
    from gbflow.dask.placement import COUNT_GROUP_BYTES, counting_groups
    mb = 1 << 20
    holders = [["a"], ["b", "a"], ["a"], None, ["b"], ["a"], ["a"]]
    nbytes = [10 * mb, 5 * mb, 60 * mb, mb, 5 * mb, 2 * COUNT_GROUP_BYTES, mb]
    groups = counting_groups(holders, nbytes)
    assert groups == [("a", [0]), ("b", [1, 4]), ("a", [2]), (None, [3]), ("a", [5]),
                      ("a", [6])]
    assert sorted(j for _, js in groups for j in js) == list(range(len(holders)))
    assert counting_groups([["a"]] * 500, [100] * 500) == [("a", list(range(500)))]
