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
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest

dask = pytest.importorskip("dask")
dd = pytest.importorskip("dask.dataframe")
distributed = pytest.importorskip("distributed")

from conftest import make_table  # noqa: E402

import gbflow  # noqa: E402
import gbflow.dask  # noqa: E402
from gbflow.dask import collective, watch  # noqa: E402
from gbflow.dask.watch import scheduler_workers  # noqa: E402


@pytest.fixture(scope="module")
def client3():
    with distributed.LocalCluster(n_workers=3, threads_per_worker=1, processes=False,
                                  dashboard_address=":0") as cluster, \
            distributed.Client(cluster, set_as_default=False) as client:
        client.register_plugin(collective.CollectivePlugin(), name=collective.CollectivePlugin.name)
        yield client


@pytest.fixture(scope="module")
def compiled(client3):
    """The kernels the process-cluster tests' trainings use, compiled into numba's disk cache
    by the same trainings on threads: a worker process then loads them, and a test that times
    an abort or a timeout does not time the first compile (a task cannot stop inside one)."""
    for task, params, evals in [
            ("regression", {"max_depth": 3}, False),
            ("binary", {"objective": "binary:logistic", "max_depth": 4, "subsample": 0.8,
                        "colsample_bytree": 0.8}, True)]:
        df = make_table(n_rows=1000, task=task, seed=47)
        kwargs = {"evals": [(dd.from_pandas(df, npartitions=2), "valid")]} if evals else {}
        gbflow.train(dd.from_pandas(df, npartitions=3), label="y", params=params,
                     num_boost_round=2, verbose=False, client=client3, **kwargs)


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
    addresses = sorted(client.nthreads())
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
    assert client3.run(collective.active_sessions) == {a: [] for a in client3.nthreads()}


def test_a_silent_rank_times_out(client3):
    futures = _run(client3, silent_rank=2, timeout=1.0)
    _settle(futures)
    errors = [futures[r].exception() for r in (0, 1)]
    assert all(isinstance(e, collective.CollectiveTimeout) for e in errors)
    assert any("rank 2" in str(e) for e in errors)


def _gbflow_topics(dask_scheduler=None) -> list:
    return [t for t in dask_scheduler._broker._topics if t.startswith("gbflow-")]


def test_training_does_not_read_the_clients_cached_worker_list(client3, monkeypatch):
    """distributed's periodic update of the client's scheduler info can replace it with one
    listing no worker between a fetch and its read (``client.scheduler_info()`` returns that
    cache): a driver reading it saw every training worker "left the cluster" and, with
    on_worker_lost="raise", failed a healthy training. The driver asks the scheduler. After
    the run, the scheduler no longer keeps its events (every round's trees)."""
    monkeypatch.setattr(client3, "scheduler_info", lambda *a, **k: {"workers": {}})
    ddf = dd.from_pandas(make_table(n_rows=600, seed=5), npartitions=3)
    booster = gbflow.train(ddf, label="y", num_boost_round=3, verbose=False, client=client3,
                           on_worker_lost="raise")
    assert booster.num_boosted_rounds() == 3
    assert set(scheduler_workers(client3)) == set(client3.nthreads())
    booster = gbflow.train(ddf, label="y", num_boost_round=3, verbose=False, client=client3)
    assert client3.run_on_scheduler(_gbflow_topics) == []


class _Watcher(watch.Watching):
    """The driver's waits alone, on a client."""

    def __init__(self, client):
        self.client, self.spec, self.started = client, SimpleNamespace(timeout=30.0), set()

    def _workers(self) -> dict:
        return scheduler_workers(self.client)


