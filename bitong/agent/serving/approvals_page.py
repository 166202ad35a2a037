"""The approvals page: pending human confirmations in a browser, on loopback only.

``bitong serve --approvals-http 127.0.0.1:PORT`` serves one page listing the
requests waiting for a person, each with its tool, exact parameters and an
Approve and a Deny button. It binds only to a loopback address and answers
only a request that carries the admin token: ``?token=`` once (it becomes an
HttpOnly, SameSite=Strict cookie and the address bar drops it), the cookie,
or ``Authorization: Bearer``. A decision (POST) must carry the token in the
form or the header, never the cookie alone, so another site cannot make the
browser approve anything (CSRF); the Host header must name the loopback
address too (DNS rebinding). The token is random per start, or ``[confirm]
http_token_env``/``http_token_file`` in the config.

Standard library only (http.server in a thread of its own); decisions go
through :meth:`HumanConfirmations.decide`, which is thread-safe and wakes the
waiting call on its event loop.
"""

from __future__ import annotations

import hmac
import html
import http.server
import ipaddress
import json
import logging
import secrets
import socket
import threading
import time
import urllib.parse
from typing import Any

from ..calling.humanconfirm import PENDING, DecisionError, HumanConfirmations, Request

__all__ = ["ApprovalsPage", "parse_address", "COOKIE"]

log = logging.getLogger("bitong.approvals")

COOKIE = "bitong_approvals"
_MAX_BODY = 16 * 1024
_HEADERS = {
    "Content-Security-Policy": "default-src 'none'; style-src 'unsafe-inline'; form-action 'self'; "
                               "frame-ancestors 'none'",
    "X-Frame-Options": "DENY",
    "Cache-Control": "no-store",
    "Referrer-Policy": "no-referrer",
    "X-Content-Type-Options": "nosniff",
}


def parse_address(text: str) -> tuple[str, int]:
    """``127.0.0.1:PORT``, ``[::1]:PORT`` or ``localhost:PORT``; raises ValueError for anything not loopback."""
    host, sep, port_text = text.rpartition(":")
    host = host.strip("[]")
    if not sep or not port_text.isdigit() or not 0 <= int(port_text) <= 65535:
        raise ValueError(f"--approvals-http {text!r}: expected 127.0.0.1:PORT")
    if host != "localhost":
        try:
            loopback = ipaddress.ip_address(host).is_loopback
        except ValueError:
            loopback = False
        if not loopback:
            raise ValueError(f"--approvals-http {text!r}: the approvals page listens on a loopback address only "
                             "(127.0.0.1, ::1 or localhost); reach it from elsewhere through an SSH tunnel")
    return ("127.0.0.1" if host == "localhost" else host), int(port_text)


class ApprovalsPage:
    """The page's HTTP server, in a daemon thread; ``start()`` binds, ``stop()`` closes."""

    def __init__(self, book: HumanConfirmations, address: str, token: str | None = None) -> None:
        self.book = book
        self.host, port = parse_address(address)
        self.token = token or secrets.token_urlsafe(24)
        page = self

        class Handler(_Handler):
            owner = page

        server_class = http.server.ThreadingHTTPServer
        if ":" in self.host:
            class V6Server(http.server.ThreadingHTTPServer):
                address_family = socket.AF_INET6
            server_class = V6Server
        self.server = server_class((self.host, port), Handler)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}/"

    def start(self) -> None:
        self._thread = threading.Thread(target=self.server.serve_forever, name="bitong-approvals-page", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)


