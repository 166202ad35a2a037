"""What one request may ask of the sidecar, and the refusal past it.

Its own module because the in-process ``bitong match`` checks an intent as the
server does without loading the Call machinery (executors, audit, config).
"""

from __future__ import annotations

import dataclasses

__all__ = ["INVALID_ARGUMENT", "RESOURCE_EXHAUSTED", "LimitExceeded", "Limits", "check_intent"]

INVALID_ARGUMENT = "INVALID_ARGUMENT"
RESOURCE_EXHAUSTED = "RESOURCE_EXHAUSTED"


@dataclasses.dataclass(frozen=True)
class Limits:
    """What one request may ask of the sidecar, so no caller can stall or exhaust it.

    Defaults fit a 2-core machine: a call is mostly a child process the
    sidecar waits on, a Match a few ms of CPU. Each is a ``bitong serve``
    option (the field name with dashes) and a ``Sidecar``/``ToolAgent``
    argument.
    """

    max_intent_bytes: int = 4096          # one Match intent, UTF-8
    max_params: int = 64                  # top-level parameters of one call
    max_params_bytes: int = 4 * 1024 * 1024   # all parameter text/values of one call
    max_params_depth: int = 32            # lists/objects inside parameters
    max_in_flight: int = 16               # calls running at once, all tools
    max_in_flight_per_tool: int = 8       # calls running at once, one tool
    max_queued: int = 64                  # calls waiting for a slot; beyond: RESOURCE_EXHAUSTED
    max_pending_confirmations: int = 1024  # confirm tokens issued and not yet used or expired
    match_workers: int = 2                # threads that run Match off the event loop
    max_match_queued: int = 32            # Matches running or waiting; beyond: RESOURCE_EXHAUSTED

    def __post_init__(self) -> None:
        for field in dataclasses.fields(self):
            value = getattr(self, field.name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"limit {field.name} must be a positive integer, not {value!r}")


class LimitExceeded(Exception):
    """A request past one of the :class:`Limits`; ``code`` is the gRPC status name to answer with."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def check_intent(intent: str, limit: int) -> None:
    """Refuse an intent past ``limit`` UTF-8 bytes before the index sees it (LimitExceeded)."""
    # len(str) <= UTF-8 bytes <= 4 * len(str): only encode when the length alone cannot decide
    if len(intent) > limit or (len(intent) * 4 > limit and len(intent.encode("utf-8", "replace")) > limit):
        size = len(intent.encode("utf-8", "replace"))
        raise LimitExceeded(INVALID_ARGUMENT, f"intent is {size} bytes; the limit is max_intent_bytes "
                                              f"{limit}: say what the tool should do in fewer words")