def test_a_task_pinned_to_a_lost_worker_ends_the_drivers_wait(client3):
    """The driver's row counts and evaluation copies run pinned to a worker; when it leaves,
    Dask waits for it forever (and a finished task whose result went with its worker is run
    again there). The driver's waits end with WorkerLostError, which a restart recovers
    from. A worker address that is not in the cluster stands for the lost one."""
    gone = "tcp://192.0.2.1:9"
    future = client3.submit(len, [1, 2], workers=[gone], allow_other_workers=False, pure=False)
    watcher, start = _Watcher(client3), time.monotonic()
    with pytest.raises(gbflow.dask.WorkerLostError, match=r"192\.0\.2\.1:9'\] left the "
                                                           r"cluster while counting rows"):
        watcher._wait_all([future], "counting rows", pinned=[[gone]])
    with pytest.raises(gbflow.dask.WorkerLostError, match="while fetching the model"):
        watcher._results([future], [[gone]], "fetching the model")
    assert time.monotonic() - start < 5
    future.release()
    here = sorted(client3.nthreads())[0]
    future = client3.submit(len, [1, 2], workers=[here], allow_other_workers=False, pure=False)
    watcher._wait_all([future], "counting rows", pinned=[[here]])
    assert watcher._results([future], [[here]], "fetching") == [2]
    # a task's own error stays its error (not a lost worker), even pinned to one that left
    failing = client3.submit(len, 5, workers=[here], allow_other_workers=False, pure=False)
    with pytest.raises(TypeError, match="has no len"):
        watcher._results([failing], [[gone]], "counting rows")


def test_a_task_that_cannot_start_on_a_busy_worker_is_named_busy_not_paused(client3):
    """A training task queued behind other work for the whole collective timeout: the error
    names the worker (running) and says it was busy, not that it was paused."""
    address = sorted(client3.nthreads())[0]
    blocker = client3.submit(time.sleep, 3, workers=[address], pure=False)
    time.sleep(0.2)
    task = client3.submit(len, [1], workers=[address], allow_other_workers=False, pure=False)
    watcher = _Watcher(client3)
    watcher.spec.timeout, watcher.known = 1.0, SimpleNamespace(save=lambda: None)
    with pytest.raises(gbflow.dask.CollectiveTimeout,
                       match=r"did not start on worker\(s\) \[.*\(running\)\] .*ran other "
                             r"tasks all that time"):
        watcher._watch([task], [address])
    client3.cancel([blocker, task])


def test_a_sessions_abort_closes_the_mailboxes_no_task_opened():
    """A peer's message opens the mailbox of a rank whose task has not started; if that task
    never starts (cancelled while queued after a failure), only the session's abort can close
    it. A mailbox its task opened is aborted and left to the task to close."""
    import asyncio

    session = uuid.uuid4().hex
    opened = collective.DaskCollective(None, session, 0, ["a", "b"], 1.0)
    asyncio.run(collective._handle(session, 1, tag="x", source=0, payload=1))
    assert collective.active_sessions().count(session) == 1
    asyncio.run(collective.abort_session(session, "stopped"))
    assert opened.box.abort_reason == "stopped"
    assert asyncio.run(collective._handle(session, 1, tag="y", source=0, payload=2)) == "closed"
    collective._close_mailbox(session, 0)
    assert session not in collective.active_sessions()


