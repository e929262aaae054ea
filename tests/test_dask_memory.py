"""Dask training lets the raw partitions go: each worker's as soon as its task has copied them,
and nothing of gbflow's stays on the cluster once ``train`` returns or fails.

The garbage collector is off in these tests: what they check must follow from reference counts
alone (the leak they guard against lasted until the client's next collection). Clusters are
LocalClusters of threads, so the tests can look into the workers' memory.
"""
from __future__ import annotations

import gc
import time
import weakref

import numpy as np
import pandas as pd
import pytest

dask = pytest.importorskip("dask")
dd = pytest.importorskip("dask.dataframe")
distributed = pytest.importorskip("distributed")

from conftest import make_table  # noqa: E402

import gbflow  # noqa: E402
import gbflow.dask.task  # noqa: E402
from gbflow.backend import get_backend  # noqa: E402
from gbflow.callback import TrainingCallback  # noqa: E402
from gbflow.dask import loading, messages  # noqa: E402
from gbflow.evaluation import EvalOptions  # noqa: E402
from gbflow.params import make_params  # noqa: E402


@pytest.fixture(scope="module")
def client():
    cluster = distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=False,
                                       dashboard_address=":0")
    with distributed.Client(cluster, set_as_default=False) as c:
        yield c
    cluster.close()


@pytest.fixture(autouse=True)
def no_gc():
    gc.collect()  # what earlier tests left
    gc.disable()
    yield
    gc.enable()


def _frame(df: pd.DataFrame, n: int):
    """A lazy Dask DataFrame of ``n`` partitions (computed when training asks for them)."""
    bounds = np.linspace(0, len(df), n + 1).astype(int)
    parts = [df.iloc[a:b] for a, b in zip(bounds[:-1], bounds[1:])]
    return dd.from_delayed([dask.delayed(p.copy)() for p in parts], meta=parts[0].iloc[:0],
                           verify_meta=False)


def _worker_keys(client) -> set[str]:
    held = client.run(lambda dask_worker: [str(k) for k in dask_worker.data])
    return {k for keys in held.values() for k in keys}


def _scheduler_keys(client) -> set[str]:
    return set(client.run_on_scheduler(lambda dask_scheduler: [str(k) for k in
                                                               dask_scheduler.tasks]))


def _settle(client, expected: set[str], keys=_worker_keys, limit: float = 5.0) -> set[str]:
    """The keys the workers hold (or the scheduler knows), once they are ``expected`` (releases
    take a few messages), or after ``limit`` seconds."""
    deadline = time.monotonic() + limit
    while (held := keys(client)) != expected and time.monotonic() < deadline:
        time.sleep(0.05)
    return held


def test_nothing_stays_on_the_cluster_after_train_returns(client):
    """The issue's leak: the partitions (training and evaluation) and the tasks' results stayed
    on the workers until the client's garbage collector ran."""
    df = make_table(n_rows=3000, seed=61)
    booster = gbflow.train(_frame(df.iloc[:2400], 6), label="y", num_boost_round=4,
                           evals=[(_frame(df.iloc[2400:], 2), "valid")], verbose=False,
                           client=client)
    assert booster.num_boosted_rounds() == 4
    assert _settle(client, set()) == set()
    assert _settle(client, set(), _scheduler_keys) == set()  # not only freed: forgotten