class _Handler(http.server.BaseHTTPRequestHandler):
    owner: ApprovalsPage
    server_version = "bitong-approvals"
    sys_version = ""

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("%s %s", self.address_string(), format % args)

    # ------------------------------------------------------------ checks

    def _host_ok(self) -> bool:
        host = (self.headers.get("Host") or "").lower()
        page = self.owner
        names = {f"{page.host}:{page.port}", f"localhost:{page.port}", f"[{page.host}]:{page.port}"}
        return host in names

    def _bearer(self) -> str:
        value = self.headers.get("Authorization") or ""
        return value[7:].strip() if value.lower().startswith("bearer ") else ""

    def _cookie(self) -> str:
        for part in (self.headers.get("Cookie") or "").split(";"):
            name, _, value = part.strip().partition("=")
            if name == COOKIE:
                return value
        return ""

    def _is(self, given: str) -> bool:
        return bool(given) and hmac.compare_digest(given.encode(), self.owner.token.encode())

    # ------------------------------------------------------------ answers

    def _send(self, status: int, body: bytes, content_type: str, extra: dict[str, str] | None = None) -> None:
        self.send_response(status)
        for name, value in {**_HEADERS, **(extra or {})}.items():
            self.send_header(name, value)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _text(self, status: int, message: str) -> None:
        self._send(status, (message + "\n").encode(), "text/plain; charset=utf-8")

    def do_GET(self) -> None:
        if not self._host_ok():
            return self._text(421, "this page answers only on its loopback address")
        url = urllib.parse.urlsplit(self.path)
        query = urllib.parse.parse_qs(url.query)
        if self._is(query.get("token", [""])[0]):   # once: into a cookie, out of the address bar
            cookie = f"{COOKIE}={self.owner.token}; HttpOnly; SameSite=Strict; Path=/"
            return self._send(303, b"", "text/plain", {"Location": url.path or "/", "Set-Cookie": cookie})
        if not (self._is(self._bearer()) or self._is(self._cookie())):
            return self._text(401, "the approvals page needs its token: open the address bitong serve printed "
                                   "(…/?token=…), or send Authorization: Bearer TOKEN")
        requests = self.owner.book.pending()
        if url.path == "/pending.json":
            body = json.dumps([_as_json(r) for r in requests], ensure_ascii=False).encode()
            return self._send(200, body, "application/json")
        if url.path != "/":
            return self._text(404, "not found")
        return self._send(200, _page(requests, self.owner.token).encode(), "text/html; charset=utf-8")

    def do_POST(self) -> None:
        if not self._host_ok():
            return self._text(421, "this page answers only on its loopback address")
        path = urllib.parse.urlsplit(self.path).path
        if path not in ("/approve", "/deny"):
            return self._text(404, "not found")
        length = self.headers.get("Content-Length", "")
        if not length.isdigit() or int(length) > _MAX_BODY:
            return self._text(411 if not length.isdigit() else 413, "a form of at most 16 KiB with Content-Length")
        form = urllib.parse.parse_qs(self.rfile.read(int(length)).decode("utf-8", "replace"))
        # the cookie alone is not enough: a form another site posts through the browser would carry it
        if not (self._is(form.get("token", [""])[0]) or self._is(self._bearer())):
            return self._text(403, "a decision needs the token in the form (token=) or Authorization: Bearer")
        approval_id = form.get("id", [""])[0]
        reason = form.get("reason", [""])[0][:500]
        try:
            decided = self.owner.book.decide(approval_id, path == "/approve", f"the approvals page "
                                             f"({self.client_address[0]})", reason)
        except DecisionError as exc:
            return self._text(404 if exc.code == "NOT_FOUND" else 409, exc.message)
        log.warning("request %s (%s) %s on the approvals page", decided.id, decided.tool, decided.state)
        if "application/json" in (self.headers.get("Accept") or ""):
            return self._send(200, json.dumps(_as_json(decided), ensure_ascii=False).encode(), "application/json")
        return self._send(303, b"", "text/plain", {"Location": "/"})

    do_HEAD = do_GET


def _as_json(request: Request) -> dict[str, Any]:
    return {"id": request.id, "tool": request.tool, "params": request.params, "state": request.state,
            "method": request.method, "command": request.command, "tool_sha256": request.tool_sha256,
            "created_unix_ms": request.created_unix_ms, "expires_unix_ms": request.expires_unix_ms,
            "decided_by": request.decided_by, "reason": request.reason, "requester": request.requester}


def _page(requests: list[Request], token: str) -> str:
    esc = html.escape
    rows = []
    for r in requests:
        params = esc(json.dumps(r.params, ensure_ascii=False, indent=1, sort_keys=True))
        expires = time.strftime("%H:%M:%S", time.localtime(r.expires_unix_ms / 1000))
        if r.state == PENDING:
            action = "".join(
                f'<form method="post" action="/{verb}"><input type="hidden" name="token" value="{esc(token)}">'
                f'<input type="hidden" name="id" value="{esc(r.id)}">'
                f'<input name="reason" placeholder="reason (optional)"><button>{verb.title()}</button></form>'
                for verb in ("approve", "deny"))
        else:
            action = esc(f"{r.state} by {r.decided_by}" + (f": {r.reason}" if r.reason else ""))
        command = f"<div><code>{esc(r.command)}</code></div>" if r.command else ""
        command += f"<div>asked by {esc(r.requester)}</div>" if r.requester else ""
        rows.append(f"<tr><td><b>{esc(r.tool)}</b><div>{esc(r.id)}</div>{command}</td><td><pre>{params}</pre></td>"
                    f"<td>{esc(r.state)}<div>until {expires}</div></td><td>{action}</td></tr>")
    body = "".join(rows) or '<tr><td colspan="4">nothing waits for a decision</td></tr>'
    return ("<!doctype html><html><head><meta charset=\"utf-8\"><title>bitong approvals</title>"
            "<style>body{font-family:sans-serif;margin:2em}td{vertical-align:top;padding:.5em;"
            "border-bottom:1px solid #ccc}pre{margin:0}form{margin:.2em 0}</style></head><body>"
            "<h1>bitong: calls waiting for a person</h1><p>Each runs once, exactly with these parameters, "
            "if approved. Reload to see new requests.</p><table><tr><th>tool</th><th>parameters</th><th>state</th>"
            f"<th>decision</th></tr>{body}</table></body></html>")
