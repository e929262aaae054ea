"""The Dask collective's direct TCP links (``gbflow.dask.sockets``): framing, exchanges, failures,
the handshake, and the collective over them on a cluster."""
from __future__ import annotations

import socket
import threading
import uuid

import numpy as np
import pytest

from gbflow.dask import sockets

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


@pytest.mark.parametrize("size", range(1, 10))
def test_partners_are_the_butterflys_pairs_and_mutual(size):
    top = 1 << (size.bit_length() - 1)
    for rank in range(size):
        peers = sockets.partners(rank, size)
        assert rank not in peers and all(0 <= p < size for p in peers)
        for p in peers:
            assert rank in sockets.partners(p, size)
        if rank >= top:
            assert peers == [rank - top]
        else:
            assert set(peers) >= {rank ^ s for s in (1, 2, 4, 8) if s < top}


def _pair():
    with socket.create_server(("127.0.0.1", 0)) as listener:
        a = socket.create_connection(listener.getsockname()[:2])
        b, _ = listener.accept()
    return sockets.Link(a, 1), sockets.Link(b, 0)


def _never():
    pass


def _within(seconds: float):
    """A check that stops a wait after ``seconds`` (a deadlocked exchange fails, not hangs)."""
    import time
    end = time.monotonic() + seconds

    def check():
        if time.monotonic() > end:
            raise TimeoutError("the exchange did not finish")
    return check


PAYLOADS = [np.arange(10, dtype=np.int64), np.zeros((0, 3)), np.float64(2.5),
            np.arange(24.0).reshape(4, 6)[:, ::2],  # not contiguous: pickled in band
            {0: ("a", 1), 1: None}, None, np.arange(3_000_000, dtype=np.int64)]  # 24 MB


@pytest.mark.parametrize("payload", PAYLOADS, ids=lambda p: type(p).__name__ + str(np.shape(p)))
def test_an_exchange_carries_each_side_the_others_message(payload):
    """Both sides send and receive at once (messages larger than the socket buffers too: each
    side reads while it writes), values and tags intact."""
    left, right = _pair()
    other = {"k": np.arange(5)} if payload is None else payload
    got = {}
    thread = threading.Thread(target=lambda: got.update(
        right=right.transfer(sockets.encode((7, "r"), other), True, _within(30))))
    thread.start()
    got["left"] = left.transfer(sockets.encode((7, "l"), payload), True, _within(30))
    thread.join(30)
    for (tag, value), want, expected_tag in ((got["left"], other, (7, "r")),
                                            (got["right"], payload, (7, "l"))):
        assert tag == expected_tag
        if isinstance(want, dict) or want is None:
            assert str(value) == str(want)
        else:
            assert np.asarray(value).dtype == np.asarray(want).dtype
            assert np.array_equal(value, want)
    left.close()
    right.close()


def test_send_only_and_receive_only_follow_each_other_in_order():
    left, right = _pair()
    for i in range(3):
        left.transfer(sockets.encode((i, "fold"), np.full(4, i)), False, _never)
    for i in range(3):
        tag, value = right.transfer(None, True, _never)
        assert tag == (i, "fold") and np.array_equal(value, np.full(4, i))


def test_a_transfer_still_checks_while_data_flows():
    """A peer that keeps reading while this side sends a large message never leaves the
    socket idle for a whole slice; the check still runs every slice and its abort ends the
    transfer."""
    import time
    left, right = _pair()
    stop = threading.Event()

    def slow_reader():  # about 100 MB/s: the socket is writable again every half millisecond
        right.sock.setblocking(True)
        while not stop.is_set():
            try:
                if not right.sock.recv(1 << 16):
                    return
            except OSError:
                return
            time.sleep(0.0005)
    thread = threading.Thread(target=slow_reader)
    thread.start()
    calls = []

    def abort_on_second():
        calls.append(time.monotonic())
        if len(calls) == 2:
            raise RuntimeError("aborted mid-flow")
    started = time.monotonic()
    try:
        with pytest.raises(RuntimeError, match="mid-flow"):
            left.transfer(sockets.encode((1, "x"), np.zeros(25_000_000, np.int64)), False,
                          abort_on_second)
        assert time.monotonic() - started < 5.0
    finally:
        stop.set()
        left.close()
        thread.join(10)
        right.close()


def test_a_closed_peer_and_an_abort_end_the_wait():
    left, right = _pair()
    calls = []

    def abort():
        calls.append(1)
        if len(calls) == 2:
            raise RuntimeError("aborted")
    with pytest.raises(RuntimeError, match="aborted"):  # checked between slices of waiting
        left.transfer(None, True, abort)
    right.close()
    with pytest.raises(ConnectionError):
        left.transfer(None, True, _never)