def test_a_restart_without_room_lets_the_kept_partitions_go(monkeypatch):
    """A worker leaves mid-training (the scheduler removes it): the restart reuses the
    partitions the first run kept, and, the workers left having no room to keep them beside
    training (forced here), lets them go once copied, as a run without room does. The model
    is the in-process one, and nothing stays on the cluster."""
    from gbflow.dask import driver, watch
    from gbflow.dask.kept import KeptPartitions
    rooms = []

    def room_first_time(needs, workers, pause_fraction):
        rooms.append(sorted(needs))
        return len(rooms) == 1

    forgotten = []
    forget = KeptPartitions.forget

    def spied_forget(self):
        forgotten.append(len(self.futures))
        return forget(self)

    watch_tasks, removed = watch.Watching._watch, []

    def remove_one_worker_first(self, tasks, addresses):
        if not removed:
            removed.append(addresses[-1])

            async def remove(dask_scheduler, address=addresses[-1]):
                await dask_scheduler.remove_worker(address=address, stimulus_id="test",
                                                   close=True)
            self.client.run_on_scheduler(remove)
        return watch_tasks(self, tasks, addresses)

    monkeypatch.setattr(driver, "room_to_keep", room_first_time)
    monkeypatch.setattr(KeptPartitions, "forget", spied_forget)
    monkeypatch.setattr(watch.Watching, "_watch", remove_one_worker_first)
    df = make_table(n_rows=3000, seed=68)
    kwargs = dict(label="y", num_boost_round=5, verbose=False)
    expected = gbflow.train(df.iloc[:2400], evals=[(df.iloc[2400:], "valid")], **kwargs)
    with distributed.LocalCluster(n_workers=3, threads_per_worker=1, processes=False,
                                  dashboard_address=":0") as cluster, \
            distributed.Client(cluster, set_as_default=False) as client:
        booster = gbflow.train(_frame(df.iloc[:2400], 6),
                               evals=[(_frame(df.iloc[2400:], 2), "valid")], client=client,
                               **kwargs)
        assert _settle(client, set()) == set()
        assert _settle(client, set(), _scheduler_keys) == set()
    assert booster.to_json() == expected.to_json()
    assert len(rooms) == 2 and removed and removed[0] not in rooms[1], (rooms, removed)
    assert forgotten == [8]  # 6 training and 2 evaluation partitions


def test_nothing_stays_after_a_failed_training(client):
    """The error's traceback (held here by pytest.raises) reaches the driver's frames: they must
    hold nothing on the cluster."""
    df = make_table(n_rows=1200, seed=62)
    df.loc[1000, "y"] = np.nan  # partition 3 of 4
    with pytest.raises(ValueError, match="partition 3") as caught:
        gbflow.train(_frame(df, 4), label="y", num_boost_round=3, verbose=False,
                     client=client)
    assert caught.value is not None
    assert _settle(client, set()) == set()
    assert _settle(client, set(), _scheduler_keys) == set()


@pytest.mark.parametrize("on_worker_lost", ["raise", "restart"])
def test_persisted_frames_stay_and_gbflows_copies_go(client, on_worker_lost):
    """The user's persisted partitions stay; evaluation partitions held by a worker that does
    not train are copied to one that does, and the copies go (whether or not the training
    keeps its partitions for a restart)."""
    a, b = sorted(client.nthreads())
    df = make_table(n_rows=2000, seed=63)
    train = client.persist(dd.from_pandas(df.iloc[:1500], npartitions=3), workers=[a])
    valid = client.persist(dd.from_pandas(df.iloc[1500:], npartitions=2), workers=[b])
    with client.as_current():
        distributed.wait([train, valid])
    persisted = _worker_keys(client)
    assert len(persisted) == 5
    booster = gbflow.train(train, label="y", num_boost_round=3, evals=[(valid, "valid")],
                           verbose=False, client=client, on_worker_lost=on_worker_lost)
    assert [r["address"] for r in booster.worker_report] == [a]  # b's partitions were copied
    assert _settle(client, persisted) == persisted
    assert len(client.compute(train).result()) == 1500
    del train, valid
    assert _settle(client, set()) == set()  # nothing of gbflow's kept them either


