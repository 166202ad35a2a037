"""A small HTTP/1.1 client on asyncio streams: the one way the HTTP executors talk.

``gatekeeper``, ``hlpd-api``, ``git-forgejo`` and ``http`` build a
:class:`Request` and call :func:`fetch`, which returns an
:class:`~bitong.agent.calling.executors.base.Outcome` under the same rules as a process
(base.py):

* **output** is the response body, as received (no decompression: the
  request says ``Accept-Encoding: identity``); **stderr** is the status line
  and the headers, as received, the way ``curl -D /dev/stderr`` shows them;
* **ok** is a 2xx status; ``http_status`` is the HTTP status (0 when no
  response came); ``exit_code`` stays 0, as there is no process; any other
  status is ``ok=False`` with ``error``
  ``"HTTP 404 Not Found"`` and the body in output; redirects are not
  followed (the Location is named in ``error``);
* no response is ``ok=False`` with the cause named: ``connection refused by
  host:port``, ``cannot resolve host``, ``TLS ... failed``, ``connection
  closed by host:port while reading the body``...;
* the **deadline** (already the smaller of ``timeout_ms`` and the caller's
  gRPC deadline) bounds the whole exchange, connect included; when it
  passes the connection is dropped and the outcome is ``timed_out=True``
  with what arrived so far and the phase it stopped in; a cancelled call
  drops the connection at once and re-raises;
* without a sink (Call) at most ``max_output_bytes`` of the body (and of
  the head) are kept; reading stops at the cap (``truncated=True``) rather
  than downloading what would be dropped;
* with a sink (StreamCall) a 2xx body goes to the sink as it arrives, chunk
  by chunk, the head first as a STDERR chunk; each chunk is awaited before
  the next read, so a slow reader slows the download (the socket's own
  flow control) and nothing buffers without bound. A non-2xx answer is not
  streamed: it comes back in the result like in Call, so a retry never
  repeats anything the caller already received;
* ``retryable`` (see base.py) for a refused connection, a 503, and a 502 or
  504 to an idempotent verb (GET, HEAD, PUT, DELETE, OPTIONS): a gateway
  that gave up on a POST may have passed it on, and sending it twice is not
  safe.

Connections are kept alive and reused per endpoint (:mod:`.http_pool`):
one goes back to the pool only when its answer was read to its framed end
(Content-Length, chunked, or no body) on HTTP/1.1 without ``Connection:
close``; a cut body (the cap), a timeout, a cancellation, a sink that
failed or any error drops it. A pooled connection found dead before the
request is written is replaced by a fresh one, once; once any request byte
was written, a failure is the call's error and is not repeated here (the
request may not be idempotent). Without a pool (``pool=None``) each request
has its own connection and says ``Connection: close``. Request headers
never appear in any error, result or log line: they carry tokens.
"""

from __future__ import annotations

import asyncio
import dataclasses
import errno
import functools
import re
import socket
import ssl
import time
import urllib.parse
from typing import Any
from collections.abc import Awaitable, Callable, Sequence

from . import destinations
from .base import STDERR, STDOUT, Outcome, Sink
from .http_pool import Connection, Pool, tls_key
from .shell import render_value

__all__ = ["Request", "fetch", "header", "query_string", "quote_segment", "IDEMPOTENT"]

IDEMPOTENT = frozenset({"GET", "HEAD", "PUT", "DELETE", "OPTIONS"})
_MAX_HEAD = 64 * 1024            # status line + headers, and the longest line StreamReader will take
_READ = 64 * 1024
_METHOD = re.compile(r"[A-Z][A-Z0-9_-]{0,31}")
_TOKEN = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")
_CTL = re.compile(r"[\x00-\x08\x0a-\x1f\x7f]")   # what may not appear in a header value (tab may)
_ERRNO = re.compile(r"\[Errno (\d+)\]")
_STATUS = re.compile(rb"HTTP/1\.([01]) (\d{3})(?: ([^\r\n]*))?\r?\n")
_PATH_SAFE = "/%:@!$&'()*+,;=-._~"
_QUERY_SAFE = "/?%:@!$&'()*+,;=-._~"


