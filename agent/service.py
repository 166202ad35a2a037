"""The tool agent's flow (seed 000 §2), free of any transport.

Match: intent -> the current snapshot's index -> 1-3 candidates or
found=false. Call: name -> snapshot lookup -> params (validate, coerce,
normalize) -> confirmation -> executor -> ``CallResult``. The gRPC server and
the in-process CLI both call this, so they cannot disagree.

Only tools in the current snapshot run: there is no other way to reach an
executor from here (seed §3, first rule).
"""

from __future__ import annotations

import difflib
import logging
import time
from typing import Any, Mapping

from bitong.v1 import agent_pb2 as pb

from . import allowlist, params
from .match.index import SUGGESTION
from .confirm import ConfirmBook
from .executors import Executors
from .executors.base import Outcome, Sink
from .registry import Registry

__all__ = ["ToolAgent", "DEFAULT_TOP_K", "MAX_TOP_K"]

log = logging.getLogger("bitong.call")

DEFAULT_TOP_K = 3
MAX_TOP_K = 20


class ToolAgent:
    """Match and Call over a registry's current snapshot."""

    def __init__(self, registry: Registry, *, executors: Executors | None = None,
                 confirm: ConfirmBook | None = None, threshold: float | None = None) -> None:
        self.registry = registry
        self.executors = executors or Executors()
        self.confirm = confirm or ConfirmBook()
        self.threshold = threshold

    # ------------------------------------------------------------ Match

    def match(self, intent: str, top_k: int = 0, *, explain: bool = False) -> pb.MatchResponse:
        """Match one intent. ``explain`` adds why (and, when not found, the near misses) for a tool author."""
        snap = self.registry.snapshot
        k = DEFAULT_TOP_K if top_k <= 0 else min(top_k, MAX_TOP_K)
        result = snap.index.match(intent, k, threshold=self.threshold)
        reply = pb.MatchResponse(found=result.found, suggestion=result.suggestion)
        if explain:
            reply.explanation = result.explanation
        # seed §2 step 3: no match is {found: false, suggestion}; near misses only when asked to explain
        into = reply.candidates if result.found else (reply.near_misses if explain else None)
        if into is None:
            return reply
        for hit in result.hits:
            tool = snap.tools.get(hit.name)
            if tool is None:  # index and tools come from one snapshot; this cannot drift
                continue
            into.add(name=hit.name, score=hit.score, tool=tool, matched_terms=hit.matched_terms)
        return reply

    def list_tools(self) -> pb.ListToolsResponse:
        snap = self.registry.snapshot
        reply = pb.ListToolsResponse(tools=snap.sorted_tools())
        for err in snap.errors:
            reply.errors.add(path=err.path, line=err.line, column=err.column, message=err.message,
                             serving_previous=err.serving_previous)
        return reply

    # ------------------------------------------------------------ Call

    async def call(self, name: str, raw_params: Mapping[str, Any], *, confirm_token: str = "",
                   deadline: float | None = None, sink: Sink | None = None) -> pb.CallResult:
        """Run one registered tool. ``deadline`` is the caller's, as a ``time.monotonic()`` instant."""
        started = time.monotonic()
        snap = self.registry.snapshot
        tool = snap.lookup(name)
        if tool is None:
            close = difflib.get_close_matches(name, list(snap.tools), n=1)
            hint = f"; did you mean '{close[0]}'?" if close else ""
            log.info("call %s: not registered", name)
            return pb.CallResult(ok=False, found=False, tool=name, suggestion=SUGGESTION,
                                 error=f"no tool named '{name}' is registered{hint}")
        result = pb.CallResult(found=True, tool=tool.name, method=tool.method, executor=tool.executor)

        checked = params.validate(tool, raw_params)
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
            log.info("call %s: %s: %s", tool.name, why, names)
            return result

        if tool.constraints.require_confirm:
            if not confirm_token:
                issued = self.confirm.issue(tool.name, tool.content_sha256, checked.params)
                result.needs_confirmation = True
                result.confirm_token = issued.token
                result.confirm_expires_unix_ms = issued.expires_unix_ms
                result.error = (f"tool '{tool.name}' requires confirmation: call again with this confirm_token "
                                "and the same parameters")
                log.info("call %s: confirmation requested", tool.name)
                return result
            why = self.confirm.check(confirm_token, tool.name, tool.content_sha256, checked.params)
            if why or not self.confirm.spend(confirm_token):
                result.error = why or "confirm_token was already used"
                log.info("call %s: confirmation refused (%s)", tool.name, result.error)
                return result

        tool_deadline = started + tool.constraints.timeout_ms / 1000.0
        effective = tool_deadline if deadline is None else min(deadline, tool_deadline)
        outcome = await self.executors.run(tool, checked.params, deadline=effective, sink=sink)
        _fill(result, outcome)
        if outcome.timed_out and deadline is not None and deadline < tool_deadline:
            result.error = (f"{result.error} (the caller's deadline, shorter than the tool's "
                            f"timeout_ms {tool.constraints.timeout_ms})").strip()
        log.info("call %s: ok=%s exit=%d timed_out=%s truncated=%s %dms params=[%s]", tool.name, outcome.ok,
                 outcome.exit_code, outcome.timed_out, outcome.truncated, outcome.duration_ms,
                 ",".join(sorted(checked.params)))
        return result


def _fill(result: pb.CallResult, outcome: Outcome) -> None:
    result.ok = outcome.ok
    result.output = outcome.stdout
    result.stderr = outcome.stderr
    result.error = outcome.error
    result.exit_code = outcome.exit_code
    result.http_status = outcome.http_status
    result.signal = outcome.signal
    result.duration_ms = outcome.duration_ms
    result.timed_out = outcome.timed_out
    result.truncated = outcome.truncated
    result.cancelled = outcome.cancelled
    result.attempts = outcome.attempts
    result.streamed_stdout_bytes = outcome.streamed_stdout_bytes
    result.streamed_stderr_bytes = outcome.streamed_stderr_bytes
    for param, message in outcome.param_errors:
        result.param_errors.add(param=param, message=message)
