"""The executors: ``executor:`` in a TOOL.hdlp names one of them.

:class:`Executors` holds one instance of each, built from the config (the
HTTP executors need their endpoints and tokens), and is the one way a call
reaches them::

    >>> from bitong.agent.config import load
    >>> from bitong.agent.calling.executors import Executors
    >>> runners = Executors(load("bitong.toml"))
    >>> outcome = await runners.run(tool, params, deadline=deadline, sink=None)

:meth:`Executors.run` applies what holds for every executor, once:

1. the path allow-list (:mod:`bitong.agent.calling.allowlist`): a ``normalize: [path]``
   param outside the tool's ``fs_write_paths``/``fs_read_paths`` runs
   nothing and answers ``ok=False`` with a ``param_errors`` entry;
2. the tool's ``retry`` (:mod:`.retry`), for failures the executor marked
   retryable, inside the same deadline.

:meth:`Executors.get` returns the executor itself (an :class:`Executor`,
see base.py) and raises :class:`ExecutorUnavailable` for a name the format
does not know. The module-level :func:`get`, :func:`available` and
:func:`register` act on a default instance without a config.
"""

from __future__ import annotations

from typing import Any

from bitong.v1.agent_pb2 import ToolDef

from .. import allowlist
from ...config import Config
from .base import STDERR, STDOUT, Executor, Outcome, Sink
from .forgejo import ForgejoExecutor
from .gatekeeper import GatekeeperExecutor
from .handler import PythonExecutor
from .hlpd_api import HlpdApiExecutor
from .http_endpoint import HttpExecutor
from .http_pool import Pool
from .retry import Backoff, run_with_retry
from .sandbox import Sandbox
from .shell import ShellExecutor

__all__ = ["Executor", "ExecutorUnavailable", "Executors", "Outcome", "Sink", "STDOUT", "STDERR", "KNOWN",
           "available", "get", "register"]

KNOWN = ("shell", "gatekeeper", "hlpd-api", "git-forgejo", "http", "python")
"""Every executor name the format allows (the spec's table)."""


class ExecutorUnavailable(LookupError):
    """No executor of that name here; ``str()`` says so in one sentence."""

    def __init__(self, name: str) -> None:
        self.name = name
        if name in KNOWN:
            text = f"executor {name} is not available in this build"
        else:
            text = f"unknown executor {name!r} (known: {', '.join(KNOWN)})"
        super().__init__(text)

    def __str__(self) -> str:  # LookupError would add quotes around a single argument
        return str(self.args[0])


class Executors:
    """One instance of every executor, configured; see the module docstring."""

    def __init__(self, config: Config | None = None, *, sandbox: Sandbox | None = None) -> None:
        """``sandbox``: the process executors' OS sandbox (default: the server's, see sandbox.py)."""
        config = config or Config()
        self.config = config
        defaults = config.defaults
        self.backoff = Backoff(first_s=defaults.retry_backoff_s, max_s=defaults.retry_backoff_max_s)
        # One pool for the four HTTP executors: two tools on the same endpoint share its connections.
        self.http_pool = Pool(defaults.http_max_connections, defaults.http_idle_s)
        runners: list[Executor] = [
            ShellExecutor(sandbox=sandbox, secrets=config.tool_secrets),
            PythonExecutor(config.python, sandbox=sandbox, secrets=config.tool_secrets),
            HttpExecutor(defaults, config.network_hosts, self.http_pool),
            GatekeeperExecutor(config.service("gatekeeper"), defaults, self.http_pool),
            HlpdApiExecutor(config.service("hlpd-api"), defaults, self.http_pool),
            ForgejoExecutor(config.service("git-forgejo"), defaults, self.http_pool),
        ]
        self._runners: dict[str, Executor] = {r.name: r for r in runners}

    def get(self, name: str) -> Executor:
        """The executor for ``name``; raises :class:`ExecutorUnavailable` (a ``LookupError``)."""
        try:
            return self._runners[name]
        except KeyError:
            raise ExecutorUnavailable(name) from None

    def available(self) -> tuple[str, ...]:
        """The executor names this instance runs, sorted."""
        return tuple(sorted(self._runners))

    def register(self, executor: Executor) -> None:
        """Install (or replace) the executor for ``executor.name``."""
        self._runners[executor.name] = executor

    async def run(self, tool: ToolDef, params: dict[str, Any], *, deadline: float,
                  sink: Sink | None = None) -> Outcome:
        """Run ``tool`` through its executor with the allow-list and retry rules; never raises for a tool's failure."""
        runner = self._runners.get(tool.executor)
        if runner is None:
            return Outcome(ok=False, error=str(ExecutorUnavailable(tool.executor)))
        perms = tool.permissions
        if perms.fs_read_paths or perms.fs_write_paths:
            outside = allowlist.check(tool, params)
            if outside:
                names = ", ".join(param for param, _ in outside)
                return Outcome(ok=False, error=f"path outside the tool's allow-list: {names}; nothing ran",
                               param_errors=outside)
        if tool.retry <= 0:
            return await runner.run(tool, params, deadline=deadline, sink=sink)
        return await run_with_retry(runner, tool, params, deadline=deadline, sink=sink, backoff=self.backoff)


_default: Executors | None = None


def _instance() -> Executors:
    global _default
    if _default is None:
        _default = Executors()
    return _default


def get(name: str) -> Executor:
    """The default instance's executor for ``name``; raises :class:`ExecutorUnavailable`."""
    return _instance().get(name)


def available() -> tuple[str, ...]:
    """The executor names the default instance runs, sorted."""
    return _instance().available()


def register(executor: Executor) -> None:
    """Install (or replace) an executor in the default instance."""
    _instance().register(executor)
