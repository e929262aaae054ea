"""The collective of the Dask training tasks: allreduce and allgather between workers, over Dask's
own worker-to-worker communication, with failure propagation.

Design
------
Every worker gets a ``gbflow_collective`` handler through ``CollectivePlugin`` (a WorkerPlugin the
driver registers before training). A message is an ordinary Dask RPC to a peer,
``worker.rpc(peer).gbflow_collective(session=..., tag=..., source=..., payload=...)``, carried by
the worker's comm stack (TCP, TLS or UCX, inproc for threads of one process); the handler, running
on the peer's event loop, drops the payload into that process's mailbox for the session and
answers at once. The training task, in a worker thread, sends by scheduling the RPC on its
worker's event loop, and receives by waiting on its mailbox. Nothing goes through the scheduler:
a reduction costs log2(n_workers) message exchanges between pairs of workers. Once a session's
tasks have started, messages between workers reached over plain TCP go instead over direct
connections that the training threads send and receive on themselves (``sockets``: a
message through Dask's RPC costs about 2 ms however small); Dask's RPC keeps carrying aborts,
and every message where a link could not be opened.

Reductions use recursive doubling (a butterfly): with P the largest power of two <= n, ranks
r >= P first fold their value into rank r - P; then in step k = 1, 2, 4, ... < P every rank r < P
exchanges its value with rank r ^ k and combines the two, the lower rank's value first; finally
rank r - P sends the result back to rank r. Combining in rank order makes the result identical on
every rank even for order-sensitive combinations (``allgather`` merges {rank: value} dicts); the
sums gbflow reduces are integers, so they are exact whatever the order anyway.

Failures: every receive waits in short slices and gives up when the session is aborted or after
``timeout`` seconds. A task that fails (its own error, or a peer it cannot reach) tells every peer
to abort (``abort_peers``), so no task stays blocked on a partner that will never send; the driver
also aborts the session on the survivors when the scheduler reports a training worker gone
(``abort_session`` through ``Client.run``).

Results of ``allgather`` and the arrays passed to or returned by the reductions must not be
modified in place: on an inproc comm (threads of one process) peers share the same objects.
"""
from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import threading
import time

import numpy as np
from distributed.diagnostics.plugin import WorkerPlugin
from distributed.protocol.serialize import to_serialize

from . import sockets
from .errors import (
    CollectiveAborted,
    CollectiveError,
    CollectiveTimeout,
    TrainingCancelled,
    WorkerLostError,
)

HANDLER = "gbflow_collective"
_WAIT_SLICE = 0.2  # seconds between checks for an abort while waiting for a message
# Seconds a rank whose link to a peer broke waits for that peer's abort reason (a failing task
# tells its peers why before it closes its links) before taking the peer as lost.
_LOSS_GRACE = 2.0


class _Mailbox:
    """Messages of one training session that reached this process, keyed by (tag, source rank)."""

    def __init__(self):
        self.condition = threading.Condition()
        self.messages: dict = {}
        self.abort_reason: str | None = None
        self.claimed = False  # its rank's task has opened it (``DaskCollective``)

    def put(self, key, payload) -> None:
        with self.condition:
            self.messages[key] = payload
            self.condition.notify_all()

    def abort(self, reason: str) -> None:
        with self.condition:
            if self.abort_reason is None:
                self.abort_reason = reason
            self.condition.notify_all()

    def wait_abort(self, seconds: float) -> str | None:
        """The abort reason, waiting up to ``seconds`` for one to arrive."""
        with self.condition:
            self.condition.wait_for(lambda: self.abort_reason is not None, seconds)
            return self.abort_reason

    def take(self, key, deadline: float, check, describe):
        """The message under ``key``, waiting until ``deadline`` (time.monotonic()); ``check()``
        every slice (it raises to stop waiting)."""
        with self.condition:
            while key not in self.messages:
                if self.abort_reason is not None:
                    raise CollectiveAborted(self.abort_reason)
                check()
                left = deadline - time.monotonic()
                if left <= 0:
                    raise CollectiveTimeout(describe())
                self.condition.wait(min(_WAIT_SLICE, left))
            return self.messages.pop(key)