def test_a_lost_worker_fails_training_fast(compiled):
    """on_worker_lost="raise": SIGKILL one of two worker processes mid-training: train() raises
    WorkerLostError naming it
    within seconds, the survivor's task ends, and the cluster
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
                             num_boost_round=100_000, verbose=False, client=client,
                             on_worker_lost="raise")
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
        # the survivor's task was told to stop: it ends within seconds (20 s: under a full
        # test run on two cores it took over 5 s at times)
        for _ in range(400):
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


def _processes_cluster(n: int):
    return distributed.LocalCluster(n_workers=n, threads_per_worker=1, processes=True,
                                    dashboard_address=":0")


def _in_thread(fn) -> tuple[threading.Thread, dict]:
    outcome = {}

    def run():
        try:
            outcome["result"] = fn()
        except BaseException as e:  # noqa: BLE001 - the test inspects it
            outcome["error"] = e
        outcome["at"] = time.monotonic()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, outcome


def _training_forever(ddf, client, watcher) -> tuple[threading.Thread, dict]:
    """train() of (practically) endless rounds on ``client`` in a thread, returned once every
    worker runs its training task (seen through ``watcher``, a client of the same cluster)."""
    thread, outcome = _in_thread(lambda: gbflow.train(
        ddf, label="y", params={"max_depth": 3}, num_boost_round=100_000, verbose=False,
        client=client))
    deadline = time.monotonic() + 60
    while not all(watcher.run(collective.active_sessions).values()):
        assert time.monotonic() < deadline and thread.is_alive(), outcome.get("error")
        time.sleep(0.05)
    return thread, outcome


def _wait_for_round(client, session_rounds: dict, at_least: int, thread, limit=60.0):
    deadline = time.monotonic() + limit
    while session_rounds.get("rounds", 0) < at_least:
        assert time.monotonic() < deadline and thread.is_alive(), "training did not progress"
        time.sleep(0.02)


@pytest.mark.parametrize("evals", [False, True])
def test_a_killed_worker_is_survived_with_the_same_model(evals, compiled, tmp_path, caplog):
    """SIGKILL one of three worker processes at a random round: train() restarts from the last
    completed round on the workers left and the model file and evaluation history equal an
    uninterrupted run's, and so does the checkpoint the driver wrote from the rounds it was
    told of. The partitions were kept (the workers have room): the restart computes again the
    lost worker's partitions and no other (every computation leaves a file naming its
    partition and worker)."""
    caplog.set_level("INFO", logger="gbflow")
    df = make_table(n_rows=6000, task="binary", seed=41)
    valid = make_table(n_rows=1500, task="binary", seed=42)
    params = {"objective": "binary:logistic", "max_depth": 4, "subsample": 0.8,
              "colsample_bytree": 0.8, "learning_rate": 0.05}
    kwargs = dict(label="y", params=params, num_boost_round=60, verbose=False)
    if evals:
        kwargs.update(evals=[(dd.from_pandas(valid, npartitions=3), "valid")],
                      early_stopping_rounds=30)
    rng = np.random.default_rng()
    kill_at = int(rng.integers(5, 40))
    computed = tmp_path / "computed"
    computed.mkdir()

    def marked(frame, run, partition_info=None):
        if partition_info is not None:  # (None: Dask's look at the meta)
            name = f"{len(frame)}-{partition_info['number']}-{uuid.uuid4().hex}"
            (computed / name).write_text(distributed.get_worker().address)
        return frame

    def computations() -> list[tuple[int, str]]:
        """(partition, worker) of each computation of a 6,000-row set's partitions so far."""
        return sorted((int(p.name.split("-")[1]), p.read_text()) for p in computed.iterdir()
                      if p.name.startswith("1000-"))

    with _processes_cluster(3) as cluster, distributed.Client(cluster,
                                                              set_as_default=False) as client:
        def frame(run: int):
            # a run's own graph keys: the second run's partitions are computed again, never
            # taken from the first run's results while the workers release them (seen once)
            return dd.from_pandas(df, npartitions=6).map_partitions(marked, run,
                                                                    meta=df.iloc[:0])
        whole = gbflow.train(frame(1), client=client, **kwargs)
        for p in computed.iterdir():
            p.unlink()
        ddf = frame(2)
        seen = {}
        from gbflow.dask import rounds as rounds_module
        put = rounds_module.KnownRounds.put

        def spy(self, message):
            put(self, message)
            seen["rounds"] = self.rounds

        rounds_module.KnownRounds.put = spy
        try:
            thread, outcome = _in_thread(lambda: gbflow.train(
                ddf, client=client, checkpoint=(tmp_path / "job.json", 1), **kwargs))
            _wait_for_round(client, seen, kill_at, thread)
            pids = client.run(os.getpid)
            victim = sorted(pids)[1]
            killed_at, killed_round = time.monotonic(), seen["rounds"]
            os.kill(pids[victim], signal.SIGKILL)
            thread.join(120)
        finally:
            rounds_module.KnownRounds.put = put
        assert not thread.is_alive(), "train() still running 120 s after a worker was killed"
        assert "error" not in outcome, repr(outcome.get("error"))
        booster = outcome["result"]
        assert booster.to_json() == whole.to_json()
        assert booster.evals_result == whole.evals_result
        # worker processes talk TCP: both runs reduced over direct links (dask/sockets.py)
        assert {r["transport"] for r in whole.worker_report + booster.worker_report} == \
            {"sockets"}
        assert gbflow.load_model(tmp_path / "job.json").to_json() == whole.to_json()
        restarts = [r.getMessage() for r in caplog.records if "restarting from round" in
                    r.getMessage()]
        assert len(restarts) == 1 and victim in restarts[0], restarts
        done = computations()
        assert sorted({p for p, _ in done}) == list(range(6)), done
        again = [p for p in range(6) if sum(q == p for q, _ in done) > 1]
        # a partition is computed once, where it stays; a second time only if its worker died
        assert again and all(sum(q == p for q, _ in done) == 2 for p in again), done
        held_by_victim = {p for p, address in done if address == victim}
        assert set(again) <= held_by_victim, (done, victim)
        print(f"killed at round {killed_round}; train() ended {outcome['at'] - killed_at:.1f} s "
              f"later")


