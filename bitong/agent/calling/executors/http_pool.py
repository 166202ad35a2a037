"""Keep-alive for the HTTP executors: a bounded pool of idle connections per endpoint.

A new TCP connection per request cost a Call about 0.3 ms of connect and
teardown, and at 16 in flight the sidecar spent its two cores on it (issue
13 §4: 1,031 calls/s against 5,700/s for aiohttp with keep-alive). So
:func:`~.http_client.fetch` takes a connection from here and gives it back
when the answer was read to its end.

* **Per endpoint**: connections are keyed by scheme, host, port, TLS
  context and the ``network_hosts`` the destination was checked against,
  so a connection opened under one tool's destination rule is never reused
  under another's.
* **Bounded**: at most ``max_connections`` open (busy or idle) per
  endpoint; a request beyond that waits for one to come back, inside its
  own deadline. A burst cannot open a thousand sockets to a small service.
* **Idle timeout**: an idle connection is closed after ``idle_s``, before
  most servers drop theirs (a server that closes first is seen below).
* **A dead idle connection is never written to**: each one keeps reading
  while idle, so a server's close (or any unexpected byte, like a ``408``)
  marks it broken and it leaves the pool at once. :func:`fetch` checks
  again right before sending and, only then, with nothing sent, takes a
  fresh connection once. A failure after the request was written is never
  retried here: the request may not be idempotent.
* **Closed with the loop**: the idle connections belong to the event loop
  that opened them and are closed when that loop shuts down its async
  generators (``asyncio.run``, ``uvloop.run``, pytest-asyncio all do): no
  socket outlives its loop, and a pool used from a later loop starts empty.

``max_connections=0`` or ``idle_s=0`` turns keep-alive off: each request
gets its own connection, closed after it (``Connection: close``).
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import select
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable, Hashable
from typing import cast

__all__ = ["Connection", "Pool", "DEFAULT_MAX_CONNECTIONS", "DEFAULT_IDLE_S"]

DEFAULT_MAX_CONNECTIONS = 32
DEFAULT_IDLE_S = 2.0      # below the keep-alive of common servers (gunicorn 2 s, Apache/Node/uvicorn 5 s)

Key = Hashable
Opener = Callable[[Callable[[], asyncio.Protocol]], Awaitable[tuple[asyncio.BaseTransport, asyncio.BaseProtocol]]]
"""``await open_(protocol_factory)``: ``loop.create_connection`` with the endpoint's address and TLS."""


class _Protocol(asyncio.StreamReaderProtocol):
    """A stream protocol that tells its connection when the peer spoke or left while it sat idle."""

    conn: Connection | None = None

    def data_received(self, data: bytes) -> None:
        conn = self.conn
        if conn is not None and conn.idle:
            conn.lost("sent bytes while idle")
            return
        super().data_received(data)

    def eof_received(self) -> bool | None:
        conn = self.conn
        if conn is not None:
            conn.lost("closed by the server")
        return super().eof_received()

    def connection_lost(self, exc: Exception | None) -> None:
        conn = self.conn
        if conn is not None:
            conn.lost("connection lost")
        super().connection_lost(exc)


@dataclasses.dataclass(eq=False)
class Connection:
    """One open connection; ``reused`` is True when it served a request before this one."""

    reader: asyncio.StreamReader
    writer: asyncio.StreamWriter
    endpoint: _Endpoint
    reused: bool = False
    idle: bool = False
    broken: str = ""                 # why it can no longer carry a request ("" while it can)
    timer: asyncio.TimerHandle | None = None

    def lost(self, why: str) -> None:
        """The peer closed, failed or spoke out of turn: never send on it again; idle, it leaves now."""
        if not self.broken:
            self.broken = why
        if self.idle:
            self.endpoint.drop_idle(self)

    def quiet(self) -> bool:
        """Nothing waits to be read on the socket, not even a close the loop has not handled yet.

        One ``poll`` with no timeout: a kept-alive connection about to carry a
        request must have nothing to say (a FIN, a ``408``, a TLS alert all
        mean it is done), and the server may have closed it a moment ago.
        """
        sock = self.writer.get_extra_info("socket")
        if sock is None:
            return not self.broken
        poller = select.poll()
        poller.register(sock.fileno(), select.POLLIN | _RDHUP)
        return not poller.poll(0)

    def abort(self) -> None:
        self.writer.transport.abort()