@dataclasses.dataclass
class Request:
    """One request. ``headers`` may hold a token: they are sent and never shown."""

    method: str
    url: str
    headers: list[tuple[str, str]] = dataclasses.field(default_factory=list)
    body: bytes = b""


def header(headers: Sequence[tuple[str, str]], name: str) -> str | None:
    """The last value of header ``name`` (case-insensitive), or None."""
    name = name.lower()
    found = None
    for key, value in headers:
        if key.lower() == name:
            found = value
    return found


def query_string(params: dict[str, Any]) -> str:
    """``a=1&b=x`` (a list repeats its key, None is left out); keys in the order given."""
    pairs: list[tuple[str, str]] = []
    for key, value in params.items():
        if value is None:
            continue
        for item in value if isinstance(value, list) else [value]:
            pairs.append((key, render_value(item)))
    return urllib.parse.urlencode(pairs)


def quote_segment(text: str) -> str:
    """``text`` as one URL path segment: a ``/`` inside it cannot start another."""
    return urllib.parse.quote(text, safe="")


class _Refused(ValueError):
    """The request cannot be sent as given (a bad URL, a header with a line break)."""


class _BadResponse(Exception):
    """What came back is not HTTP/1.1."""


class _Enough(Exception):
    """The body passed the cap: stop reading (Call)."""