def test_a_stopped_worker_ends_training_with_an_error_naming_it(compiled):
    """SIGSTOP one of three worker processes mid-training (a hung worker the scheduler still
    lists): train() raises CollectiveTimeout naming it within the collective timeout plus 10 s,
    instead of waiting for it forever."""
    df = make_table(n_rows=3000, seed=43)
    with dask.config.set({"gbflow.collective-timeout": "3s"}), _processes_cluster(3) as cluster, \
            distributed.Client(cluster, set_as_default=False) as client:
        ddf = client.persist(dd.from_pandas(df, npartitions=6))
        thread, outcome = _training_forever(ddf, client, client)
        time.sleep(0.5)
        pids = client.run(os.getpid)
        victim = sorted(pids)[-1]
        stopped_at = time.monotonic()
        os.kill(pids[victim], signal.SIGSTOP)
        try:
            thread.join(3 + 10)
            assert not thread.is_alive(), "train() still waits for the stopped worker"
        finally:
            os.kill(pids[victim], signal.SIGCONT)
        error = outcome.get("error")
        assert isinstance(error, gbflow.dask.CollectiveTimeout), repr(error)
        assert victim in str(error) and "stopped answering" in str(error)
        assert outcome["at"] - stopped_at < 3 + 10


def test_paused_workers_end_training_with_an_error_naming_them():
    """Workers Dask paused at their memory limit run no task: train() says so, naming them,
    once nothing progressed for the collective timeout, instead of waiting forever. (With one
    worker still running, the partitions go there and training succeeds.)"""
    df = make_table(n_rows=600, seed=44)
    with dask.config.set({"gbflow.collective-timeout": "2s"}), \
            distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=False,
                                     dashboard_address=":0") as cluster, \
            distributed.Client(cluster, set_as_default=False) as client:
        ddf = client.persist(dd.from_pandas(df, npartitions=4))
        client.gather(distributed.futures_of(ddf))  # computed before the pause
        # the workers' memory monitors pause them: their memory is above the pause fraction
        client.run(lambda dask_worker: setattr(dask_worker.memory_manager,
                                               "memory_pause_fraction", 1e-9))
        deadline = time.monotonic() + 10
        while any(w["status"] != "paused" for w in scheduler_workers(client).values()):
            assert time.monotonic() < deadline
            time.sleep(0.05)
        start = time.monotonic()
        with pytest.raises(gbflow.dask.CollectiveTimeout,
                           match=r"made no progress for 2 s .*\(paused\).*memory pause"):
            gbflow.train(ddf, label="y", num_boost_round=5, verbose=False, client=client)
        assert time.monotonic() - start < 2 + 10
        client.run(lambda dask_worker: setattr(dask_worker.memory_manager,
                                               "memory_pause_fraction", 0.8))


def test_memory_starved_workers_end_training_with_a_clear_error():
    """Workers at Dask's memory limit (300 MB each, 128 MB of data): train() ends within the
    collective timeout plus 10 s with an error naming the workers and their memory (before
    training, the estimate's MemoryError; if Dask paused them first, the paused workers),
    instead of waiting at round 0."""
    rng = np.random.default_rng(46)
    n, f = 800_000, 40
    df = pd.DataFrame(rng.standard_normal((n, f), dtype=np.float32),
                      columns=[f"x{i}" for i in range(f)]).assign(y=np.float32(1.0))
    with dask.config.set({"gbflow.collective-timeout": "5s"}), \
            distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                     memory_limit="300MB", dashboard_address=":0") as cluster, \
            distributed.Client(cluster, set_as_default=False) as client:
        ddf = client.persist(dd.from_pandas(df, npartitions=4))
        del df
        start = time.monotonic()
        with pytest.raises((MemoryError, gbflow.dask.CollectiveTimeout)) as info:
            gbflow.train(ddf, label="y", num_boost_round=5, verbose=False, client=client)
        assert "memory" in str(info.value) and "tcp://" in str(info.value)
        assert time.monotonic() - start < 5 + 10
        # the workers' cancelled training tasks close their sessions as they end: soon after
        # train() raises, not necessarily before (under load, seconds later)
        deadline = time.monotonic() + 10
        while any(client.run(collective.active_sessions).values()):
            assert time.monotonic() < deadline, "a worker kept its training session open"
            time.sleep(0.1)


