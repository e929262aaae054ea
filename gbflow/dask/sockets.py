"""Direct TCP connections between the training tasks of one session: the collective's messages
sent and received by the training threads themselves, not through Dask's RPC.

A message through Dask's RPC hops from the training thread to the worker's event loop, through
Dask's serialization and comm stack, to the peer's event loop and mailbox, and back by a thread
wake-up: on two CPU workers of one machine about 1.9 ms for 64 bytes and 14 ms for 4 MB
(300 MB/s), against a tree's level of a few milliseconds. Here each rank keeps one TCP
connection to each rank it exchanges with in the collective's butterfly (``partners``), opened
once per session (``connect``) and used from the training thread: a message is a pickle
(protocol 5, arrays as out-of-band buffers, not copied) sent and received in slices of
``_WAIT_SLICE`` seconds, so an abort, a cancel or the collective timeout still ends a wait.

Only workers reached over plain ``tcp://`` get links (TLS or UCX clusters keep Dask's comms, as
does a session where any rank could not listen or connect: every rank must agree, and they do
so through Dask's RPC). The Dask config ``gbflow.collective-sockets: false``, read where
``train`` is called, turns them off. A connection begins with the session id and the rank; one
that does not say them within a second is closed. That is no authentication (the session id is
in the tasks' keys): the links trust the network as Dask's plain TCP comms do, and a peer's
messages are unpickled.
"""
from __future__ import annotations

import pickle
import selectors
import socket
import struct
import time

_WAIT_SLICE = 0.2  # seconds between checks for an abort while waiting
_HELLO = struct.Struct("<32sq")  # session id (hex), rank
_HEADER = struct.Struct("<qq")  # pickle bytes, out-of-band buffers
# Seconds the ranks may take to connect (a firewall dropping the ports then costs this, once
# a run, before every rank falls back to Dask's RPC), and a connection to say who it is.
CONNECT_TIMEOUT = 10.0
_HELLO_TIMEOUT = 1.0


def partners(rank: int, size: int) -> list[int]:
    """The ranks ``rank`` sends to or receives from in the collective's butterfly (recursive
    doubling over the largest power of two, the other ranks folded into it)."""
    top = 1 << (size.bit_length() - 1)
    if rank >= top:
        return [rank - top]
    peers = [rank ^ step for step in (1 << k for k in range(top.bit_length() - 1))]
    if rank + top < size:
        peers.append(rank + top)
    return sorted(peers)


def encode(tag, payload) -> list[memoryview]:
    """``(tag, payload)`` as the views one message sends, in order: arrays' memory as it is."""
    buffers: list = []
    body = pickle.dumps((tag, payload), protocol=5, buffer_callback=buffers.append)
    raw = [b.raw() for b in buffers]
    sizes = struct.pack(f"<{len(raw)}q", *(r.nbytes for r in raw))
    return [memoryview(_HEADER.pack(len(body), len(raw)) + sizes), memoryview(body), *raw]


class _Incoming:
    """One message being received: the fixed header, the buffers' sizes, the pickle, then the
    buffers, each read into memory of its own."""

    def __init__(self):
        self.parts = [bytearray(_HEADER.size)]
        self.at = 0  # bytes of parts[-1] read
        self.stage = 0  # 0 header, 1 sizes, 2 pickle and buffers

    def view(self) -> memoryview | None:
        """Where the next bytes go (None: the message is complete)."""
        while self.at == len(self.parts[-1]):
            if not self._advance():
                return None
        return memoryview(self.parts[-1])[self.at:]

    def _advance(self) -> bool:
        if self.stage == 0:
            self.body_bytes, n_buffers = _HEADER.unpack(self.parts[0])
            self.stage, self.at = 1, 0
            self.parts.append(bytearray(8 * n_buffers))
            return True
        if self.stage == 1:
            self.sizes = struct.unpack(f"<{len(self.parts[1]) // 8}q", self.parts[1])
            self.stage = 2
            self.pending = [self.body_bytes, *self.sizes]
        if not self.pending:
            return False
        self.parts.append(bytearray(self.pending.pop(0)))
        self.at = 0
        return True

    def value(self):
        """The (tag, payload) received."""
        return pickle.loads(self.parts[2], buffers=self.parts[3:])


