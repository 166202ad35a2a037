"""The tool agent's flow (seed 000 §2), free of any transport.

Match: intent -> the current snapshot's index -> 1-3 candidates or
found=false. Call: name -> snapshot lookup -> params (validate, coerce,
normalize) -> confirmation -> executor -> ``CallResult``. The gRPC server and
the in-process CLI both call this, so they cannot disagree.

Only tools in the current snapshot run: there is no other way to reach an
executor from here (seed §3, first rule).
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import bisect
import collections
import difflib
import logging
import os
import time
from typing import Any
from collections.abc import Callable, Mapping

from bitong.v1 import agent_pb2 as pb

from ..calling import allowlist, humanconfirm, params
from .audit import AuditLog, Trail, record
from .callers import CallerPolicy, PermissionDenied
from .identity import Caller
from ..matching.index import SUGGESTION
from ..calling.confirm import ConfirmBook
from ..calling.humanconfirm import HumanConfirmations
from ..calling.executors import Executors
from ..calling.executors.base import Outcome, Sink
from ..registry.snapshot import Registry
from .limits import INVALID_ARGUMENT, RESOURCE_EXHAUSTED, LimitExceeded, Limits, check_intent
from .match import DEFAULT_TOP_K, MAX_TOP_K, match_reply

__all__ = ["ToolAgent", "Limits", "LimitExceeded", "Admission", "DEFAULT_TOP_K", "MAX_TOP_K", "log_text"]

log = logging.getLogger("bitong.call")

# ListTools: tools in one reply when the request says 0 (500 synthetic tools are ~0.25 MB,
# far under gRPC's 4 MiB default receive limit, so any client reads a page).
DEFAULT_PAGE_SIZE = 500
_TOKEN_PREFIX = "n1."


def log_text(value: object, limit: int = 200) -> str:
    """A caller-supplied string made safe for one log line: controls escaped, long text cut.

    A tool or parameter name with a newline would otherwise write a line of
    its own ("... INFO bitong.call: call shell-exec: FORGED").
    """
    text = value if isinstance(value, str) else str(value)
    cut = len(text) > limit
    if cut:
        text = text[:limit]
    text = text.translate(_LOG_ESCAPES)
    return f"{text}…({len(value) if isinstance(value, str) else 0} chars)" if cut else text


# C0 and C1 controls, DEL, the backslash itself and the Unicode line/paragraph separators.
_LOG_ESCAPES = {c: f"\\x{c:02x}" for c in (*range(0x20), 0x7f, *range(0x80, 0xa0))}
_LOG_ESCAPES.update({ord("\\"): "\\\\", ord("\n"): "\\n", ord("\r"): "\\r", ord("\t"): "\\t",
                     0x2028: "\\u2028", 0x2029: "\\u2029", 0x85: "\\x85"})


class Admission:
    """Slots for calls in flight: a global and a per-tool limit, and a bounded FIFO queue.

    A call takes a slot when both limits have room and nobody queued before
    it could take it; otherwise it waits in the queue (up to its deadline),
    or, with the queue full, is refused with RESOURCE_EXHAUSTED. Plain
    counters and futures, not asyncio.Semaphore, so one instance serves any
    event loop it is used from.
    """

    def __init__(self, limits: Limits) -> None:
        self.limits = limits
        self.running = 0
        self.per_tool: dict[str, int] = {}
        self._queue: collections.deque[tuple[str, asyncio.Future[None]]] = collections.deque()

    @property
    def queued(self) -> int:
        return len(self._queue)

    def _room(self, tool: str) -> bool:
        return (self.running < self.limits.max_in_flight
                and self.per_tool.get(tool, 0) < self.limits.max_in_flight_per_tool)

    def _take(self, tool: str) -> None:
        self.running += 1
        self.per_tool[tool] = self.per_tool.get(tool, 0) + 1

    async def enter(self, tool: str, deadline: float | None) -> bool:
        """Take a slot for ``tool``; False when ``deadline`` (monotonic) passed first; raises LimitExceeded."""
        queue = self._queue
        if self._room(tool) and not (queue and any(t == tool for t, _ in queue)):   # no overtaking in one tool
            self._take(tool)
            return True
        if len(self._queue) >= self.limits.max_queued:
            raise LimitExceeded(RESOURCE_EXHAUSTED, (
                f"too many calls: {self.running} running (max_in_flight {self.limits.max_in_flight}, "
                f"max_in_flight_per_tool {self.limits.max_in_flight_per_tool}) and {len(self._queue)} waiting "
                f"(max_queued {self.limits.max_queued}); try again later"))
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        entry = (tool, waiter)
        self._queue.append(entry)
        try:
            timeout = None if deadline is None else max(0.0, deadline - time.monotonic())
            await asyncio.wait_for(asyncio.shield(waiter), timeout)
            return True
        except (TimeoutError, asyncio.CancelledError) as exc:
            if waiter.done() and not waiter.cancelled():
                self.leave(tool)   # the slot was handed over just as we gave up: pass it on
            else:
                waiter.cancel()
            if isinstance(exc, asyncio.CancelledError):
                raise
            return False
        finally:
            try:
                self._queue.remove(entry)
            except ValueError:
                pass

    def leave(self, tool: str) -> None:
        """Give the slot back and hand it to the first waiter that fits."""
        self.running -= 1
        left = self.per_tool.get(tool, 1) - 1
        if left:
            self.per_tool[tool] = left
        else:
            self.per_tool.pop(tool, None)
        for entry in list(self._queue):
            waiting_tool, waiter = entry
            if waiter.done():
                continue
            if self._room(waiting_tool):
                self._take(waiting_tool)
                self._queue.remove(entry)
                waiter.set_result(None)
            if self.running >= self.limits.max_in_flight:
                break


class ToolAgent:
    """Match and Call over a registry's current snapshot."""

    def __init__(self, registry: Registry, *, executors: Executors | None = None,
                 confirm: ConfirmBook | None = None, threshold: float | None = None,
                 limits: Limits | None = None, policy: CallerPolicy | None = None,
                 audit: AuditLog | None = None, human: HumanConfirmations | None = None,
                 confirm_by: str = "agent") -> None:
        self.registry = registry
        self.executors = executors or Executors()
        self.limits = limits or Limits()
        self.confirm = confirm or ConfirmBook(max_pending=self.limits.max_pending_confirmations)
        self.threshold = threshold
        self.admission = Admission(self.limits)
        self.policy = policy or CallerPolicy()   # [callers]: which tools each caller may use
        self.audit = audit                        # --audit FILE: one line per Call
        self.running: set[asyncio.Task[Any]] = set()   # calls not yet audited: a shutdown waits for them
        self.human = human   # None: nobody can approve here (in-process CLI, a server without an admin channel)
        self.confirm_by = confirm_by
        self.repo_status: Callable[[], pb.ToolsRepo | None] | None = None   # --tools-repo: for ListTools

    # ------------------------------------------------------------ human confirmation (confirm_by: human)

    def confirmed_by_human(self, tool: pb.ToolDef) -> bool:
        """The tool's confirm_by, raised (never lowered) by the config's [confirm] by."""
        return "human" in (self.confirm_by, tool.constraints.confirm_by)

    async def _human_confirmed(self, tool: pb.ToolDef, checked: dict[str, Any], approval_id: str,
                               deadline: float | None, result: pb.CallResult, trail: Trail) -> bool:
        if self.human is None:
            result.error = (f"tool '{tool.name}' needs a person's approval (confirm_by: human), and nobody can give "
                            "it here: run it through bitong serve with an admin socket or the approvals page; "
                            "nothing ran")
            log.info("call %s: human confirmation impossible here", tool.name)
            return False
        requester = trail.caller.id if trail.caller is not None else ""
        approved = await humanconfirm.gate(self.human, tool, checked, approval_id, deadline, result, requester)
        current = self.registry.snapshot.lookup(tool.name)
        if approved and (current is None or current.content_sha256 != tool.content_sha256):
            # the person approved the definition they were shown; it is no longer the one serving
            approved = False
            result.error = (f"tool '{tool.name}' was changed or removed while request {result.approval_id} waited; "
                            "the approval was for the definition shown then: nothing ran, call again")
        trail.confirmation = ("human-approved" if approved else
                              "human-requested" if result.needs_confirmation else "human-refused")
        log.info("call %s: human confirmation %s (request %s)", tool.name,
                 "approved" if approved else log_text(result.error, limit=200), result.approval_id or "-")
        return approved

    # ------------------------------------------------------------ Match

    def check_intent(self, intent: str) -> None:
        """Refuse an intent past ``max_intent_bytes`` before the index sees it (LimitExceeded)."""
        check_intent(intent, self.limits.max_intent_bytes)

    def match(self, intent: str, top_k: int = 0, *, explain: bool = False,
              caller: Caller | None = None, canary_key: str = "") -> pb.MatchResponse:
        """Match one intent; raises LimitExceeded for an intent past ``max_intent_bytes``.

        ``explain`` adds why (and, when not found, the near misses) for a tool author.
        ``caller``: only the tools its policy lets it call are candidates.
        """
        self.check_intent(intent)
        return match_reply(self.registry, intent, top_k, threshold=self.threshold, explain=explain,
                           allowed=self.allowed(caller), canary_key=canary_key)

    def allowed(self, caller: Caller | None) -> Callable[[str], bool] | None:
        """The caller's yes/no on a tool name, or None when every tool is allowed."""
        if caller is None or self.policy.open:
            return None
        return lambda tool: self.policy.allows(caller, tool)

    def list_tools(self, *, caller: Caller | None = None, page_size: int | None = None,
                   page_token: str = "") -> pb.ListToolsResponse:
        """Tools in name order and every load error; for a ``caller`` under a policy, only its tools
        and their files' errors.

        ``page_size`` None: every tool in one reply (in process); 0: :data:`DEFAULT_PAGE_SIZE`.
        A page starts after the name its token holds, so a walk sees each tool once
        even if the registry changes in between (a tool added behind it is not seen).
        Load errors come on the first page only. A bad size or token is LimitExceeded
        (INVALID_ARGUMENT).
        """
        if page_size is not None and page_size < 0:
            raise LimitExceeded(INVALID_ARGUMENT, f"page_size is {page_size}; give 0 (the default, "
                                                  f"{DEFAULT_PAGE_SIZE}) or more")
        after = _page_start(page_token)
        snap = self.registry.snapshot
        allowed = self.allowed(caller)
        names = snap.sorted_names()
        size = len(names) if page_size is None else (page_size or DEFAULT_PAGE_SIZE)
        tools: list[pb.ToolDef] = []
        at = bisect.bisect_right(names, after) if after is not None else 0
        while at < len(names) and len(tools) < size:
            name = names[at]
            at += 1
            if allowed is None or allowed(name):
                tool = snap.tools[name]
                if tool.canary:   # with the calls and failures of each side now
                    shown = pb.ToolDef()
                    shown.CopyFrom(tool)
                    shown.canary = self.registry.versions.canary_text(name) or tool.canary
                    tool = shown
                tools.append(tool)
        reply = pb.ListToolsResponse(tools=tools)
        more = at < len(names) if allowed is None else any(allowed(names[i]) for i in range(at, len(names)))
        if tools and more:
            reply.next_page_token = _TOKEN_PREFIX + base64.urlsafe_b64encode(tools[-1].name.encode()).decode()
        if after is not None:
            return reply
        repo = self.repo_status() if self.repo_status is not None else None
        if repo is not None:
            reply.repo.CopyFrom(repo)
        for err in snap.errors:
            if allowed is not None and not (allowed(err.serving_previous) or allowed(_folder(err.path))):
                continue
            reply.errors.add(path=err.path, line=err.line, column=err.column, message=err.message,
                             serving_previous=err.serving_previous, unapproved=err.unapproved)
        return reply

    # ------------------------------------------------------------ Call

    def check_params(self, raw_params: Mapping[str, Any]) -> None:
        """Refuse params past ``max_params``/``max_params_bytes``/``max_params_depth`` (LimitExceeded).

        Linear in the request and stops at the first limit passed, so a call
        with 100,000 params costs microseconds, not seconds of validation.
        """
        lim = self.limits
        if len(raw_params) > lim.max_params:
            raise LimitExceeded(INVALID_ARGUMENT, f"{len(raw_params)} parameters; the limit is max_params "
                                                  f"{lim.max_params}")
        size = 0
        stack: list[tuple[Any, int]] = [(raw_params, 0)]
        while stack:
            value, depth = stack.pop()
            if isinstance(value, str):
                size += len(value) if value.isascii() else len(value.encode("utf-8", "replace"))
            elif type(value) is dict or isinstance(value, Mapping):   # (the ABC check alone costs a dict's walk)
                if depth > lim.max_params_depth:
                    raise LimitExceeded(INVALID_ARGUMENT, f"parameters nest deeper than max_params_depth "
                                                          f"{lim.max_params_depth}")
                for key, item in value.items():
                    size += len(key) if isinstance(key, str) else 8
                    stack.append((item, depth + 1))
            elif isinstance(value, (list, tuple)):
                if depth > lim.max_params_depth:
                    raise LimitExceeded(INVALID_ARGUMENT, f"parameters nest deeper than max_params_depth "
                                                          f"{lim.max_params_depth}")
                stack.extend((item, depth + 1) for item in value)
            else:
                size += 8
            if size > lim.max_params_bytes:
                raise LimitExceeded(INVALID_ARGUMENT, f"parameters exceed max_params_bytes {lim.max_params_bytes}")

    async def call(self, name: str, raw_params: Mapping[str, Any], *, confirm_token: str = "",
                   deadline: float | None = None, sink: Sink | None = None,
                   caller: Caller | None = None, canary_key: str = "") -> pb.CallResult:
        """Run one registered tool. ``deadline`` is the caller's, as a ``time.monotonic()`` instant.

        Raises :class:`LimitExceeded` for params past the limits, or when the
        calls in flight and the queue are full, and :class:`PermissionDenied`
        when ``caller``'s policy does not allow the tool; every other failure
        is a result. With an audit log, every outcome (the raised ones too)
        is one line, written before this returns.
        """
        trail = Trail(rpc="StreamCall" if sink is not None else "Call", caller=caller)
        result: pb.CallResult | None = None
        task = asyncio.current_task()
        if task is not None:
            self.running.add(task)
        try:
            result = await self._call(name, raw_params, confirm_token=confirm_token, deadline=deadline, sink=sink,
                                      trail=trail, canary_key=canary_key)
            return result
        except LimitExceeded as exc:
            trail.refused = (exc.code, exc.message)
            raise
        except PermissionDenied as exc:
            trail.refused = ("PERMISSION_DENIED", str(exc))
            raise
        except asyncio.CancelledError:
            trail.refused = ("CANCELLED", "cancelled (the caller went away, or the server shut down); the tool was stopped")
            raise
        finally:
            if self.audit is not None:
                if result is None and trail.refused is None:
                    trail.refused = ("INTERNAL", "the call failed inside the sidecar (see its log)")
                self.audit_line(trail, name, raw_params, result)
            if task is not None:
                self.running.discard(task)

    def audit_line(self, trail: Trail, name: str, raw_params: Mapping[str, Any],
                   result: pb.CallResult | None) -> None:
        """Write one audit line (also for a Call the server refused before it reached :meth:`call`)."""
        if self.audit is None:
            return
        try:
            self.audit.write(record(trail, name, raw_params, result, self.audit.redactor))
        except Exception:   # the trail failing must be loud, and must not turn a result into an RPC error
            log.exception("call %s: the audit line could not be written", log_text(name))

    async def _call(self, name: str, raw_params: Mapping[str, Any], *, confirm_token: str,
                    deadline: float | None, sink: Sink | None, trail: Trail, canary_key: str = "") -> pb.CallResult:
        started = time.monotonic()
        self.check_params(raw_params)
        if not self.registry.verified:   # restarted from a state: only what the files define now runs
            await asyncio.to_thread(self.registry.verify)
        snap = self.registry.snapshot
        tool = snap.lookup(name)
        if tool is not None and snap.canaries:   # a rollout: this caller's side of it
            tool = self.registry.versions.pick(snap.canaries, tool, canary_key)
        self.policy.check(trail.caller, tool.name if tool is not None else name)   # PermissionDenied
        trail.tool = tool
        if tool is None:
            # difflib on a huge name would cost seconds: no tool name is that long
            known = [t for t in snap.tools if self.policy.allows(trail.caller, t)]
            close = difflib.get_close_matches(name, known, n=1) if len(name) <= 200 else []
            hint = f"; did you mean '{close[0]}'?" if close else ""
            log.info("call %s: not registered", log_text(name))
            return pb.CallResult(ok=False, found=False, tool=name, suggestion=SUGGESTION,
                                 error=f"no tool named '{name}' is registered{hint}")
        result = pb.CallResult(found=True, tool=tool.name, method=tool.method, executor=tool.executor,
                               tool_version=tool.version, tool_sha256=tool.content_sha256)

        try:
            checked = params.validate(tool, raw_params)
        except Exception as exc:   # validate never raises for bad input; a bug must still be a result
            log.exception("call %s: validating the parameters failed", tool.name)
            result.error = f"the parameters could not be checked ({type(exc).__name__}); nothing ran"
            return result
        # A path outside the tool's allow-list is a bad parameter: refuse it
        # before any confirmation is asked for (the executor checks again).
        problems = [(p.param, p.message) for p in checked.errors]
        why = "invalid parameters"
        if not problems:
            problems = list(allowlist.check(tool, checked.params))
            why = "path outside the tool's allow-list"
        if problems:
            for param, message in problems:
                result.param_errors.add(param=param, message=message)
            names = ", ".join(param for param, _ in problems)
            result.error = f"{why}: {names}; nothing ran"
            log.info("call %s: %s: %s", tool.name, why, log_text(names, limit=400))
            return result

        if tool.constraints.require_confirm and self.confirmed_by_human(tool):
            if not await self._human_confirmed(tool, checked.params, confirm_token, deadline, result, trail):
                return result
        elif tool.constraints.require_confirm:
            if not confirm_token:
                issued = self.confirm.issue(tool.name, tool.content_sha256, checked.params)
                result.needs_confirmation = True
                result.confirm_token = issued.token
                result.confirm_expires_unix_ms = issued.expires_unix_ms
                result.error = (f"tool '{tool.name}' requires confirmation: call again with this confirm_token "
                                "and the same parameters")
                trail.confirmation = "requested"
                log.info("call %s: confirmation requested", tool.name)
                return result
            why = self.confirm.check(confirm_token, tool.name, tool.content_sha256, checked.params)
            if why or not self.confirm.spend(confirm_token):
                trail.confirmation = "refused"
                result.error = why or "confirm_token was already used"
                log.info("call %s: confirmation refused (%s)", tool.name, log_text(result.error, limit=400))
                return result
            trail.confirmation = "confirmed"

        # The queue is bounded by the caller's deadline; the tool's timeout_ms counts from when it starts.
        if not await self.admission.enter(tool.name, deadline):
            waited_ms = int((time.monotonic() - started) * 1000)
            result.timed_out = True
            result.duration_ms = waited_ms
            result.error = (f"timed out after {waited_ms} ms waiting for a free slot, at the caller's deadline "
                            f"(max_in_flight "
                            f"{self.limits.max_in_flight}, max_in_flight_per_tool "
                            f"{self.limits.max_in_flight_per_tool}); nothing ran")
            log.info("call %s: timed out in the queue", tool.name)
            return result
        tool_deadline = time.monotonic() + tool.constraints.timeout_ms / 1000.0
        effective = tool_deadline if deadline is None else min(deadline, tool_deadline)
        try:
            outcome = await self.executors.run(tool, checked.params, deadline=effective, sink=sink)
        finally:
            self.admission.leave(tool.name)
        _fill(result, outcome)
        self.registry.versions.count(tool, outcome.ok)
        if outcome.timed_out and deadline is not None and deadline < tool_deadline:
            result.error = (f"{result.error} (the caller's deadline, shorter than the tool's "
                            f"timeout_ms {tool.constraints.timeout_ms})").strip()
        log.info("call %s: ok=%s exit=%d timed_out=%s truncated=%s %dms params=[%s]", tool.name, outcome.ok,
                 outcome.exit_code, outcome.timed_out, outcome.truncated, outcome.duration_ms,
                 log_text(",".join(sorted(checked.params)), limit=400))
        return result