@pytest.mark.parametrize("on_worker_lost", ["raise", "restart"])
def test_an_evaluation_set_may_share_the_training_datas_keys(client, monkeypatch,
                                                             on_worker_lost):
    """Two frames of the same graph, built apart, share their keys: one compute gives one
    future per key, read by two placements, released when both have copied it (or kept for
    a restart until training ends)."""
    def fetch(worker, ref, what):
        if what != "training data":
            time.sleep(0.5)  # time for a release after the training data's copy to land
        return loading.fetch(worker, ref, what)

    monkeypatch.setattr(gbflow.dask.task, "fetch", fetch)
    df = make_table(n_rows=1200, seed=67)
    train, again = (dd.from_pandas(df, npartitions=3) for _ in range(2))
    assert train is not again and train.__dask_keys__() == again.__dask_keys__()
    booster = gbflow.train(train, label="y", num_boost_round=3, evals=[(again, "again")],
                           verbose=False, client=client, on_worker_lost=on_worker_lost)
    assert len(booster.evals_result["again"]["rmse"]) == 3
    assert _settle(client, set()) == set()


_FETCHED: list = []  # (worker address, key, weakref to the partition) per partition read
_JOINED: list = []  # weakrefs to each task's joined float32 training matrix (and its base)
_SEEN: dict = {}  # worker address -> what the callback found before the first round


class _LookBeforeTraining(TrainingCallback):
    """Before the first round (the data binned, training about to start), on each worker: wait
    (a few seconds at most, ``patience``) for the partitions it read to leave the worker's
    memory, then note what is left: keys, partition frames, joined matrices."""

    def __init__(self, patience: float = 5.0):
        self.patience = patience

    def before_training(self, model):
        from distributed import get_worker
        worker = get_worker()
        mine = [(key, ref) for address, key, ref in _FETCHED if address == worker.address]
        deadline = time.monotonic() + self.patience
        while (held := [key for key, _ in mine if key in worker.data]) and \
                time.monotonic() < deadline:
            time.sleep(0.02)
        _SEEN[worker.address] = {
            "read": len(mine), "held": held,
            "alive": sum(ref() is not None for _, ref in mine),
            "joined": sum(ref() is not None for ref in _JOINED)}
        return model


@pytest.mark.parametrize("on_worker_lost", ["raise", "restart"])
def test_raw_partitions_are_released_before_training_starts(client, monkeypatch,
                                                            on_worker_lost):
    """While the task trains, its worker keeps none of the partitions (training's and the
    evaluation set's): gbflow dropped every reference it had to them and to the joined float32
    matrix once they were copied and binned, and Dask freed them. Unless a training that
    would restart after a lost worker keeps them for it (the workers here have room): then
    each worker holds the partitions it read until training ends, and they go then."""
    def fetch(worker, ref, what):
        frame = loading.fetch(worker, ref, what)
        _FETCHED.append((worker.address, ref.key, weakref.ref(frame)))
        return frame

    class Joined(loading.JoinedPartitions):
        def __init__(self, backend, spec, table, key, *args, **kwargs):
            super().__init__(backend, spec, table, key, *args, **kwargs)
            if key == 0:  # the training data (an evaluation set's stays with its EvalSet)
                X = self.part.X
                _JOINED.extend(weakref.ref(a) for a in (X, X.base) if a is not None)

    monkeypatch.setattr(gbflow.dask.task, "fetch", fetch)
    monkeypatch.setattr(gbflow.dask.task, "JoinedPartitions", Joined)
    _FETCHED.clear(), _JOINED.clear(), _SEEN.clear()
    df = make_table(n_rows=4000, seed=64)
    kept = on_worker_lost == "restart"
    booster = gbflow.train(_frame(df.iloc[:3200], 6), label="y", num_boost_round=2,
                           evals=[(_frame(df.iloc[3200:], 2), "valid")], verbose=False,
                           client=client, on_worker_lost=on_worker_lost,
                           callbacks=[_LookBeforeTraining(0.5 if kept else 5.0)])
    assert len(booster.worker_report) == len(_SEEN) >= 1
    assert sum(s["read"] for s in _SEEN.values()) == 8
    for seen in _SEEN.values():
        assert seen["joined"] == 0, seen
        if kept:
            assert len(seen["held"]) == seen["read"] == seen["alive"], seen
        else:
            assert seen["held"] == [] and seen["alive"] == 0, seen
    assert _settle(client, set()) == set()