class _Endpoint:
    """The connections of one key: the idle ones (most recently used last), the count open, the waiters."""

    def __init__(self, pool: Pool, key: Key) -> None:
        self.pool = pool
        self.key = key
        self.idle: collections.deque[Connection] = collections.deque()
        self.open = 0
        self.waiters: collections.deque[asyncio.Future[Connection | None]] = collections.deque()

    def drop_idle(self, conn: Connection) -> None:
        try:
            self.idle.remove(conn)
        except ValueError:
            return
        self._close(conn)

    def _close(self, conn: Connection) -> None:
        conn.idle = False
        if conn.timer is not None:
            conn.timer.cancel()
            conn.timer = None
        conn.abort()
        self.open -= 1
        self.wake(None)
        self.forget_if_unused()

    def forget_if_unused(self) -> None:
        """Leave the pool's table once nothing is open or waited for: a generic ``http`` tool may reach
        any number of hosts, and the table must not grow with every one it ever called."""
        if self.open == 0 and not self.idle and all(w.done() for w in self.waiters):
            if self.pool._endpoints.get(self.key) is self:
                del self.pool._endpoints[self.key]

    def wake(self, conn: Connection | None) -> bool:
        """Hand ``conn`` (or, None, a free slot) to the first live waiter; False if nobody waits."""
        while self.waiters:
            waiter = self.waiters.popleft()
            if not waiter.done():
                waiter.set_result(conn)
                return True
        return False