def _page_start(token: str) -> str | None:
    """The name a page token says the last page ended at; None for the first page."""
    if not token:
        return None
    if token.startswith(_TOKEN_PREFIX):
        try:
            name = base64.b64decode(token[len(_TOKEN_PREFIX):], altchars=b"-_", validate=True).decode("utf-8")
            if name:
                return name
        except (binascii.Error, UnicodeError, ValueError):
            pass
    shown = log_text(token, limit=40)
    raise LimitExceeded(INVALID_ARGUMENT, f"page_token '{shown}' is not one this server gave: pass the "
                                          "next_page_token of the previous ListTools reply, or none for the first page")


def _folder(path: str) -> str:
    """The tool folder a TOOL.hdlp path is in (its name is the tool's, by convention)."""
    return os.path.basename(os.path.dirname(path)) if path else ""


def _fill(result: pb.CallResult, outcome: Outcome) -> None:
    """The outcome into a fresh result; a field at its default is left unset (the same message, fewer
    protobuf writes on every Call)."""
    result.ok = outcome.ok
    result.duration_ms = outcome.duration_ms
    result.attempts = outcome.attempts
    if outcome.stdout:
        result.output = outcome.stdout
    if outcome.stderr:
        result.stderr = outcome.stderr
    if outcome.error:
        result.error = outcome.error
    if outcome.exit_code:
        result.exit_code = outcome.exit_code
    if outcome.http_status:
        result.http_status = outcome.http_status
    if outcome.signal:
        result.signal = outcome.signal
    if outcome.timed_out:
        result.timed_out = True
    if outcome.truncated:
        result.truncated = True
    if outcome.cancelled:
        result.cancelled = True
    if outcome.streamed_stdout_bytes:
        result.streamed_stdout_bytes = outcome.streamed_stdout_bytes
    if outcome.streamed_stderr_bytes:
        result.streamed_stderr_bytes = outcome.streamed_stderr_bytes
    if outcome.sandboxed:
        result.sandboxed = True
    if outcome.argv:
        result.argv.extend(outcome.argv)
    if outcome.http_request:
        result.http_request = outcome.http_request
    for param, message in outcome.param_errors:
        result.param_errors.add(param=param, message=message)