def _spec(df):
    return messages.Spec(session="", topic="", params=make_params({}), num_boost_round=1,
                         options=EvalOptions(), verbose=False, label="y", weight="w",
                         features=tuple(c for c in df.columns if c not in ("y", "w")),
                         train=messages.Table("training data", tuple(df.columns)), evals=(),
                         timeout=1.0)


def test_a_partition_is_let_go_before_the_next_is_read():
    """One partition at a time: none is read before the ones before it are copied and let go,
    labels and weights included (views of a partition's memory kept all of it alive)."""
    df = make_table(n_rows=400, seed=65).assign(w=1.5)
    bounds = [0, 100, 250, 250, 400]
    arrays = []  # weakrefs to each partition's memory

    def partition(i):
        def read():
            assert all(a() is None for a in arrays), "an earlier partition is still alive"
            values = df.iloc[bounds[i]: bounds[i + 1]].to_numpy().T.copy()  # one block
            arrays.append(weakref.ref(values))
            return pd.DataFrame(values.T, columns=df.columns, copy=False)
        return read

    released = []
    items = [(i, bounds[i + 1] - bounds[i], partition(i)) for i in range(4)]
    joined = loading.JoinedPartitions(get_backend("cpu"), _spec(df), _spec(df).train, 0,
                                      items, released.append)
    assert items == [] and released == [0, 1, 2, 3] and not joined.errors
    assert all(a() is None for a in arrays)
    np.testing.assert_array_equal(joined.part.X, df.drop(columns=["y", "w"]).to_numpy(np.float32))
    np.testing.assert_array_equal(joined.part.label, df["y"].to_numpy())
    np.testing.assert_array_equal(joined.part.weight, df["w"].to_numpy())


def test_a_partition_with_other_rows_than_counted_is_an_error():
    df = make_table(n_rows=100, seed=66).assign(w=1.0)
    joined = loading.JoinedPartitions(get_backend("cpu"), _spec(df), _spec(df).train, 0,
                                      [(0, 60, df.iloc[:60]), (1, 30, lambda: df.iloc[60:])])
    assert joined.lengths == {0: 60} and joined.part.n_rows == 60
    [(where, error)] = joined.errors
    assert where == (0, 1) and "partition 1 has 40 rows where 30 were counted" in str(error)


def test_rows_are_counted_by_a_task_a_worker_and_copies_told_in_batches(client, monkeypatch):
    """Many small partitions: the driver counts rows with one task per worker (not one a
    partition), and each training task tells the driver of its copied partitions in a few
    events (all of them at the end here, with a period longer than the loading); the raw
    partitions still go, and the model is the in-process one."""
    told = []
    flush = gbflow.dask.task.CopiedNotices.flush

    def spy(self):
        told.append(len(self.places))
        flush(self)

    monkeypatch.setattr(gbflow.dask.task.CopiedNotices, "PERIOD", 3600.0)
    monkeypatch.setattr(gbflow.dask.task.CopiedNotices, "flush", spy)
    df = make_table(n_rows=3000, seed=65)
    with distributed.get_task_stream(client=client) as stream:
        booster = gbflow.train(_frame(df, 60), label="y", num_boost_round=2, verbose=False,
                               client=client, on_worker_lost="raise")
    counting = [t for t in stream.data if str(t["key"]).startswith("partition_lengths")]
    assert 1 <= len(counting) <= 2  # (a worker holding no partition counts none)
    assert sum(told) == 60 and len([n for n in told if n]) == len(booster.worker_report)
    assert booster.to_json() == gbflow.train(df, label="y", num_boost_round=2,
                                             verbose=False).to_json()
    assert _settle(client, set()) == set()
