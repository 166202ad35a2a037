"""``confirm_by: human``: calls that wait for a person, who the caller cannot be.

The caller of a human-confirmed tool gets an approval id, never a token: the
id names a request (tool, definition hash, exact validated parameters) that
only the admin channel can decide (``bitong approve ID`` / ``bitong deny ID``
over the owner-only admin socket, or the token-protected loopback page).
Knowing the id lets the caller wait for the decision and collect it, nothing
more: ToolAgent has no RPC that decides.

The first Call waits for the decision, bounded by its deadline and the
request's expiry; if its deadline comes first it answers
``needs_confirmation`` with the id, and a later Call with the same tool,
parameters and ``confirm_token = id`` waits again or collects the decision.
An approval runs the call once; a denial or an expiry answers refused and
nothing runs. The book is thread-safe (the web page decides from its own
thread) and bounded (``max_pending``: past it the oldest undecided request
expires early, so a caller that floods it cannot grow memory).
"""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import json
import secrets
import threading
import time
from collections.abc import Callable
from typing import Any

from bitong.v1 import agent_pb2 as pb

__all__ = ["gate", "PENDING", "APPROVED", "DENIED", "EXPIRED", "RAN", "Request", "DecisionError", "HumanConfirmations",
           "DEFAULT_TTL_S", "DEFAULT_MAX_PENDING"]

DEFAULT_TTL_S = 300.0
DEFAULT_MAX_PENDING = 256

PENDING, APPROVED, DENIED, EXPIRED, RAN = "pending", "approved", "denied", "expired", "ran"


def _fingerprint(tool: str, tool_sha256: str, params: dict[str, Any]) -> str:
    canonical = json.dumps([tool, tool_sha256, params], sort_keys=True, ensure_ascii=False, default=str)
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


def _new_id() -> str:
    """A request id a person can type: URL-safe, and never starting with '-' (a command line reads that as an option)."""
    return "r" + secrets.token_urlsafe(12)


@dataclasses.dataclass
class Request:
    """One call waiting for (or decided by) a person. Mutated only under the book's lock."""

    id: str
    tool: str
    tool_sha256: str
    params: dict[str, Any]
    method: str
    command: str
    fingerprint: str
    created_unix_ms: int
    expires_at: float        # monotonic: the decision (or, once approved, the run) must come before it
    expires_unix_ms: int
    state: str = PENDING
    requester: str = ""      # the caller's identity when the transport knows it; only it may collect
    decided_by: str = ""
    reason: str = ""
    waiters: list[tuple[asyncio.AbstractEventLoop, asyncio.Future[None]]] = dataclasses.field(default_factory=list)


