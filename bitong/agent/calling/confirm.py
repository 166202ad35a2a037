"""Single-use confirmation tokens for ``require_confirm`` tools.

A token is bound to the tool's name, the exact bytes of its definition
(content hash) and its exact, validated parameters. It is spent only when it
runs the call it was issued for; presented with other parameters, for a
changed definition, or after it expired, it runs nothing.

At most ``max_pending`` tokens wait at once: past that the oldest pending
token is dropped (its call can be asked for again), so a caller that asks
for confirmations and never confirms cannot grow the sidecar's memory.
Tokens expire in issue order (one TTL for all), so purging looks only at the
oldest: issuing stays O(1) however many are pending.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import secrets
import threading
import time
from typing import Any
from collections.abc import Callable

__all__ = ["DEFAULT_TTL_S", "DEFAULT_MAX_PENDING", "Issued", "ConfirmBook"]

DEFAULT_TTL_S = 300.0
DEFAULT_MAX_PENDING = 1024


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

    def __init__(self, ttl_s: float = DEFAULT_TTL_S, *, clock: Callable[[], float] = time.monotonic,
                 max_pending: int = DEFAULT_MAX_PENDING) -> None:
        if max_pending < 1:
            raise ValueError(f"max_pending must be at least 1, not {max_pending}")
        self.ttl_s = ttl_s
        self.max_pending = max_pending
        self._clock = clock
        self._lock = threading.Lock()
        self._pending: dict[str, _Pending] = {}   # insertion order is expiry order

    def __len__(self) -> int:
        """Tokens pending (expired ones included until the next issue purges them)."""
        return len(self._pending)

    def issue(self, tool: str, tool_sha256: str, params: dict[str, Any]) -> Issued:
        now = self._clock()
        token = secrets.token_urlsafe(24)
        expires_ms = int((time.time() + self.ttl_s) * 1000)
        fingerprint = _fingerprint(tool, tool_sha256, params)
        with self._lock:
            self._purge(now)
            while len(self._pending) >= self.max_pending:
                del self._pending[next(iter(self._pending))]   # the oldest goes first
            self._pending[token] = _Pending(tool, fingerprint, now + self.ttl_s, expires_ms)
        return Issued(token, expires_ms)

    def check(self, token: str, tool: str, tool_sha256: str, params: dict[str, Any]) -> str:
        """Why this token cannot run this call, or "" when it can (the token is not spent yet)."""
        with self._lock:
            pending = self._pending.get(token)
            if pending is None:
                return (f"unknown or already used confirm_token (or dropped: at most {self.max_pending} "
                        "confirmations wait at once); call again without it to get a new one")
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
        """Drop expired tokens from the oldest end; stops at the first live one."""
        while self._pending:
            token = next(iter(self._pending))
            if now < self._pending[token].expires_at:
                return
            del self._pending[token]
