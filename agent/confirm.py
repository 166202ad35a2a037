"""Single-use confirmation tokens for ``require_confirm`` tools.

A token is bound to the tool's name, the exact bytes of its definition
(content hash) and its exact, validated parameters. It is spent only when it
runs the call it was issued for; presented with other parameters, for a
changed definition, or after it expired, it runs nothing.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import secrets
import threading
import time
from typing import Any, Callable

__all__ = ["DEFAULT_TTL_S", "Issued", "ConfirmBook"]

DEFAULT_TTL_S = 300.0


def _fingerprint(tool: str, tool_sha256: str, params: dict[str, Any]) -> str:
    canonical = json.dumps([tool, tool_sha256, params], sort_keys=True, ensure_ascii=False, default=str)
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


@dataclasses.dataclass(frozen=True)
class Issued:
    token: str
    expires_unix_ms: int


@dataclasses.dataclass
class _Pending:
    tool: str
    fingerprint: str
    expires_at: float  # monotonic
    expires_unix_ms: int


class ConfirmBook:
    """Issues and checks tokens; thread-safe; expired tokens are purged as it goes."""

    def __init__(self, ttl_s: float = DEFAULT_TTL_S, *, clock: Callable[[], float] = time.monotonic) -> None:
        self.ttl_s = ttl_s
        self._clock = clock
        self._lock = threading.Lock()
        self._pending: dict[str, _Pending] = {}

    def issue(self, tool: str, tool_sha256: str, params: dict[str, Any]) -> Issued:
        now = self._clock()
        token = secrets.token_urlsafe(24)
        expires_ms = int((time.time() + self.ttl_s) * 1000)
        with self._lock:
            self._purge(now)
            self._pending[token] = _Pending(tool, _fingerprint(tool, tool_sha256, params), now + self.ttl_s, expires_ms)
        return Issued(token, expires_ms)

    def check(self, token: str, tool: str, tool_sha256: str, params: dict[str, Any]) -> str:
        """Why this token cannot run this call, or "" when it can (the token is not spent yet)."""
        with self._lock:
            pending = self._pending.get(token)
            if pending is None:
                return "unknown or already used confirm_token"
            if self._clock() >= pending.expires_at:
                del self._pending[token]
                return "confirm_token expired; call again without it to get a new one"
            if pending.tool != tool:
                return f"confirm_token was issued for tool '{pending.tool}', not '{tool}'"
            if pending.fingerprint != _fingerprint(tool, tool_sha256, params):
                return "confirm_token was issued for other parameters (or an older definition of the tool)"
            return ""

    def spend(self, token: str) -> bool:
        """Use the token up; False if someone else spent it first."""
        with self._lock:
            return self._pending.pop(token, None) is not None

    def _purge(self, now: float) -> None:
        dead = [t for t, p in self._pending.items() if now >= p.expires_at]
        for t in dead:
            del self._pending[t]
