"""The Dask collective on its own (results, aborts, timeouts) and worker loss mid-training.

The collective tests run tasks on a LocalCluster of threads; the worker-loss test needs worker
processes (a LocalCluster with nannies, over TCP), killed with SIGKILL while training.
"""
from __future__ import annotations

import os
import signal
import threading
import time
import uuid

import numpy as np
import pytest

dd = pytest.importorskip("dask.dataframe")
distributed = pytest.importorskip("distributed")

from conftest import make_table  # noqa: E402

import gbflow  # noqa: E402
import gbflow.dask  # noqa: E402
from gbflow.dask import collective  # noqa: E402


@pytest.fixture(scope="module")
def client3():
    with distributed.LocalCluster(n_workers=3, threads_per_worker=1, processes=False,
                                  dashboard_address=":0") as cluster, \
            distributed.Client(cluster, set_as_default=False) as client:
        client.register_plugin(collective.CollectivePlugin(), name=collective.CollectivePlugin.name)
        yield client


def _job(session, rank, addresses, fail_rank, silent_rank, timeout):
    """One rank of a small collective program, run as a task on its worker."""
    worker = distributed.get_worker()
    c = collective.DaskCollective(worker, session, rank, addresses, timeout)
    try:
        if rank == silent_rank:
            time.sleep(timeout + 1.0)  # takes no part
            return None
        if rank == fail_rank:
            c.abort_peers(f"rank {rank} failed on purpose")
            raise ValueError("failed on purpose")
        total = c.allreduce_sum(np.array([rank + 1, 10 * (rank + 1)], dtype=np.int64))
        largest = c.allreduce_max(float(rank) * 1.5)
        gathered = c.allgather({"rank": rank})
        return total.tolist(), largest, gathered
    finally:
        c.close()


def _run(client, fail_rank=-1, silent_rank=-1, timeout=30.0):
    addresses = sorted(client.scheduler_info(n_workers=-1)["workers"])
    session = uuid.uuid4().hex
    return [client.submit(_job, session, r, addresses, fail_rank, silent_rank, timeout,
                          workers=[a], pure=False) for r, a in enumerate(addresses)]


def _settle(futures, limit: float = 20.0):
    deadline = time.monotonic() + limit
    while not all(f.done() for f in futures):
        assert time.monotonic() < deadline, "the collective tasks did not end"
        time.sleep(0.02)


def test_allreduce_and_allgather_on_three_ranks(client3):
    results = client3.gather(_run(client3))
    for total, largest, gathered in results:  # every rank gets the same, rank-ordered results
        assert total == [6, 60] and largest == 3.0
        assert gathered == [{"rank": 0}, {"rank": 1}, {"rank": 2}]


def test_a_failing_rank_aborts_the_others_at_once(client3):
    start = time.monotonic()
    futures = _run(client3, fail_rank=1)
    _settle(futures)
    assert time.monotonic() - start < 10
    assert isinstance(futures[1].exception(), ValueError)
    for f in (futures[0], futures[2]):
        error = f.exception()
        assert isinstance(error, collective.CollectiveAborted) and "rank 1 failed" in str(error)
    assert client3.run(collective.active_sessions) == {a: [] for a in
                                                       client3.scheduler_info()["workers"]}


def test_a_silent_rank_times_out(client3):
    futures = _run(client3, silent_rank=2, timeout=1.0)
    _settle(futures)
    errors = [futures[r].exception() for r in (0, 1)]
    assert all(isinstance(e, collective.CollectiveTimeout) for e in errors)
    assert any("rank 2" in str(e) for e in errors)


def test_a_lost_worker_fails_training_fast():
    """SIGKILL one of two worker processes mid-training: train() raises WorkerLostError naming it
    within seconds (the limit asked for is 60 s), the survivor's task ends, and the cluster
    (its nanny restarts the dead worker) trains again afterwards."""
    df = make_table(n_rows=2000, seed=40)
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                  dashboard_address=":0") as cluster, \
            distributed.Client(cluster, set_as_default=False) as client:
        ddf = client.persist(dd.from_pandas(df, npartitions=4))
        outcome = {}

        def train():
            try:
                gbflow.train(ddf, label="y", params={"max_depth": 3},
                             num_boost_round=100_000, verbose=False, client=client)
                outcome["error"] = None
            except BaseException as e:  # noqa: BLE001 - the test inspects it
                outcome["error"] = e
            outcome["at"] = time.monotonic()

        thread = threading.Thread(target=train, daemon=True)
        thread.start()
        deadline = time.monotonic() + 60
        while not all(client.run(collective.active_sessions).values()):  # both tasks running
            assert time.monotonic() < deadline and thread.is_alive()
            time.sleep(0.05)
        time.sleep(0.5)  # well into the boosting rounds
        pids = client.run(os.getpid)
        victim = sorted(pids)[-1]
        killed_at = time.monotonic()
        os.kill(pids[victim], signal.SIGKILL)
        thread.join(60)
        assert not thread.is_alive(), "train() still running 60 s after a worker was killed"
        error = outcome["error"]
        assert isinstance(error, gbflow.dask.WorkerLostError), repr(error)
        assert victim in str(error)
        assert outcome["at"] - killed_at < 30
        survivor = [a for a in pids if a != victim]
        for _ in range(100):  # the survivor's task was told to stop
            if not client.run(collective.active_sessions, workers=survivor)[survivor[0]]:
                break
            time.sleep(0.05)
        else:
            pytest.fail("the surviving worker still runs its training task")
        client.wait_for_workers(2, timeout=60)
        booster = gbflow.train(dd.from_pandas(df, npartitions=2), label="y",
                               num_boost_round=2, verbose=False, client=client)
        assert booster.to_json() == gbflow.train(df, label="y", num_boost_round=2,
                                                 verbose=False).to_json()


def test_an_error_on_one_worker_mid_training_is_the_error_raised(monkeypatch):
    """A task failing mid-training aborts the others at once, and train() raises the failing
    task's own error, not the others' echoes of it."""
    from gbflow import boosting

    grow = boosting.grow_tree
    calls = {}

    def failing_grow(shardset, *args, **kwargs):
        address = distributed.get_worker().address
        calls[address] = calls.get(address, 0) + 1
        if shardset.collective.rank == 1 and calls[address] == 3:
            raise RuntimeError("boom on purpose")
        return grow(shardset, *args, **kwargs)

    monkeypatch.setattr(boosting, "grow_tree", failing_grow)
    df = make_table(n_rows=1200, seed=42)
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=False,
                                  dashboard_address=":0") as cluster, \
            distributed.Client(cluster, set_as_default=False) as client:
        start = time.monotonic()
        with pytest.raises(RuntimeError, match="boom on purpose"):
            gbflow.train(dd.from_pandas(df, npartitions=4), label="y", num_boost_round=50,
                         verbose=False, client=client)
        assert time.monotonic() - start < 20
        assert all(not s for s in client.run(collective.active_sessions).values())