# Mailboxes of this process, per (session id, rank): the workers of a LocalCluster with
# processes=False share one process, so several ranks of a session may live here. A message may
# arrive before its rank's task has started, so the handler creates mailboxes; closed ones are
# remembered (a bounded list) so that late messages, such as aborts, do not create them again, and
# aborted sessions too, so that a task starting after its session was aborted stops at once.
_lock = threading.Lock()
_mailboxes: dict[tuple, _Mailbox] = {}
_closed: collections.OrderedDict = collections.OrderedDict()
_aborted: collections.OrderedDict = collections.OrderedDict()
_REMEMBERED = 1024


def _remember(ordered: collections.OrderedDict, key, value=None) -> None:
    ordered[key] = value
    while len(ordered) > _REMEMBERED:
        ordered.popitem(last=False)


def _mailbox(session: str, rank: int, claim: bool = False) -> _Mailbox | None:
    with _lock:
        if (session, rank) in _closed:
            return None
        box = _mailboxes.get((session, rank))
        if box is None:
            box = _mailboxes[(session, rank)] = _Mailbox()
            if session in _aborted:
                box.abort(_aborted[session])
        box.claimed |= claim
        return box


def _close_mailbox(session: str, rank: int) -> None:
    with _lock:
        _mailboxes.pop((session, rank), None)
        _remember(_closed, (session, rank))


def active_sessions() -> list[str]:
    """Sessions with an open mailbox in this process (for tests and diagnostics)."""
    with _lock:
        return sorted({session for session, _ in _mailboxes})


async def _handle(session: str, dest: int, tag=None, source: int = -1, payload=None,
                  abort: str | None = None):
    # Runs on the receiving worker's event loop: store and answer at once, never block.
    box = _mailbox(session, dest)
    if box is None:
        return "closed"
    if abort is not None:
        box.abort(abort)
    else:
        box.put((tag, source), payload)
    return "ok"


async def abort_session(session: str, reason: str) -> None:
    """Make this process's training tasks of ``session`` stop with ``CollectiveAborted(reason)``
    (run on the workers' event loops by the driver through ``Client.run``). The mailboxes no
    task has opened are closed: a rank whose task never starts (cancelled while queued) would
    never close its own, and peers' messages would stay in it."""
    with _lock:
        _remember(_aborted, session, reason)
        boxes = [box for (s, _), box in _mailboxes.items() if s == session]
        for key in [k for k, box in _mailboxes.items() if k[0] == session and not box.claimed]:
            del _mailboxes[key]
            _remember(_closed, key)
    for box in boxes:
        box.abort(reason)


class CollectivePlugin(WorkerPlugin):
    """Installs the ``gbflow_collective`` handler on every worker, present and future."""

    name = "gbflow-collective"
    idempotent = True

    def setup(self, worker) -> None:
        worker.handlers[HANDLER] = _handle


