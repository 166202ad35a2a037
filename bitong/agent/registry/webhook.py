"""The push webhook: a Forgejo, Gitea or GitHub push makes the tools repository fetch at once.

Standard library only (http.server in a thread of its own, as the approvals
page). A request counts only when its body's HMAC-SHA256 under the shared
secret is the one the forge sent (``X-Hub-Signature-256: sha256=<hex>`` from
GitHub, ``X-Gitea-Signature`` / ``X-Forgejo-Signature: <hex>`` from the
others), compared in constant time; anything else is 401 and fetches
nothing. The payload's ``ref`` picks the branch: a push to another branch is
acknowledged and ignored. The webhook only says "fetch now": what is
served still comes from git, so a forged payload can at most cost a fetch.
"""

from __future__ import annotations

import hashlib
import hmac
import http.server
import json
import logging
import threading
from collections.abc import Callable
from typing import Any

__all__ = ["Webhook", "signature_ok", "MAX_BODY"]

log = logging.getLogger("bitong.webhook")

MAX_BODY = 25 * 1024 * 1024   # GitHub caps payloads at 25 MB
_HEADERS = ("X-Hub-Signature-256", "X-Forgejo-Signature", "X-Gitea-Signature", "X-Gogs-Signature")


def signature_ok(secret: bytes, body: bytes, headers: Any) -> bool:
    """True when one of the forges' signature headers is the body's HMAC-SHA256 under ``secret``."""
    expected = hmac.new(secret, body, hashlib.sha256).hexdigest()
    for name in _HEADERS:
        sent = headers.get(name)
        if not sent:
            continue
        sent = sent.strip()
        if name == "X-Hub-Signature-256":
            if not sent.startswith("sha256="):
                return False
            sent = sent[len("sha256="):]
        return hmac.compare_digest(sent.lower().encode(), expected.encode())
    return False


class Webhook:
    """``POST /`` (any path) from a forge; ``on_push()`` is called (from this server's thread) for the branch."""

    def __init__(self, address: str, secret: bytes, branch: Callable[[], str], on_push: Callable[[], None]) -> None:
        if not secret:
            raise ValueError("the webhook needs a shared secret (the one the forge signs with)")
        host, _, port = address.rpartition(":")
        if not host or not port.isdigit():
            raise ValueError(f"--webhook wants HOST:PORT, such as 127.0.0.1:8787, not {address!r}")
        self.secret = secret
        self.branch = branch
        self.on_push = on_push
        hook = self

        class Handler(http.server.BaseHTTPRequestHandler):
            server_version = "bitong-webhook"

            def log_message(self, format: str, *args: Any) -> None:
                log.debug("webhook %s: " + format, self.client_address[0], *args)

            def do_POST(self) -> None:
                hook._post(self)

        self._server = http.server.ThreadingHTTPServer((host.strip("[]"), int(port)), Handler)
        self._server.daemon_threads = True
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    @property
    def url(self) -> str:
        host = self._server.server_address[0]
        shown = host.decode() if isinstance(host, bytes) else host
        return f"http://{shown}:{self.port}/"

    def start(self) -> None:
        self._thread = threading.Thread(target=self._server.serve_forever, name="bitong-webhook", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        if self._thread is not None:   # shutdown() waits for serve_forever: only once it runs
            self._server.shutdown()
        self._server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def _post(self, req: http.server.BaseHTTPRequestHandler) -> None:
        try:
            length = int(req.headers.get("Content-Length", ""))
        except ValueError:
            return _answer(req, 411, {"error": "a Content-Length is needed"})
        if length < 0 or length > MAX_BODY:
            return _answer(req, 413, {"error": f"the body is over {MAX_BODY} bytes"})
        body = req.rfile.read(length)
        if not signature_ok(self.secret, body, req.headers):
            log.warning("webhook from %s: missing or wrong signature; nothing fetched", req.client_address[0])
            return _answer(req, 401, {"error": "missing or wrong signature (HMAC-SHA256 of the body under the "
                                               "shared secret)"})
        try:
            payload = json.loads(body) if body else {}
        except ValueError:
            return _answer(req, 400, {"error": "the body is not JSON"})
        event = req.headers.get("X-GitHub-Event") or req.headers.get("X-Gitea-Event") or \
            req.headers.get("X-Forgejo-Event") or "push"
        if event == "ping":
            return _answer(req, 200, {"ok": True})
        ref = payload.get("ref", "") if isinstance(payload, dict) else ""
        branch = self.branch()
        if branch and ref and ref != f"refs/heads/{branch}":
            return _answer(req, 202, {"fetching": False, "why": f"{ref} is not refs/heads/{branch}"})
        log.info("webhook: %s event for %s: fetching", event, ref or "the branch")
        self.on_push()
        return _answer(req, 202, {"fetching": True})


def _answer(req: http.server.BaseHTTPRequestHandler, status: int, body: dict[str, Any]) -> None:
    data = json.dumps(body).encode()
    req.send_response(status)
    req.send_header("Content-Type", "application/json")
    req.send_header("Content-Length", str(len(data)))
    req.end_headers()
    req.wfile.write(data)
