"""The executors: ``executor:`` in a TOOL.hdlp names one of them.

>>> from agent import executors
>>> runner = executors.get("shell")          # an Executor (see base.py)
>>> executors.get("gatekeeper")               # raises ExecutorUnavailable (a LookupError)

:func:`get` raises :class:`ExecutorUnavailable` for a name this build cannot
run; ``str(exc)`` is the sentence a caller answers with (``ok=false``):
"executor gatekeeper is not available in this build" for an executor the
format knows but this build does not ship yet, "unknown executor 'x' ..."
for a name the format does not know.
"""

from __future__ import annotations

from .base import STDERR, STDOUT, Executor, Outcome, Sink
from .shell import ShellExecutor

__all__ = ["Executor", "ExecutorUnavailable", "Outcome", "Sink", "STDOUT", "STDERR", "KNOWN", "available", "get",
           "register"]

KNOWN = ("shell", "gatekeeper", "hlpd-api", "git-forgejo", "http", "python")
"""Every executor name the format allows (the spec's table), whether or not this build runs it."""

_registry: dict[str, Executor] = {"shell": ShellExecutor()}


class ExecutorUnavailable(LookupError):
    """This build cannot run the named executor; ``str()`` says so in one sentence."""

    def __init__(self, name: str) -> None:
        self.name = name
        if name in KNOWN:
            text = f"executor {name} is not available in this build"
        else:
            text = f"unknown executor {name!r} (known: {', '.join(KNOWN)})"
        super().__init__(text)

    def __str__(self) -> str:  # LookupError would add quotes around a single argument
        return str(self.args[0])


def get(name: str) -> Executor:
    """The executor for ``name``; raises :class:`ExecutorUnavailable` (a ``LookupError``)."""
    try:
        return _registry[name]
    except KeyError:
        raise ExecutorUnavailable(name) from None


def available() -> tuple[str, ...]:
    """The executor names this build runs, sorted."""
    return tuple(sorted(_registry))


def register(executor: Executor) -> None:
    """Install (or replace) the executor for ``executor.name``: how the next ones plug in."""
    _registry[executor.name] = executor