class DecisionError(LookupError):
    """An approve/deny that cannot apply: ``code`` is NOT_FOUND or FAILED_PRECONDITION, the message says why."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


class HumanConfirmations:
    """Pending human confirmations: created by calls, decided by the admin channel only."""

    def __init__(self, ttl_s: float = DEFAULT_TTL_S, *, max_pending: int = DEFAULT_MAX_PENDING,
                 clock: Callable[[], float] = time.monotonic) -> None:
        if ttl_s <= 0 or max_pending < 1:
            raise ValueError("ttl_s must be positive and max_pending at least 1")
        self.ttl_s = ttl_s
        self.max_pending = max_pending
        self._clock = clock
        self._lock = threading.Lock()
        self._requests: dict[str, Request] = {}   # insertion order: oldest first

    # ------------------------------------------------------------ the caller's side

    def open(self, tool: str, tool_sha256: str, params: dict[str, Any], *, method: str = "",
             command: str = "", requester: str = "") -> Request:
        """A new pending request for this exact call."""
        now = self._clock()
        request = Request(id=_new_id(), tool=tool, tool_sha256=tool_sha256, params=params,
                          method=method, command=command, fingerprint=_fingerprint(tool, tool_sha256, params),
                          created_unix_ms=int(time.time() * 1000), expires_at=now + self.ttl_s,
                          expires_unix_ms=int((time.time() + self.ttl_s) * 1000), requester=requester)
        with self._lock:
            self._expire(now)
            while len(self._requests) >= self.max_pending:   # the oldest is forgotten first
                old = self._requests.pop(next(iter(self._requests)))
                if old.state in (PENDING, APPROVED):
                    self._settle(old, EXPIRED, "bitong", f"dropped: more than {self.max_pending} requests at once")
            self._requests[request.id] = request
        return request

    def find(self, approval_id: str, tool: str, tool_sha256: str, params: dict[str, Any],
             requester: str = "") -> tuple[Request | None, str]:
        """The request ``approval_id`` names, if it is for exactly this call (and caller); else None and why not."""
        with self._lock:
            self._expire(self._clock())
            request = self._requests.get(approval_id)
            if request is None:
                return None, ("unknown approval id (never issued, or long expired); call again without it to ask "
                              "a person again")
            if request.tool != tool:
                return None, f"approval id {approval_id} was issued for tool '{request.tool}', not '{tool}'"
            if request.requester and request.requester != requester:
                return None, f"approval id {approval_id} was issued to another caller; nothing ran"
            if request.fingerprint != _fingerprint(tool, tool_sha256, params):
                return None, (f"approval id {approval_id} was issued for other parameters (or an older definition "
                              "of the tool); nothing ran")
            return request, ""

    async def wait(self, request: Request, deadline: float | None) -> str:
        """Wait for a decision until the caller's ``deadline`` (monotonic) or the expiry; return the state.

        An approved request is spent here (its state becomes ``ran``) and
        ``approved`` is returned once: a second collector gets ``ran``.
        """
        loop = asyncio.get_running_loop()
        future: asyncio.Future[None] = loop.create_future()
        with self._lock:
            self._expire(self._clock())
            if request.state == PENDING:
                request.waiters.append((loop, future))
            else:
                future.set_result(None)
        until = request.expires_at if deadline is None else min(deadline, request.expires_at)
        try:
            await asyncio.wait_for(asyncio.shield(future), max(0.0, until - self._clock()))
        except TimeoutError:
            pass
        finally:
            with self._lock:
                if (loop, future) in request.waiters:
                    request.waiters.remove((loop, future))
        with self._lock:
            self._expire(self._clock())
            if request.state == APPROVED:
                request.state = RAN
                return APPROVED
            return request.state

    # ------------------------------------------------------------ the person's side (admin channel only)

    def pending(self) -> list[Request]:
        """Every request still known, oldest first (decided ones stay until collected or expired)."""
        with self._lock:
            self._expire(self._clock())
            return [dataclasses.replace(r, waiters=[]) for r in self._requests.values()]

    def decide(self, approval_id: str, approve: bool, by: str, reason: str = "") -> Request:
        """Approve or deny a pending request; raises :class:`DecisionError`. Wakes the waiting call."""
        with self._lock:
            self._expire(self._clock())
            request = self._requests.get(approval_id)
            if request is None:
                raise DecisionError("NOT_FOUND", f"no request with id {approval_id!r} (never issued, or expired)")
            if request.state != PENDING:
                raise DecisionError("FAILED_PRECONDITION", f"request {approval_id} is already {request.state}"
                                    + (f" (by {request.decided_by})" if request.decided_by else ""))
            self._settle(request, APPROVED if approve else DENIED, by, reason)
            if approve:   # the approved call has a fresh ttl to be collected and run
                request.expires_at = self._clock() + self.ttl_s
                request.expires_unix_ms = int((time.time() + self.ttl_s) * 1000)
            return dataclasses.replace(request, waiters=[])

    # ------------------------------------------------------------ internals (lock held)

    def _settle(self, request: Request, state: str, by: str, reason: str) -> None:
        request.state = state
        request.decided_by = by
        request.reason = reason
        for loop, future in request.waiters:
            loop.call_soon_threadsafe(_wake, future)
        request.waiters.clear()

    def _expire(self, now: float) -> None:
        """Pending requests past their expiry become expired; settled ones are forgotten a ttl later."""
        for request in list(self._requests.values()):
            if now < request.expires_at:
                continue
            if request.state in (PENDING, APPROVED):
                self._settle(request, EXPIRED, "bitong", "nobody decided in time" if request.state == PENDING
                             else "approved, but not collected in time")
            if now >= request.expires_at + self.ttl_s:
                del self._requests[request.id]


async def gate(book: HumanConfirmations, tool: pb.ToolDef, params: dict[str, Any], approval_id: str,
               deadline: float | None, result: pb.CallResult, requester: str = "") -> bool:
    """Whether a person approved this call (True: run it now); otherwise ``result`` says why not.

    ``requester`` is the caller's identity where the transport establishes
    one: a request opened by one caller cannot be collected by another.
    """
    if approval_id:
        request, why = book.find(approval_id, tool.name, tool.content_sha256, params, requester)
        if request is None:
            result.error = why
            return False
    else:
        request = book.open(tool.name, tool.content_sha256, params, method=tool.method, command=tool.command,
                            requester=requester)
    state = await book.wait(request, deadline)
    result.approval_id = request.id
    result.approval_expires_unix_ms = request.expires_unix_ms
    if state == APPROVED:
        return True
    if state == PENDING:
        result.needs_confirmation = True
        result.error = (f"tool '{tool.name}' needs a person's approval: request {request.id} waits "
                        f"(bitong approve {request.id}, or the approvals page); call again with confirm_token "
                        f"{request.id} and the same parameters to wait for the decision")
    elif state == DENIED:
        result.error = (f"request {request.id} was denied by {request.decided_by}"
                        + (f": {request.reason}" if request.reason else "") + "; nothing ran")
    elif state == EXPIRED:
        result.error = f"request {request.id} expired ({request.reason}); nothing ran: call again to ask again"
    else:   # RAN: the approval was used by an earlier call
        result.error = f"request {request.id} was approved once and has already run; nothing ran again"
    return False


def _wake(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)