class _ThreadRanks:
    """A stand-in for ``DaskCollective.allgather`` between threads of this process."""

    def __init__(self, size: int):
        self.barrier = threading.Barrier(size, timeout=30)
        self.slots = [None] * size

    def rank(self, r: int):
        ranks = self

        class One:
            def allgather(self, value):
                ranks.slots[r] = value
                ranks.barrier.wait()
                out = list(ranks.slots)
                ranks.barrier.wait()
                return out
        return One()


def _connect_all(ranks, session, size, addresses, timeout=20.0) -> dict:
    out = {}
    threads = [threading.Thread(target=lambda r=r: out.update({r: sockets.connect(
        ranks.rank(r), session, r, size, addresses[r], timeout)})) for r in range(size)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    return out


def test_connect_links_the_partners_and_drops_strangers(monkeypatch):
    """Three ranks connect to their partners. Connections that name another session with a
    partner's rank, say nothing, or say half a hello are closed, and the ranks still connect
    (to each other: a message sent on the links arrives)."""
    session = uuid.uuid4().hex
    ranks = _ThreadRanks(3)
    strangers = []
    real_listen = sockets._listen

    def listen(address):
        listener = real_listen(address)
        where = listener.getsockname()[:2]
        for said in (sockets._HELLO.pack(uuid.uuid4().hex.encode(), 2), b"", b"x" * 10):
            stranger = socket.create_connection(where)  # before the ranks
            stranger.sendall(said)
            strangers.append(stranger)
        return listener
    monkeypatch.setattr(sockets, "_HELLO_TIMEOUT", 0.5)
    monkeypatch.setattr(sockets, "_listen", listen)
    links = _connect_all(ranks, session, 3, ["tcp://127.0.0.1:1"] * 3)
    for r in range(3):
        assert sorted(links[r]) == sockets.partners(r, 3)
    # the links carry messages: rank 2 folds into rank 0
    links[2][0].transfer(sockets.encode((1, "fold"), np.arange(3)), False, _never)
    assert np.array_equal(links[0][2].transfer(None, True, _within(10))[1], np.arange(3))
    for r in range(3):
        for link in links[r].values():
            link.close()
    for s in strangers:
        s.close()


def test_a_rank_that_cannot_listen_or_connect_leaves_every_rank_on_the_rpc(monkeypatch):
    """Links are all or nothing: one rank on another transport, or one rank whose connection
    fails, and every rank gets None (and closes what it opened)."""
    session = uuid.uuid4().hex
    ranks = _ThreadRanks(4)
    opened = []
    real_link = sockets.Link

    class Counted(real_link):
        def __init__(self, sock, peer):
            super().__init__(sock, peer)
            opened.append(self)
    monkeypatch.setattr(sockets, "Link", Counted)
    tcp = "tcp://127.0.0.1:1"
    assert _connect_all(ranks, session, 4, [tcp, "inproc://127.0.0.1/1/2", tcp, tcp]) == \
        {r: None for r in range(4)}
    real_connection = socket.create_connection

    def refused(address, timeout=None):
        if threading.current_thread().name.endswith("rank3"):
            raise ConnectionRefusedError("refused")
        return real_connection(address, timeout=timeout)
    monkeypatch.setattr(sockets.socket, "create_connection", refused)
    out = {}
    threads = [threading.Thread(name=f"rank{r}", target=lambda r=r: out.update({r: sockets.connect(
        ranks.rank(r), session, r, 4, tcp, 1.0)})) for r in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert out == {r: None for r in range(4)}
    assert opened and all(link.sock.fileno() == -1 for link in opened)  # all closed


def test_the_clients_config_decides_for_every_rank():
    import dask

    from gbflow.dask.driver import _spec
    from gbflow.evaluation import EvalOptions
    from gbflow.params import make_params
    args = (make_params({}), 1, EvalOptions(), False, "y", None, ["a"], None, [], False)
    assert _spec(*args).sockets
    with dask.config.set({"gbflow.collective-sockets": False}):
        assert not _spec(*args).sockets


def _collective_over_a_link(monkeypatch):
    """A two-rank ``DaskCollective`` whose rank 0 talks to a bare link standing for rank 1."""
    from gbflow.dask import collective as collective_module
    monkeypatch.setattr(collective_module, "_LOSS_GRACE", 0.2)
    ours, theirs = _pair()
    session = uuid.uuid4().hex
    c = collective_module.DaskCollective(None, session, 0, ["tcp://a:1", "tcp://b:2"], 5.0)
    c.links = {1: ours}
    return c, theirs


def test_over_a_link_aborts_losses_and_bugs_are_told_apart(monkeypatch):
    """A peer that closes its link after its abort arrived: CollectiveAborted with its reason;
    one that closes without a word: WorkerLostError naming it; a message out of step:
    CollectiveError; an abort that arrives while data flows stops the next reduction at once."""
    from gbflow.dask.errors import CollectiveAborted, CollectiveError, WorkerLostError
    c, theirs = _collective_over_a_link(monkeypatch)
    theirs.transfer(sockets.encode((1, 1), np.arange(4)), False, _never)
    assert np.array_equal(c.allreduce_sum(np.arange(4)), 2 * np.arange(4))
    assert theirs.transfer(None, True, _never)[0] == (1, 1)
    theirs.transfer(sockets.encode((9, 9), np.arange(4)), False, _never)
    with pytest.raises(CollectiveError, match="out of step"):
        c.allreduce_sum(np.arange(4))
    c.close()

    c, theirs = _collective_over_a_link(monkeypatch)
    theirs.close()
    with pytest.raises(WorkerLostError, match=r"tcp://b:2 \(rank 1\)"):
        c.allreduce_sum(np.arange(4))
    c.close()

    c, theirs = _collective_over_a_link(monkeypatch)
    c.box.abort("rank 1 failed: ValueError")
    theirs.close()
    with pytest.raises(CollectiveAborted, match="rank 1 failed"):
        c.allreduce_sum(np.arange(4))
    c.close()

    c, theirs = _collective_over_a_link(monkeypatch)
    big = np.zeros(2_000_000, dtype=np.int64)
    stop = threading.Event()

    def flood():  # the peer keeps sending: the link always has data
        op = 1
        while not stop.is_set():
            try:
                theirs.transfer(sockets.encode((op, 1), big), True, _within(10))
            except (OSError, TimeoutError):
                return
            op += 1
    thread = threading.Thread(target=flood)
    thread.start()
    try:
        c.allreduce_sum(big)
        c.box.abort("the driver stopped the session")
        with pytest.raises(CollectiveAborted, match="driver stopped"):
            c.allreduce_sum(big)
    finally:
        stop.set()
        c.close()
        thread.join(10)


def test_only_plain_tcp_workers_listen():
    assert sockets._listen("inproc://127.0.0.1/1/2") is None
    assert sockets._listen("tls://127.0.0.1:1234") is None
    listener = sockets._listen("tcp://127.0.0.1:1234")
    assert listener is not None and listener.getsockname()[0] == "127.0.0.1"
    listener.close()


@pytest.mark.parametrize("n_workers", [2, 3])
def test_the_collective_reduces_over_links_on_a_tcp_cluster(n_workers):
    """On a cluster whose workers talk TCP, the training tasks' collective links directly and
    its reductions agree with the sums and maxima (three workers: one folded in)."""
    from distributed import Client, LocalCluster, get_worker

    from gbflow.dask.collective import CollectivePlugin, DaskCollective

    def task(session, rank, addresses):
        collective = DaskCollective(get_worker(), session, rank, addresses, 30.0)
        try:
            collective.connect_directly()
            total = collective.allreduce_sum(np.arange(50_000, dtype=np.int64) * (rank + 1))
            return (collective.transport, total, collective.allreduce_max(float(rank)),
                    collective.allgather({"rank": rank}))
        finally:
            collective.close()

    with LocalCluster(n_workers=n_workers, threads_per_worker=1, processes=False,
                      protocol="tcp", dashboard_address=":0") as cluster, \
            Client(cluster) as client:
        client.register_plugin(CollectivePlugin(), name=CollectivePlugin.name)
        addresses = sorted(client.scheduler_info()["workers"])
        session = uuid.uuid4().hex
        results = client.gather([client.submit(task, session, r, addresses, workers=[a],
                                               pure=False)
                                 for r, a in enumerate(addresses)])
    factor = sum(range(1, n_workers + 1))
    for transport, total, largest, gathered in results:
        assert transport == "sockets"
        assert np.array_equal(total, np.arange(50_000) * factor)
        assert largest == n_workers - 1
        assert gathered == [{"rank": r} for r in range(n_workers)]


def test_a_training_over_links_gives_the_in_process_model():
    """Three workers talking TCP train over direct links (every rank reports it) and give the
    in-process model file, with an evaluation set."""
    import dask.dataframe as dd
    from conftest import make_table
    from distributed import Client, LocalCluster

    import gbflow
    df = make_table(n_rows=3000, task="binary", seed=31)
    params = {"objective": "binary:logistic", "max_depth": 4, "eval_metric": "auc"}
    expected = gbflow.train(df.iloc[:2400], label="y", params=params, num_boost_round=6,
                            evals=[(df.iloc[2400:], "v")], verbose=False)
    with LocalCluster(n_workers=3, threads_per_worker=1, processes=False, protocol="tcp",
                      dashboard_address=":0") as cluster, Client(cluster) as client:
        booster = gbflow.train(dd.from_pandas(df.iloc[:2400], npartitions=5), label="y",
                               params=params, num_boost_round=6,
                               evals=[(dd.from_pandas(df.iloc[2400:], npartitions=2), "v")],
                               verbose=False, client=client)
    assert {r["transport"] for r in booster.worker_report} == {"sockets"}
    assert len(booster.worker_report) == 3
    assert booster.to_json() == expected.to_json()
    assert booster.evals_result == expected.evals_result and booster.evals_result["v"]["auc"]