class Link:
    """The connection to one peer rank (non-blocking socket)."""

    def __init__(self, sock: socket.socket, peer: int):
        self.sock, self.peer = sock, peer
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.setblocking(False)

    def transfer(self, outgoing: list[memoryview] | None, receive: bool, check) -> object:
        """Send ``outgoing`` (``encode``'s views; None: nothing) and, when ``receive``, read
        the peer's next message, both at once (two ranks exchanging large messages would
        otherwise each block on a full socket buffer). ``check()`` runs between slices of
        waiting and raises to stop. Returns the message's (tag, payload), or None. Raises
        ConnectionError when the peer closed the connection."""
        sending = [v.cast("B") for v in outgoing or [] if v.nbytes]
        incoming = _Incoming() if receive else None
        target = incoming.view() if receive else None
        with selectors.DefaultSelector() as selector:
            events = (selectors.EVENT_READ if receive else 0) | \
                (selectors.EVENT_WRITE if sending else 0)
            if not events:
                return None
            selector.register(self.sock, events)
            checked = time.monotonic()
            while sending or target is not None:
                ready = selector.select(_WAIT_SLICE)
                if not ready or time.monotonic() - checked >= _WAIT_SLICE:
                    check()  # (also while data flows: a long transfer still sees an abort)
                    checked = time.monotonic()
                if not ready:
                    continue
                mask = ready[0][1]
                if mask & selectors.EVENT_WRITE and sending:
                    self._send_some(sending)
                    if not sending and target is not None:
                        selector.modify(self.sock, selectors.EVENT_READ)
                if mask & selectors.EVENT_READ and target is not None:
                    try:
                        n = self.sock.recv_into(target)
                    except (BlockingIOError, InterruptedError):
                        continue
                    if n == 0:
                        raise ConnectionResetError("the peer closed the connection")
                    incoming.at += n
                    target = incoming.view()
                    if target is None and sending:
                        selector.modify(self.sock, selectors.EVENT_WRITE)
        return incoming.value() if receive else None

    def _send_some(self, sending: list) -> int:
        try:  # (sendmsg gathers the views in one call; Windows has none)
            sent = self.sock.sendmsg(sending[:64]) if hasattr(self.sock, "sendmsg") else \
                self.sock.send(sending[0])
        except (BlockingIOError, InterruptedError):
            return 0
        left = sent
        while sending and left >= sending[0].nbytes:
            left -= sending.pop(0).nbytes
        if left:
            sending[0] = sending[0][left:]
        return sent

    def close(self) -> None:
        try:
            self.sock.close()
        except OSError:
            pass


def _listen(address: str):
    """A listening socket on the worker's host when its address is plain TCP, else None."""
    from distributed.comm import get_address_host, parse_address
    try:
        scheme, _ = parse_address(address)
        if scheme != "tcp":
            return None
        host = get_address_host(address)
        family = socket.getaddrinfo(host, 0, type=socket.SOCK_STREAM)[0][0]
        return socket.create_server((host, 0), backlog=64, family=family)
    except (OSError, ValueError):
        return None


def connect(collective, session: str, rank: int, size: int, address: str,
            timeout: float) -> dict[int, Link] | None:
    """Links to this rank's ``partners``, or None when any rank has none (every rank then keeps
    Dask's RPC). ``collective``: the session's ``DaskCollective`` (its ``allgather`` goes
    through Dask here: the ranks trade where they listen and whether they connected).
    Blocks until every rank has taken part; connecting waits at most ``timeout`` seconds.
    Whatever raises here (an abort, a lost peer) leaves no socket open."""
    listener = _listen(address)
    links: dict[int, Link] = {}
    try:
        endpoint = listener.getsockname() if listener is not None else None
        endpoints = collective.allgather(endpoint)
        connected = listener is not None and all(e is not None for e in endpoints) and \
            _open(links, listener, endpoints, session, rank, size, timeout)
        if listener is not None:
            listener.close()  # (before the agreement: the port is free again)
        if all(collective.allgather(connected)):
            return links
    except BaseException:
        _close_all(links)
        raise
    finally:
        if listener is not None:
            listener.close()
    _close_all(links)
    return None


def _close_all(links: dict) -> None:
    for link in links.values():
        link.close()
    links.clear()


def _open(links: dict, listener, endpoints: list, session: str, rank: int, size: int,
          timeout: float) -> bool:
    """Connect to the lower partners (their listeners' backlogs take the connection before
    they accept), then accept the higher ones, each known by its hello; a connection that does
    not say this session's id and an expected rank within ``_HELLO_TIMEOUT`` is closed. False
    on failure (``links`` then holds what did connect, for the caller to close)."""
    hello = session.encode("ascii")[:32].ljust(32, b"\0")
    deadline = time.monotonic() + timeout
    try:
        for peer in partners(rank, size):
            if peer < rank:
                sock = socket.create_connection(
                    tuple(endpoints[peer][:2]), timeout=max(0.01, deadline - time.monotonic()))
                links[peer] = Link(sock, peer)
                sock.setblocking(True)
                sock.sendall(_HELLO.pack(hello, rank))
                sock.setblocking(False)
        expected = {p for p in partners(rank, size) if p > rank}
        while expected:
            listener.settimeout(max(0.01, deadline - time.monotonic()))
            sock, _ = listener.accept()
            peer = _hello(sock, hello, expected)
            if peer is None:
                sock.close()  # not a rank of this session, or silent
                continue
            expected.discard(peer)
            links[peer] = Link(sock, peer)
        return True
    except OSError:  # (socket.timeout is one)
        return False


def _hello(sock, hello: bytes, expected: set) -> int | None:
    """The rank a new connection says it is when it names this session and an expected rank
    within ``_HELLO_TIMEOUT`` seconds, else None."""
    data = b""
    try:
        sock.settimeout(_HELLO_TIMEOUT)
        while len(data) < _HELLO.size:
            chunk = sock.recv(_HELLO.size - len(data))
            if not chunk:
                return None
            data += chunk
    except OSError:
        return None
    their_session, peer = _HELLO.unpack(data)
    return peer if their_session == hello and peer in expected else None
