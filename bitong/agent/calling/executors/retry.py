"""The tool's ``retry``: more attempts for failures that are safe to repeat, inside one deadline.

Seed 002 §2.1 puts ``retry: 2`` in a definition. Here it means at most that
many extra attempts, and only after a failure its executor marked
``retryable`` (base.py: a refused connection, a 503, a 502/504 to an
idempotent verb); a process that failed, a timeout, a 4xx or a 500 is
answered at once. All attempts share the call's deadline.

Between attempts the wait doubles from ``[defaults] retry_backoff_ms``
(100 ms) up to ``retry_backoff_max_ms`` (2 s), each shortened by up to a
fifth at random so that callers that failed together do not come back
together. When the next wait would reach past the deadline there is no
further attempt: the last failure is the answer, and ``error`` says so.
``attempts`` in the result says how many ran; ``duration_ms`` covers them
all, waits included.
"""

from __future__ import annotations

import asyncio
import dataclasses
import random
import time
from typing import Any

from bitong.v1.agent_pb2 import ToolDef

from .base import Executor, Outcome, Sink

__all__ = ["Backoff", "run_with_retry"]


@dataclasses.dataclass(frozen=True)
class Backoff:
    """How long to wait before each retry."""

    first_s: float = 0.1
    max_s: float = 2.0
    jitter: float = 0.2

    def delay(self, failures: int) -> float:
        """The wait after the ``failures``-th failed attempt (1-based)."""
        full = min(self.max_s, self.first_s * float(2 ** (failures - 1)))
        return full * (1 - self.jitter * random.random())


async def run_with_retry(runner: Executor, tool: ToolDef, params: dict[str, Any], *, deadline: float,
                         sink: Sink | None, backoff: Backoff) -> Outcome:
    """``runner.run`` once, then again while the failure is retryable and ``tool.retry`` and time allow."""
    started = time.monotonic()
    allowed = max(0, tool.retry)
    attempts = 0
    while True:
        outcome = await runner.run(tool, params, deadline=deadline, sink=sink)
        attempts += 1
        if outcome.ok or not outcome.retryable or attempts > allowed:
            break
        if outcome.streamed_stdout_bytes or outcome.streamed_stderr_bytes:
            break  # the caller already has part of this answer: another attempt would repeat it
        wait = backoff.delay(attempts)
        if time.monotonic() + wait >= deadline:
            outcome.error += f" (no time left before the deadline for attempt {attempts + 1} of {allowed + 1})"
            break
        await asyncio.sleep(wait)
    outcome.attempts = attempts
    if attempts > 1:
        outcome.duration_ms = int((time.monotonic() - started) * 1000)
        if not outcome.ok:
            outcome.error += f" (after {attempts} attempts)"
    return outcome