class Pool:
    """Idle HTTP/1.1 connections by endpoint; see the module docstring. One per :class:`Executors`."""

    def __init__(self, max_connections: int = DEFAULT_MAX_CONNECTIONS, idle_s: float = DEFAULT_IDLE_S) -> None:
        self.max_connections = max_connections
        self.idle_s = idle_s
        self.keep_alive = max_connections > 0 and idle_s > 0
        self.opened = 0                  # connections ever opened (tests and benchmarks read it)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._endpoints: dict[Key, _Endpoint] = {}
        self._keeper: AsyncIterator[None] | None = None

    def idle_count(self, key: Key | None = None) -> int:
        """Idle connections held (for ``key``, or in all)."""
        if key is None:
            return sum(len(ep.idle) for ep in self._endpoints.values())
        endpoint = self._endpoints.get(key)
        return len(endpoint.idle) if endpoint is not None else 0

    async def acquire(self, key: Key, open_: Opener, *, fresh: bool = False) -> Connection:
        """A connection to ``key``: an idle one unless ``fresh``, else a new one from ``open_``, within the bound.

        Raises what ``open_`` raises; waiting for a slot is cancelled with the caller (its deadline).
        """
        endpoint = await self._endpoint(key)
        while True:
            current = self._endpoints.setdefault(key, endpoint)   # it may have left the table while we waited
            if current is not endpoint:
                endpoint = current
            while endpoint.idle and not fresh:
                conn = endpoint.idle.pop()
                conn.idle = False
                if conn.timer is not None:
                    conn.timer.cancel()
                    conn.timer = None
                if not conn.broken:
                    conn.reused = True
                    return conn
                endpoint._close(conn)
            if not self.keep_alive or endpoint.open < self.max_connections:
                endpoint.open += 1
                return await self._open_in_slot(endpoint, open_)
            if fresh and endpoint.idle:
                endpoint.drop_idle(endpoint.idle[0])   # make room: the oldest idle one goes
                continue
            waiter: asyncio.Future[Connection | None] = asyncio.get_running_loop().create_future()
            endpoint.waiters.append(waiter)
            try:
                handed = await waiter
            except asyncio.CancelledError:
                if waiter.done() and not waiter.cancelled():
                    got = waiter.result()
                    if got is not None:
                        self.release(got, reusable=not got.broken)
                    else:
                        endpoint.wake(None)      # pass the free slot on
                endpoint.forget_if_unused()
                raise
            if handed is not None:
                if not fresh:
                    handed.reused = True
                    return handed
                handed.abort()     # a fresh one was asked for: open it in the slot this one held
                return await self._open_in_slot(endpoint, open_)

    async def _open_in_slot(self, endpoint: _Endpoint, open_: Opener) -> Connection:
        """Open a connection in a slot already counted in ``endpoint.open``; a failure gives the slot back."""
        try:
            return await self._open(endpoint, open_)
        except BaseException:
            endpoint.open -= 1
            endpoint.wake(None)
            endpoint.forget_if_unused()
            raise

    def release(self, conn: Connection, *, reusable: bool) -> None:
        """Give ``conn`` back: kept idle when ``reusable`` (the answer was read to its end), else closed."""
        endpoint = conn.endpoint
        if not reusable or conn.broken or not self.keep_alive or self._endpoints.get(endpoint.key) is not endpoint:
            if self._endpoints.get(endpoint.key) is endpoint:
                endpoint._close(conn)
            else:
                conn.abort()    # from a loop that is gone, or a pool that was closed
            return
        if endpoint.wake(conn):
            return
        conn.idle = True
        conn.timer = asyncio.get_running_loop().call_later(self.idle_s, endpoint.drop_idle, conn)
        endpoint.idle.append(conn)

    def close(self) -> None:
        """Close every idle connection now; busy ones close when given back."""
        endpoints, self._endpoints = self._endpoints, {}
        for endpoint in endpoints.values():
            while endpoint.idle:
                conn = endpoint.idle.pop()
                conn.idle = False
                if conn.timer is not None:
                    conn.timer.cancel()
                conn.abort()
            endpoint.wake(None)

    async def _endpoint(self, key: Key) -> _Endpoint:
        loop = asyncio.get_running_loop()
        if loop is not self._loop:
            self._endpoints = {}
            self._loop = loop
            self._keeper = _close_with_loop(self)
            await self._keeper.__anext__()
        endpoint = self._endpoints.get(key)
        if endpoint is None:
            endpoint = self._endpoints[key] = _Endpoint(self, key)
        return endpoint

    async def _open(self, endpoint: _Endpoint, open_: Opener) -> Connection:
        loop = asyncio.get_running_loop()
        reader = asyncio.StreamReader(limit=_LIMIT, loop=loop)
        transport, protocol = await open_(lambda: _Protocol(reader, loop=loop))
        assert isinstance(protocol, _Protocol)   # uvloop's transports are not asyncio.Transport subclasses
        writer = asyncio.StreamWriter(cast(asyncio.WriteTransport, transport), protocol, reader, loop)
        conn = Connection(reader, writer, endpoint)
        protocol.conn = conn
        self.opened += 1
        return conn


_RDHUP = getattr(select, "POLLRDHUP", 0)
_LIMIT = 64 * 1024   # the longest line the reader takes: http_client's head limit


async def _close_with_loop(pool: Pool) -> AsyncIterator[None]:
    """Parked at its yield for the loop's lifetime: the loop closes it at shutdown, and so the pool's sockets."""
    loop = asyncio.get_running_loop()
    try:
        yield
    finally:
        if pool._loop is loop:
            pool.close()
            pool._loop = None


def tls_key(context: ssl.SSLContext | None) -> int:
    """The part of a key that says which TLS context verified the connection (0: plain TCP)."""
    return 0 if context is None else id(context)
