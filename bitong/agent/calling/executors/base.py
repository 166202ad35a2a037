"""The executor interface: one small protocol, one module per way of running.

An executor turns a validated call into an :class:`Outcome`. It never
rewords what the tool produced (the I/O-channel principle): stdout and
stderr are bytes as they came, the exit code is the real one, and a timeout,
a cut or a cancellation is stated, never hidden.

Rules every executor keeps:

* ``deadline`` is an absolute ``time.monotonic()`` instant, already the
  smaller of the tool's ``timeout_ms`` and the caller's gRPC deadline. When
  it passes, the executor stops the work (a process: its whole process
  group is killed) and returns ``timed_out=True`` with the output so far.
* Cancellation (the caller went away): the executor stops the work the same
  way, then lets ``asyncio.CancelledError`` propagate.
* Without a ``sink`` (Call), at most ``max_output_bytes`` of stdout and of
  stderr each are kept; the rest is read and dropped (the process never
  blocks on a full pipe) and ``truncated=True``.
* With a ``sink`` (StreamCall), every chunk is awaited into the sink as it
  arrives, which is the flow control: a slow reader slows the reading, so
  nothing buffers without bound. Nothing is capped; ``streamed_*`` count
  the bytes sent.
* A failure of the tool is ``ok=False`` with its real stderr and exit code;
  ``error`` says in words what happened. Executors raise only for bugs.
* ``retryable=True`` marks a failure that is safe to try again: nothing
  happened at the other end (a connection refused) or the other end said
  so (HTTP 503; a 502 or 504 only for an idempotent request: a gateway
  that gave up on a POST may have passed it on), and nothing reached the
  sink. Only then
  does the tool's ``retry`` allow another attempt (see ``retry.py``); an
  executor that cannot know (a process that failed) never sets it.
* ``param_errors`` names parameters refused before anything ran (a path
  outside the tool's allow-list), as ``(param, message)`` pairs.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Protocol
from collections.abc import Awaitable, Callable

from bitong.v1.agent_pb2 import ToolDef

__all__ = ["STDOUT", "STDERR", "Outcome", "Sink", "Executor"]

STDOUT = 1  # = bitong.v1.OutputChunk.STDOUT
STDERR = 2  # = bitong.v1.OutputChunk.STDERR

Sink = Callable[[int, bytes], Awaitable[None]]
"""``await sink(stream, data)``: deliver one chunk; returns when it is taken."""


@dataclasses.dataclass
class Outcome:
    """What happened, as it happened."""

    ok: bool
    stdout: bytes = b""
    stderr: bytes = b""
    error: str = ""
    exit_code: int = 0
    http_status: int = 0  # HTTP executors: the response status (0: no response, or not HTTP)
    signal: int = 0
    duration_ms: int = 0
    timed_out: bool = False
    truncated: bool = False
    cancelled: bool = False
    attempts: int = 1
    streamed_stdout_bytes: int = 0
    streamed_stderr_bytes: int = 0
    retryable: bool = False
    param_errors: tuple[tuple[str, str], ...] = ()
    sandboxed: bool = False              # ran inside the OS sandbox
    argv: tuple[str, ...] = ()           # process executors: the exact argv that ran
    http_request: str = ""               # HTTP executors: "METHOD scheme://host/path?query" as sent


class Executor(Protocol):
    """How one kind of tool runs (``executor:`` in TOOL.hdlp)."""

    name: str

    async def run(self, tool: ToolDef, params: dict[str, Any], *, deadline: float,
                  sink: Sink | None = None) -> Outcome:
        """Run ``tool`` with already validated ``params``; see the module docstring."""
        ...