@dataclasses.dataclass(frozen=True)
class _Target:
    scheme: str
    host: str
    port: int
    target: str      # path?query, as sent
    host_header: str

    @property
    def where(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{host}:{self.port}"


@dataclasses.dataclass
class _State:
    """What one exchange has produced so far."""

    phase: str = "connecting"
    status: int = 0
    reason: str = ""
    location: str | None = None
    headers: list[tuple[str, str]] = dataclasses.field(default_factory=list)
    head: bytes = b""
    body: bytearray = dataclasses.field(default_factory=bytearray)
    seen: int = 0          # body bytes read (Call)
    sent_out: int = 0      # body bytes the sink took (StreamCall)
    sent_err: int = 0
    truncated: bool = False
    keep_alive: bool = False   # HTTP/1.1 without "Connection: close"
    complete: bool = False     # the body was read to its framed end


_ONE_SHOT = Pool(max_connections=0, idle_s=0)
"""fetch() without a pool: a connection per request, closed after it."""


_CACHED_URL = 2048   # longer URLs (a query built per call) are parsed each time, never kept


def _target(url: str) -> _Target:
    """Where ``url`` goes and the request target to send; raises _Refused saying why it cannot be sent.

    A tool calls the same few URLs again and again: their parse (13 us, urllib's split and
    quoting) is kept, as a frozen value, for the last 256.
    """
    return _parsed(url) if len(url) <= _CACHED_URL else _parse(url)


@functools.lru_cache(maxsize=256)
def _parsed(url: str) -> _Target:
    return _parse(url)   # (a _Refused is raised, not kept: a bad URL is parsed again each time)


def _parse(url: str) -> _Target:
    try:
        parts = urllib.parse.urlsplit(url)
        port = parts.port
    except ValueError as exc:
        raise _Refused(f"the URL is not valid ({exc})") from None
    if parts.scheme not in ("http", "https"):
        raise _Refused(f"the URL must start with http:// or https://, found {parts.scheme or 'no'} scheme")
    if not parts.hostname:
        raise _Refused("the URL has no host")
    if parts.username is not None or parts.password is not None:
        raise _Refused("the URL carries a user or password; send an Authorization header instead")
    default = 443 if parts.scheme == "https" else 80
    port = port or default
    host = parts.hostname
    shown = f"[{host}]" if ":" in host else host
    path = urllib.parse.quote(parts.path or "/", safe=_PATH_SAFE)
    query = urllib.parse.quote(parts.query, safe=_QUERY_SAFE)
    target = path + (f"?{query}" if query else "")
    return _Target(parts.scheme, host, port, target, shown if port == default else f"{shown}:{port}")


def _head(request: Request, target: _Target, user_agent: str, keep_alive: bool) -> bytes:
    method = request.method.upper()
    if not _METHOD.fullmatch(method):
        raise _Refused(f"{request.method!r} is not an HTTP method")
    given = {name.lower() for name, _ in request.headers}
    lines = [f"{method} {target.target} HTTP/1.1", f"Host: {target.host_header}"]
    for name, value in (("User-Agent", user_agent), ("Accept", "*/*"), ("Accept-Encoding", "identity")):
        if name.lower() not in given:
            lines.append(f"{name}: {value}")
    for name, value in request.headers:
        if not _TOKEN.fullmatch(name):
            raise _Refused(f"header name {name!r} is not valid")
        if name.lower() in ("host", "content-length", "connection", "transfer-encoding"):
            continue  # framing is ours to say
        if _CTL.search(value):
            raise _Refused(f"the value of header {name} contains a line break or control character")
        lines.append(f"{name}: {value}")
    if not keep_alive:
        lines.append("Connection: close")
    if request.body or method in ("POST", "PUT", "PATCH"):
        lines.append(f"Content-Length: {len(request.body)}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("utf-8")


@functools.lru_cache(maxsize=1)
def _tls() -> ssl.SSLContext:
    """Built once: loading the system's CA certificates costs milliseconds."""
    return ssl.create_default_context()


async def fetch(request: Request, *, deadline: float, cap: int, sink: Sink | None = None,
                user_agent: str = "bitong", hosts: Sequence[str] | None = None, pool: Pool | None = None) -> Outcome:
    """Send ``request`` and answer with its :class:`Outcome` (see the module docstring).

    ``hosts``: the tool's ``network_hosts`` (the generic ``http`` executor's
    calls; None for configured endpoints): the destination is checked by
    :mod:`.destinations` and the connection made to a checked address.
    ``pool``: where connections are kept alive (the :class:`Executors`'
    one); None: a connection for this request only.

    Raises only CancelledError (and the sink's errors, after dropping the connection).
    """
    started = time.monotonic()
    pool = pool or _ONE_SHOT
    try:
        target = _target(request.url)
        head = _head(request, target, user_agent, pool.keep_alive)
    except _Refused as exc:
        return Outcome(ok=False, error=f"cannot send the request: {exc}")
    if deadline <= started:
        return Outcome(ok=False, timed_out=True,
                       error="timed out before start: the deadline had already passed; nothing was sent")
    state = _State()
    method = request.method.upper()
    shown = f"{method} {target.scheme}://{target.host_header}{target.target}"   # no headers: they hold tokens
    conn: Connection | None = None
    reusable = False
    timeout = asyncio.timeout(deadline - started)
    failure = ""
    retryable = False
    timed_out = False
    try:
        try:
            async with timeout:
                conn = await _connect(pool, target, hosts)
                reader, writer = conn.reader, conn.writer
                state.phase = "sending the request"
                writer.write(head)
                if request.body:
                    writer.write(request.body)
                await writer.drain()
                state.phase = "waiting for the response"
                await _read_head(reader, state)
                stream = sink is not None and 200 <= state.status < 300
                if stream:
                    assert sink is not None
                    await sink(STDERR, state.head)
                    state.sent_err = len(state.head)
                state.phase = "reading the body"
                try:
                    await _read_body(reader, state, method, cap, sink if stream else None)
                except _Enough:
                    state.truncated = True
                reusable = state.keep_alive and state.complete and not state.truncated
        except TimeoutError:
            if not timeout.expired():
                raise  # a socket-level timeout: an OSError, handled below
            timed_out = True
    except destinations.Refused as exc:
        return Outcome(ok=False, error=f"refused: {exc}; nothing was sent", duration_ms=int((time.monotonic() - started) * 1000))
    except TimeoutError as exc:  # the OS gave up connecting (ETIMEDOUT)
        failure = f"connection to {target.where} timed out ({exc.strerror or 'no answer'}) while {state.phase}"
    except ConnectionRefusedError:
        failure = f"connection refused by {target.where}"
        retryable = True
    except socket.gaierror as exc:
        failure = f"cannot resolve host {target.host!r}: {exc.strerror}"
    except ssl.SSLCertVerificationError as exc:
        failure = f"TLS certificate of {target.where} not accepted: {exc.verify_message or exc.reason}"
    except ssl.SSLError as exc:
        failure = f"TLS with {target.where} failed while {state.phase}: {exc.reason or exc}"
    except asyncio.IncompleteReadError:
        failure = (f"connection closed by {target.where} before it answered"
                   if state.phase == "waiting for the response"
                   else f"connection closed by {target.where} while {state.phase}")
    except asyncio.LimitOverrunError:
        failure = f"the response head from {target.where} is longer than {_MAX_HEAD} bytes"
    except _BadResponse as exc:
        failure = f"the answer from {target.where} is not HTTP/1.1: {exc}"
    except ConnectionError as exc:
        failure = f"connection to {target.where} lost while {state.phase}: {exc.strerror or type(exc).__name__}"
    except OSError as exc:
        if state.phase == "connecting" and _all_refused(exc):
            failure = f"connection refused by {target.where}"   # every address of the host refused
            retryable = True
        elif state.phase == "connecting":
            failure = f"cannot connect to {target.where}: {exc}"
        else:
            failure = f"network error with {target.where} while {state.phase}: {exc}"
    finally:
        if conn is not None:   # kept only when read to its end; otherwise abort frees it now, even mid-body
            pool.release(conn, reusable=reusable)
    out = _outcome(state, started, deadline, cap, method, target, sink is not None, failure, retryable, timed_out)
    out.http_request = shown
    return out


async def _connect(pool: Pool, target: _Target, hosts: Sequence[str] | None) -> Connection:
    """A connection from the pool, or a new one: to the host as named, or (``hosts`` given) to each
    checked address in turn. Keyed by the ``hosts`` rule too: reuse never skips a destination check
    that a different rule would have made."""
    tls = _tls() if target.scheme == "https" else None
    name = target.host if target.scheme == "https" else None
    loop = asyncio.get_running_loop()

    async def open_(factory: Callable[[], asyncio.Protocol]) -> tuple[asyncio.BaseTransport, asyncio.BaseProtocol]:
        if hosts is None:
            return await loop.create_connection(factory, target.host, target.port, ssl=tls, server_hostname=name)
        addresses = await destinations.resolve(target.host, target.port, hosts)
        last: OSError | None = None
        for address in addresses:
            try:
                return await loop.create_connection(factory, address, target.port, ssl=tls, server_hostname=name)
            except ConnectionRefusedError as exc:
                last = exc
        assert last is not None
        raise last

    key = (target.scheme, target.host.lower(), target.port, tls_key(tls), None if hosts is None else tuple(hosts))
    conn = await pool.acquire(key, open_)
    if conn.reused and (conn.broken or not conn.quiet()):   # died idle, nothing sent on it yet: one fresh one
        pool.release(conn, reusable=False)
        conn = await pool.acquire(key, open_, fresh=True)
    return conn


def _all_refused(exc: OSError) -> bool:
    """asyncio (3.11) joins the errors of a host's several addresses into one OSError without an errno."""
    codes = _ERRNO.findall(str(exc)) if exc.errno is None else []
    return bool(codes) and all(int(code) == errno.ECONNREFUSED for code in codes)


def _outcome(state: _State, started: float, deadline: float, cap: int, method: str, target: _Target,
             streaming: bool, failure: str, retryable: bool, timed_out: bool) -> Outcome:
    status = state.status
    out = Outcome(ok=False, http_status=status, duration_ms=int((time.monotonic() - started) * 1000),
                  timed_out=timed_out, truncated=state.truncated)
    streamed = state.sent_out or state.sent_err
    if streamed:
        out.streamed_stdout_bytes = state.sent_out
        out.streamed_stderr_bytes = state.sent_err
    else:
        out.stdout = bytes(state.body)
        out.stderr = state.head[:cap]
        out.truncated = state.truncated or len(state.head) > cap
    if timed_out:
        budget = round((deadline - started) * 1000)
        got = f" (HTTP {status})" if status else ""
        out.error = f"timed out after {budget} ms while {state.phase}{got} ({target.where}); the connection was dropped"
    elif failure:
        out.error = failure
        out.retryable = retryable
    elif 200 <= status < 300:
        out.ok = True
    else:
        out.error = f"HTTP {status} {state.reason}".rstrip()
        if state.location is not None and 300 <= status < 400:
            out.error += f" (redirects are not followed; Location: {state.location})"
        out.retryable = status == 503 or (status in (502, 504) and method in IDEMPOTENT)
    if streaming and not streamed and not out.ok and not failure and not timed_out:
        out.error += " (not streamed: an error answer comes back whole in the result)"
    return out


async def _read_head(reader: asyncio.StreamReader, state: _State) -> None:
    """Status line and headers into ``state``; interim 1xx answers are read and dropped."""
    while True:
        raw = bytearray(await reader.readuntil(b"\n"))
        m = _STATUS.fullmatch(bytes(raw))
        if m is None:
            raise _BadResponse(f"the status line is {bytes(raw[:80])!r}")
        status = int(m.group(2))
        headers: list[tuple[str, str]] = []
        while True:
            line = await reader.readuntil(b"\n")
            raw += line
            if len(raw) > _MAX_HEAD:
                raise asyncio.LimitOverrunError("head too long", len(raw))
            if line in (b"\r\n", b"\n"):
                break
            name, sep, value = line.decode("latin-1").partition(":")
            if not sep or not _TOKEN.fullmatch(name):
                raise _BadResponse(f"a header line is {line[:80]!r}")
            headers.append((name, value.strip()))
        if 100 <= status < 200 and status != 101:
            continue
        state.status = status
        state.reason = (m.group(3) or b"").decode("latin-1").strip()
        closing = "close" in (header(headers, "connection") or "").lower()
        state.keep_alive = m.group(1) == b"1" and not closing
        state.head = bytes(raw)
        state.location = header(headers, "location")
        state.headers = headers
        return


async def _read_body(reader: asyncio.StreamReader, state: _State, method: str, cap: int, sink: Sink | None) -> None:
    headers = state.headers

    async def deliver(data: bytes) -> None:
        if sink is not None:
            await sink(STDOUT, data)
            state.sent_out += len(data)
            return
        state.seen += len(data)
        room = cap - len(state.body)
        if room > 0:
            state.body += data[:room]
        if state.seen > cap:
            raise _Enough

    if method == "HEAD" or state.status in (204, 304):
        state.complete = True
        return
    coding = (header(headers, "transfer-encoding") or "").lower()
    if coding and coding.split(",")[-1].strip() == "chunked":
        await _chunked(reader, deliver)
        state.complete = True
        return
    length_text = header(headers, "content-length")
    if length_text is not None:
        if not length_text.isdigit():
            raise _BadResponse(f"Content-Length is {length_text!r}")
        left = int(length_text)
        while left:
            data = await reader.read(min(left, _READ))
            if not data:
                raise asyncio.IncompleteReadError(b"", left)
            left -= len(data)
            await deliver(data)
        state.complete = True
        return
    while True:  # no framing: the body runs to the end of the connection
        data = await reader.read(_READ)
        if not data:
            return
        await deliver(data)


async def _chunked(reader: asyncio.StreamReader, deliver: Callable[[bytes], Awaitable[None]]) -> None:
    while True:
        line = await reader.readuntil(b"\n")
        size_text = line.split(b";", 1)[0].strip()
        try:
            size = int(size_text, 16)
        except ValueError:
            raise _BadResponse(f"a chunk size is {size_text[:20]!r}") from None
        if size == 0:
            while (await reader.readuntil(b"\n")) not in (b"\r\n", b"\n"):
                pass  # trailers
            return
        while size:
            data = await reader.read(min(size, _READ))
            if not data:
                raise asyncio.IncompleteReadError(b"", size)
            size -= len(data)
            await deliver(data)
        await reader.readexactly(2)
