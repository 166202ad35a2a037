"""A real HTTP/1.1 server on 127.0.0.1 (a free port), in a thread: what the executor tests talk to.

Nothing is mocked: the executors open real sockets to it and it answers
with real bytes. Routes are ``(verb, regex) -> function(exchange)``; an
:class:`Exchange` can answer at once, answer in chunks as the test allows
(``threading.Event``), hold the answer back until the test releases it, or
wait until the client hangs up, so tests wait on events, never on sleeps.
Every request is recorded (verb, path, query, headers, body), and every
connection counted as it is accepted and closed (the keep-alive tests).
With ``tls=(cert, key)`` it speaks HTTPS.
"""

from __future__ import annotations

import dataclasses
import http.server
import json
import re
import select
import socket
import ssl
import threading
import urllib.parse
from typing import Any
from collections.abc import Callable, Iterable

__all__ = ["Exchange", "FakeServer", "Recorded", "Reply"]


@dataclasses.dataclass
class Recorded:
    """One request as it arrived."""

    method: str
    path: str
    query: dict[str, list[str]]
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


@dataclasses.dataclass
class Reply:
    status: int = 200
    body: bytes | str | Any = b""
    headers: dict[str, str] = dataclasses.field(default_factory=dict)


class Exchange:
    """The request being answered, and the ways to answer it."""

    def __init__(self, handler: http.server.BaseHTTPRequestHandler, request: Recorded, match: re.Match[str]) -> None:
        self.handler = handler
        self.request = request
        self.match = match

    def send(self, status: int, body: bytes | str | Any = b"", headers: dict[str, str] | None = None) -> None:
        """A whole answer with Content-Length; text is UTF-8, anything else not bytes is sent as JSON."""
        data, kind = _encode(body)
        h = self.handler
        h.send_response(status)
        for name, value in {"Content-Type": kind, **(headers or {})}.items():
            h.send_header(name, value)
        h.send_header("Content-Length", str(len(data)))
        h.end_headers()
        h.wfile.write(data)
        h.wfile.flush()

    def send_chunked(self, chunks: Iterable[bytes], status: int = 200, content_type: str = "text/plain") -> None:
        """Transfer-Encoding: chunked; each item is written and flushed when the iterator yields it."""
        h = self.handler
        h.send_response(status)
        h.send_header("Content-Type", content_type)
        h.send_header("Transfer-Encoding", "chunked")
        h.end_headers()
        h.wfile.flush()
        for chunk in chunks:
            if chunk:
                h.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                h.wfile.flush()
        h.wfile.write(b"0\r\n\r\n")
        h.wfile.flush()

    def wait_client_gone(self, within: float = 20.0) -> bool:
        """Block until the client closed the connection (or ``within`` passed)."""
        sock: socket.socket = self.handler.connection
        readable, _, _ = select.select([sock], [], [], within)
        if not readable:
            return False
        try:
            return sock.recv(1, socket.MSG_PEEK) == b""
        except OSError:
            return True


Route = Callable[[Exchange], "Reply | None"]


def _encode(body: Any) -> tuple[bytes, str]:
    if isinstance(body, bytes):
        return body, "application/octet-stream"
    if isinstance(body, str):
        return body.encode("utf-8"), "text/plain; charset=utf-8"
    return json.dumps(body, ensure_ascii=False).encode("utf-8"), "application/json;charset=utf-8"


class FakeServer:
    """``with FakeServer() as srv: srv.route("GET", r"/x", fn)``; ``srv.url`` is ``http://127.0.0.1:PORT``."""

    def __init__(self, tls: tuple[str, str] | None = None) -> None:
        self.routes: list[tuple[str, re.Pattern[str], Route]] = []
        self.requests: list[Recorded] = []
        self.lock = threading.Lock()
        self.release = threading.Event()   # set at stop(): anything held back lets go
        self.connections = threading.Condition()
        self.accepted = 0          # connections accepted
        self.closed = 0            # connections closed (by either side), after the socket was closed
        self.most_open = 0         # the most open at once
        owner = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:  # quiet: pytest shows failures
                pass

            def _any(self) -> None:
                owner._dispatch(self)

            def setup(self) -> None:
                super().setup()
                with owner.connections:
                    owner.accepted += 1
                    owner.most_open = max(owner.most_open, owner.accepted - owner.closed)

            do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = do_HEAD = do_OPTIONS = _any

        class Server(http.server.ThreadingHTTPServer):
            def shutdown_request(self, request: Any) -> None:
                super().shutdown_request(request)
                with owner.connections:
                    owner.closed += 1
                    owner.connections.notify_all()

        self.httpd = Server(("127.0.0.1", 0), Handler)
        if tls is not None:
            context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            context.load_cert_chain(*tls)
            self.httpd.socket = context.wrap_socket(self.httpd.socket, server_side=True)
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.01},
                                       name="fake-http", daemon=True)

    @property
    def port(self) -> int:
        return int(self.httpd.server_address[1])

    @property
    def url(self) -> str:
        scheme = "https" if isinstance(self.httpd.socket, ssl.SSLSocket) else "http"
        return f"{scheme}://127.0.0.1:{self.port}"

    def wait_closed(self, count: int, within: float = 10.0) -> bool:
        """Block until ``count`` connections have closed (or ``within`` passed)."""
        with self.connections:
            return self.connections.wait_for(lambda: self.closed >= count, within)

    def route(self, method: str, pattern: str, fn: Route) -> None:
        """Answer ``method`` on paths matching ``pattern`` (a full match) with ``fn``; later routes win."""
        self.routes.insert(0, (method, re.compile(pattern), fn))

    def count(self, method: str, path: str) -> int:
        with self.lock:
            return sum(1 for r in self.requests if r.method == method and r.path == path)

    def start(self) -> FakeServer:
        self.thread.start()
        return self

    def stop(self) -> None:
        self.release.set()
        self.httpd.shutdown()
        self.httpd.server_close()

    def __enter__(self) -> FakeServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _dispatch(self, h: http.server.BaseHTTPRequestHandler) -> None:
        parts = urllib.parse.urlsplit(h.path)
        length = int(h.headers.get("Content-Length") or 0)
        body = h.rfile.read(length) if length else b""
        path = urllib.parse.unquote(parts.path)
        rec = Recorded(h.command, path, urllib.parse.parse_qs(parts.query, keep_blank_values=True),
                       {k.lower(): v for k, v in h.headers.items()}, body)
        with self.lock:
            self.requests.append(rec)
        for method, pattern, fn in self.routes:
            m = pattern.fullmatch(parts.path)   # raw (still percent-encoded) path: routes see segments as sent
            if method == h.command and m:
                try:
                    reply = fn(Exchange(h, rec, m))
                    if reply is not None:
                        Exchange(h, rec, m).send(reply.status, reply.body, reply.headers)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client went away (a timeout or a cancellation under test)
                return
        Exchange(h, rec, re.match("", "")).send(404, {"message": "no such route in the fake", "url": h.path})