class DaskCollective:
    """Allreduce/allgather among the training tasks of one session, one task per worker.

    worker: the ``distributed.Worker`` running this task. addresses: every rank's worker address,
    in rank order. timeout: seconds a receive may wait before ``CollectiveTimeout``. Every rank
    must make the same calls in the same order; the calls block until the peers take part.
    ``seconds`` and ``bytes_sent`` count the time spent inside calls and the payload bytes sent.
    """

    def __init__(self, worker, session: str, rank: int, addresses: list[str], timeout: float,
                 key=None):
        self.worker, self.session, self.rank, self.key = worker, session, rank, key
        self.addresses, self.size, self.timeout = list(addresses), len(addresses), timeout
        self.box = _mailbox(session, rank, claim=True)
        if self.box is None:
            raise CollectiveError(f"session {session} was already closed on this worker")
        self._op = 0
        self.seconds = 0.0
        self.bytes_sent = 0
        self.links: dict | None = None  # peer rank -> sockets.Link, once connect_directly ran

    def connect_directly(self) -> None:
        """Open direct TCP links to the peers this rank exchanges with (``sockets.connect``);
        every rank calls it at the same point (or none does: the driver's
        ``gbflow.collective-sockets``). Without them (one rank, a TLS or UCX cluster, a rank
        that could not listen or connect) messages keep going through Dask's RPC."""
        if self.size > 1:
            self.links = sockets.connect(self, self.session, self.rank, self.size,
                                         self.worker.address,
                                         min(self.timeout, sockets.CONNECT_TIMEOUT))

    @property
    def transport(self) -> str:
        """"sockets" (direct links) or "dask" (Dask's RPC)."""
        return "sockets" if self.links else "dask"

    def check_cancelled(self) -> None:
        """TrainingCancelled once Dask has cancelled this task (``key``, None: never): a worker
        cannot stop a running task's thread, so the task looks at each reduction. A closed
        client, or the driver's cancel after a failure, stops the training within a level."""
        task = None if self.key is None else self.worker.state.tasks.get(self.key)
        if self.key is not None and (task is None or task.state == "cancelled"):
            raise TrainingCancelled(f"training task {self.key!r} was cancelled on worker "
                                    f"{self.worker.address} (its client closed or cancelled it)")

    # -- point to point --------------------------------------------------------------------
    def _send(self, peer: int, tag, payload):
        """Start sending; returns a concurrent future resolved when the peer has stored it."""
        nbytes = payload.nbytes if isinstance(payload, np.ndarray) else 0
        self.bytes_sent += nbytes

        async def send():
            return await getattr(self.worker.rpc(self.addresses[peer]), HANDLER)(
                session=self.session, dest=peer, tag=tag, source=self.rank,
                payload=to_serialize(payload))

        return asyncio.run_coroutine_threadsafe(send(), self.worker.loop.asyncio_loop)

    def _wait_sent(self, future, peer: int) -> None:
        """Wait for a send in short slices, as a receive waits: a send to a worker that died
        can hang in its connection attempt for Dask's connect timeout, and an abort or a
        cancel must stop this task at once, not then."""
        deadline = time.monotonic() + self.timeout
        while not future.done():
            try:
                future.result(max(0.0, min(_WAIT_SLICE, deadline - time.monotonic())))
            except concurrent.futures.TimeoutError:
                if future.done():
                    break
                try:
                    if self.box.abort_reason is not None:
                        raise CollectiveAborted(self.box.abort_reason) from None
                    if time.monotonic() >= deadline:
                        raise WorkerLostError(
                            f"lost contact with training worker {self.addresses[peer]} (rank "
                            f"{peer}): sending to it took over {self.timeout:g} s") from None
                    self.check_cancelled()
                except Exception:
                    future.cancel()  # the send stops too
                    raise
            except Exception:  # the send's own error: the future is done, read it below
                break
        try:
            reply = future.result()
        except Exception as e:  # CommClosedError, OSError, timeouts: the peer is gone
            raise WorkerLostError(
                f"lost contact with training worker {self.addresses[peer]} (rank {peer}) while "
                f"sending to it: {type(e).__name__}: {e}") from e
        if reply == "closed":  # the peer stopped; its reason is on its way to us, usually
            raise CollectiveAborted(self.box.wait_abort(1.0) or (
                f"training worker {self.addresses[peer]} (rank {peer}) has already left this "
                f"training session"))

    def _over_link(self, peer: int, tag, value, send: bool, receive: bool):
        """Send ``value`` and/or receive the peer's next message over its direct link, waiting
        at most the collective timeout, an abort or a cancel. A closed connection is the peer's
        failure (an abort reason that follows within ``_LOSS_GRACE`` s, CollectiveAborted) or
        its loss (WorkerLostError)."""
        deadline = time.monotonic() + self.timeout
        where = f"training worker {self.addresses[peer]} (rank {peer})"

        def check():
            if self.box.abort_reason is not None:
                raise CollectiveAborted(self.box.abort_reason)
            self.check_cancelled()
            if time.monotonic() >= deadline:
                raise CollectiveTimeout(
                    f"no message from {where} for {self.timeout:.0f} s; is it alive?" if receive
                    else f"{where} took nothing sent to it for {self.timeout:.0f} s; is it "
                         f"alive?")
        if self.box.abort_reason is not None:  # (the mailbox's receive looks first too)
            raise CollectiveAborted(self.box.abort_reason)
        if send:
            self.bytes_sent += value.nbytes if isinstance(value, np.ndarray) else 0
        try:
            got = self.links[peer].transfer(sockets.encode(tag, value) if send else None,
                                            receive, check)
        except OSError as e:  # the connection broke: the peer failed or is gone
            reason = self.box.wait_abort(_LOSS_GRACE)
            if reason is not None:
                raise CollectiveAborted(reason) from None
            raise WorkerLostError(f"lost contact with {where}: {type(e).__name__}: {e}") from e
        if not receive:
            return None
        their_tag, payload = got
        if their_tag != tag:
            raise CollectiveError(f"{where} is out of step: message {their_tag!r} where "
                                  f"{tag!r} was due; please report this")
        return payload

    def _send_only(self, peer: int, tag, value) -> None:
        if self.links:
            self._over_link(peer, tag, value, send=True, receive=False)
        else:
            self._wait_sent(self._send(peer, tag, value), peer)

    def _receive(self, peer: int, tag):
        if self.links:
            return self._over_link(peer, tag, None, send=False, receive=True)
        return self.box.take((tag, peer), time.monotonic() + self.timeout, self.check_cancelled,
                             lambda: (
            f"no message from training worker {self.addresses[peer]} (rank {peer}) for "
            f"{self.timeout:.0f} s; is it alive?"))

    def _exchange(self, peer: int, tag, value):
        if self.links:
            return self._over_link(peer, tag, value, send=True, receive=True)
        sent = self._send(peer, tag, value)
        received = self._receive(peer, tag)
        self._wait_sent(sent, peer)
        return received

    # -- collectives ---------------------------------------------------------------------------
    def _allreduce(self, value, combine):
        """Butterfly allreduce (see the module docstring); ``combine(lower rank's, higher's)``."""
        if self.size == 1:
            return value
        start = time.perf_counter()
        self._op += 1
        op, rank = self._op, self.rank
        top = 1 << (self.size.bit_length() - 1)  # largest power of two <= size
        try:
            if rank >= top:  # fold into rank - top, get the result back at the end
                self._send_only(rank - top, (op, "fold"), value)
                return self._receive(rank - top, (op, "unfold"))
            if rank + top < self.size:
                value = combine(value, self._receive(rank + top, (op, "fold")))
            step = 1
            while step < top:
                peer = rank ^ step
                other = self._exchange(peer, (op, step), value)
                value = combine(value, other) if rank < peer else combine(other, value)
                step <<= 1
            if rank + top < self.size:
                self._send_only(rank + top, (op, "unfold"), value)
            return value
        finally:
            self.seconds += time.perf_counter() - start

    def allreduce_sum(self, array: np.ndarray) -> np.ndarray:
        """Elementwise sum of a host integer array over all ranks (read-only, see above)."""
        return self._allreduce(np.asarray(array), np.add)

    def allreduce_max(self, value):
        """Elementwise max over all ranks of a float or a host float array."""
        result = self._allreduce(np.asarray(value, dtype=np.float64), np.maximum)
        return float(result) if np.ndim(value) == 0 else result

    def allgather(self, value) -> list:
        """Every rank's ``value`` (picklable), in rank order."""
        merged = self._allreduce({self.rank: value}, lambda a, b: {**a, **b})
        return [merged[r] for r in range(self.size)]

    # -- failures and the end ------------------------------------------------------------------
    def abort_peers(self, reason: str, wait: float = 2.0) -> None:
        """Tell every other rank to stop (best effort: unreachable peers are skipped)."""
        async def send(peer):
            try:
                await asyncio.wait_for(getattr(self.worker.rpc(self.addresses[peer]), HANDLER)(
                    session=self.session, dest=peer, source=self.rank, abort=reason), wait)
            except Exception:  # a dead peer cannot be told; the driver handles it
                pass

        futures = [asyncio.run_coroutine_threadsafe(send(r), self.worker.loop.asyncio_loop)
                   for r in range(self.size) if r != self.rank]
        for f in futures:
            try:
                f.result(wait + 1.0)
            except Exception:
                pass

    def close(self) -> None:
        """Forget this session's mailbox in this process (late messages are ignored) and close
        the direct links."""
        _close_mailbox(self.session, self.rank)
        links, self.links = self.links or {}, None
        for link in links.values():
            link.close()