def test_the_memory_estimate_refuses_workers_without_room():
    from gbflow.dask.memory import check_worker_memory, training_bytes
    need = training_bytes(400_000, 100_000, 40, 1, 1)
    assert need == 400_000 * (40 * 5 + 24 + 32) + 100_000 * (40 * 5 + 8)
    workers = {"tcp://a:1": {"memory_limit": 300 * 2**20, "metrics": {"memory": 150 * 2**20}},
               "tcp://b:2": {"memory_limit": 8 * 2**30, "metrics": {"memory": 150 * 2**20}},
               "tcp://c:3": {"memory_limit": 0, "metrics": {"memory": 150 * 2**20}}}
    needs = {a: (need, 400_000) for a in workers}
    with pytest.raises(MemoryError, match=r"tcp://a:1 needs about 117 MiB for its 400,000 rows "
                                          r"but has 90 MiB \(memory_limit 300 MiB x pause "
                                          r"fraction 0.8 - 150 MiB in use\)\. Dask would pause"
                       ) as info:
        check_worker_memory(needs, workers, 0.8)
    assert "tcp://b" not in str(info.value) and "tcp://c" not in str(info.value)
    check_worker_memory(needs, workers, False)  # pausing off: nothing to check


def test_partitions_are_kept_for_restarts_only_where_every_worker_has_room():
    """A training keeps its raw partitions for a restart when each worker's task needs at most
    half of what the worker has below the pause threshold; a worker without a memory limit,
    or pausing off, gives no room to judge: not kept."""
    from gbflow.dask.memory import room_to_keep
    mib = 2**20
    workers = {"tcp://a:1": {"memory_limit": 1000 * mib, "metrics": {"memory": 200 * mib}},
               "tcp://b:2": {"memory_limit": 0, "metrics": {"memory": 900 * mib}}}
    # a: 1000 x 0.8 - 200 = 600 MiB below the pause threshold
    assert room_to_keep({"tcp://a:1": (300 * mib, 1)}, workers, 0.8)
    assert not room_to_keep({"tcp://a:1": (300 * mib + 1, 1)}, workers, 0.8)
    assert not room_to_keep({"tcp://a:1": (300 * mib, 1), "tcp://b:2": (1, 1)}, workers, 0.8)
    assert not room_to_keep({"tcp://a:1": (1, 1)}, workers, False)


def test_eight_concurrent_trainings_on_two_workers_give_the_sequential_models():
    df = make_table(n_rows=1500, seed=47)
    params = [{"max_depth": 2 + i % 3, "subsample": 0.8, "seed": i} for i in range(8)]
    with distributed.LocalCluster(n_workers=2, threads_per_worker=2, processes=False,
                                  dashboard_address=":0") as cluster, \
            distributed.Client(cluster, set_as_default=False) as client:
        ddf = client.persist(dd.from_pandas(df, npartitions=4))

        def one(p):
            return gbflow.train(ddf, label="y", params=p, num_boost_round=8, verbose=False,
                                client=client).to_json()

        sequential = [one(p) for p in params]
        runs = [_in_thread(lambda p=p: one(p)) for p in params]
        for thread, _ in runs:
            thread.join(120)
        assert [outcome.get("result") for _, outcome in runs] == sequential


def test_closing_the_client_stops_the_training_tasks(compiled):
    """client.close() while train() runs: the workers' training tasks stop within seconds (Dask
    cancels them; each looks at its task's state at every reduction)."""
    df = make_table(n_rows=3000, seed=45)
    with _processes_cluster(2) as cluster, \
            distributed.Client(cluster, set_as_default=False) as watcher:
        trainer = distributed.Client(cluster, set_as_default=False)
        ddf = trainer.persist(dd.from_pandas(df, npartitions=4))
        thread, outcome = _training_forever(ddf, trainer, watcher)
        trainer.close()
        closed_at = time.monotonic()
        while any(watcher.run(collective.active_sessions).values()):
            assert time.monotonic() - closed_at < 10, "training tasks run on after close()"
            time.sleep(0.05)
        thread.join(30)
        assert not thread.is_alive() and "error" in outcome


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
