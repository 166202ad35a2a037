"""The ``python`` executor: call a function of the tool's own ``handler.py``.

Seed 002 §3: a tool folder holds its definition and a ``handler.py`` whose
function takes the declared params by name and returns JSON-able data::

    tools/file-stats/
      TOOL.hdlp        method: run, executor: python
      handler.py       def run(path: str, recursive: bool = False) -> dict: ...

* The function is the one the tool's ``method:`` names (seed 002 calls it
  ``run``, the convention for a tool with one entry point; ``method`` is a
  required field, so there is no silent fallback: a misspelt method answers
  that the function does not exist, it never runs another one). It gets
  the validated, coerced, normalized params as keyword arguments (absent
  optional params are left out, so the function's own defaults apply); it
  may be a coroutine function.
* It never runs inside the server: each call is a fresh process, bounded
  and killed exactly like a shell tool (the deadline, cancellation, the
  output cap, streaming; everything it starts goes with it), so a handler
  that hangs, leaks or crashes takes nothing of the server with it, and two
  calls never share state (seed 002 §4.3). That process is forked from the
  tool's *zygote* (:mod:`.zygote`, :mod:`.zygote_main`): a ``python -I -S
  -B`` started once per tool profile (definition, sandbox options,
  environment with its secrets), under ``_reaper`` and the tool's own OS
  sandbox exactly as a one-shot worker is, with ``json`` and the compiler
  warmed up. Each call is a fork of that same clean state, which reads
  ``handler.py`` after the fork (a changed file is seen by the next call),
  in a session and, where the kernel has Landlock scopes, a Landlock domain
  of its own (it cannot signal another call or the zygote); what it leaves
  behind is killed before the call returns. A call costs ~5 ms of CPU here
  in all (the server, the zygote's fork, the call's process; a fresh
  interpreter cost ~45 ms, most of it start-up and the ``json`` import);
  benchmarks/bench_handler.py measures it against the MCP SDK's in-process
  call.
  Calls of one zygote share its private ``/tmp`` and ``/dev/shm``, as they
  share ``runtime/`` (a one-shot worker has its own ``/tmp``).
* Where no zygote runs, each call is a fresh interpreter (the worker in
  :mod:`.handler_worker`, through :func:`.shell.run_process`): with
  ``[python] zygote = false``; with ``[python] interpreter`` set to another
  interpreter; where calls are contained by process group only (no PID
  namespace); for a tool with ``max_procs`` in the sandbox (its pids cgroup
  is made per call); in the in-process CLI commands (one call, then the
  process ends); for a call whose deadline comes before its zygote is
  ready; and for a minute after a profile's zygote failed to start
  (logged).
* Its working directory is the tool's ``runtime/`` folder (seed 002 §4.3,
  third pitfall); ``BITONG_TOOL_DIR`` is the tool's folder. The environment
  is the shell executor's minimal one (no server secrets), plus
  ``BITONG_FS_READ_PATHS`` and ``BITONG_FS_WRITE_PATHS``: the tool's
  allow-lists as JSON arrays, for :func:`bitong.agent.calling.allowlist.require`.
* ``sys.path`` starts with the tool's folder, then the folder holding the
  ``bitong`` package (so a handler may ``from bitong.agent.calling.allowlist import
  require``), then the server interpreter's site-packages (without running
  their ``.pth`` files). ``[python] interpreter`` in the config picks
  another interpreter, which then uses its own site setup.
* Output: the JSON of the return value (UTF-8, not ASCII-escaped). What the
  handler prints goes to stderr. An exception answers ``ok=False``,
  ``exit_code`` 1, the traceback in stderr and ``error`` "handler raised
  ValueError: ..."; a handler that cannot be called (no handler.py, an
  import error, no such function, params its signature does not take)
  answers exit code 2, a non-JSON return value exit code 3, each with the
  reason in ``error``.
"""

from __future__ import annotations

import json
import os
import site
import sys
import tempfile
import time
from typing import Any
from collections.abc import Mapping

from bitong.v1.agent_pb2 import ToolDef

from ..allowlist import ENV as ALLOWLIST_ENV
from ...config import PythonSettings, Secret, SecretUnavailable
from . import handler_worker as worker
from . import reaper
from .base import STDERR, Outcome, Sink
from . import sandbox as sandboxes
from .reaper import Containment
from .sandbox import Sandbox
from .zygote import Zygotes
from .shell import DEFAULT_MAX_OUTPUT, EXIT_CANNOT_RUN, child_env, run_process, secret_env

__all__ = ["PythonExecutor", "HANDLER_FILE"]

HANDLER_FILE = "handler.py"
_TAIL = 4096


class PythonExecutor:
    """``executor: python``. Holds the worker's command line and the zygotes; one instance serves every call."""

    name = "python"

    def __init__(self, settings: PythonSettings = PythonSettings(), *, use_pidfd: bool | None = None,
                 containment: Containment | None = None, sandbox: Sandbox | None = None,
                 secrets: Mapping[str, Mapping[str, Secret]] | None = None) -> None:
        interpreter = settings.interpreter
        own = os.path.realpath(interpreter) == os.path.realpath(sys.executable)
        # -I: no PYTHON* variables, no user site, no script folder on sys.path; -B: no .pyc in tool folders.
        # -S (own interpreter only): skip site's .pth processing, the bulk of a bare start-up.
        flags = ["-I", "-S", "-B"] if own else ["-I", "-B"]
        self.argv = [interpreter, *flags, os.path.abspath(worker.__file__)]
        package_parent = os.path.abspath(__file__).rsplit(os.sep, 5)[0]   # <here>/bitong/agent/calling/executors/handler.py
        self.paths = [package_parent] + (_site_dirs() if own else [])
        self.use_pidfd = use_pidfd
        self.containment = reaper.containment() if containment is None else containment
        self.sandbox = sandboxes.current() if sandbox is None else sandbox
        self.secrets = secrets or {}
        # A zygote runs the server's own interpreter with -S (another interpreter keeps its own site setup,
        # and its start-up cost is its own), and needs the PID namespace its warden's kills rely on.
        self.zygotes: Zygotes | None = None
        if own and self.containment.namespaced and settings.zygote:
            self.zygotes = Zygotes(limit=settings.zygotes, idle_s=settings.zygote_idle_s)
        # What the interpreter reads to start (its prefix, the agent package, site-packages): readable even
        # for a tool whose fs_read_paths would hide them.
        prefixes = {sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix} if own else set()
        here = os.path.dirname(os.path.realpath(interpreter))
        self.readable = tuple(sorted({os.path.realpath(p) for p in [*prefixes, *self.paths, here]}))

    async def run(self, tool: ToolDef, params: dict[str, Any], *, deadline: float,
                  sink: Sink | None = None) -> Outcome:
        """One call in a fresh worker; see the module docstring and base.py."""
        started = time.monotonic()
        src = tool.source_path
        if not src or src.startswith("<"):
            return Outcome(ok=False, exit_code=EXIT_CANNOT_RUN,
                           error="executor python needs the tool's folder (handler.py beside TOOL.hdlp); "
                                 "this tool was not read from a file")
        folder = os.path.dirname(os.path.abspath(src))
        handler = os.path.join(folder, HANDLER_FILE)
        if not os.path.isfile(handler):
            return Outcome(ok=False, exit_code=EXIT_CANNOT_RUN,
                           error=f"executor python: there is no {HANDLER_FILE} in {folder}")
        payload = json.dumps({"handler": handler, "function": tool.method, "params": params,
                              "path": [folder, *self.paths]}, ensure_ascii=False).encode("utf-8")
        try:
            env = secret_env(tool, self.secrets, child_env(tool)) or {}
        except SecretUnavailable as exc:
            return Outcome(ok=False, error=f"{exc}; nothing ran")
        env[ALLOWLIST_ENV["fs_read_paths"]] = json.dumps(list(tool.permissions.fs_read_paths))
        env[ALLOWLIST_ENV["fs_write_paths"]] = json.dumps(list(tool.permissions.fs_write_paths))
        tail = _Tail(sink) if sink is not None else None
        fd = _payload_fd(payload)
        try:
            outcome = await self._in_zygote(tool, fd, env, deadline, tail, started)
            if outcome is None:
                outcome = await run_process(tool, self.argv, deadline=deadline, sink=tail, use_pidfd=self.use_pidfd,
                                            stdin=fd, env=env, containment=self.containment, sandbox=self.sandbox,
                                            readable=self.readable, started=started)
        finally:
            os.close(fd)
        outcome.argv = tuple(self.argv)
        if tail is not None:
            _explain(outcome, tail.data, True, tool.method)
        else:
            cap = tool.constraints.max_output_bytes or DEFAULT_MAX_OUTPUT
            _explain(outcome, outcome.stderr, len(outcome.stderr) < cap, tool.method)
        return outcome

    async def _in_zygote(self, tool: ToolDef, fd: int, env: dict[str, str], deadline: float, sink: Sink | None,
                         started: float) -> Outcome | None:
        """The call forked by the profile's zygote; None where the one-shot worker must run it."""
        if self.zygotes is None or deadline <= started:
            return None
        jail = self.sandbox
        options: list[str] | None = None
        if jail.active:
            if tool.constraints.max_procs:
                return None   # max_procs is a pids cgroup of the call's own, made by _reaper per call
            options = jail.options(tool, self.argv, read=self.readable)
        outcome = await self.zygotes.call(tool, self.argv, fd, env=env, deadline=deadline, sink=sink,
                                          started=started, box=self.containment, options=options,
                                          pass_fds=jail.pass_fds if options is not None else ())
        if outcome is not None:
            outcome.argv = tuple(self.argv)
            outcome.sandboxed = options is not None
        return outcome


class _Tail:
    """A sink in front of the caller's that keeps the end of stderr, where the reason of a failure is."""

    def __init__(self, sink: Sink) -> None:
        self.sink = sink
        self.data = b""

    async def __call__(self, stream: int, data: bytes) -> None:
        if stream == STDERR:
            self.data = (self.data + data)[-_TAIL:]
        await self.sink(stream, data)


def _explain(outcome: Outcome, stderr: bytes, complete: bool, function: str) -> None:
    """Put the worker's exit status in words (it already is a result; this only names it).

    The reason is stderr's last line; ``complete`` says whether that end was
    kept (a stderr cut at the cap in Call lost it, a streamed one did not).
    """
    if outcome.ok or outcome.timed_out or outcome.signal:
        return
    code = outcome.exit_code
    if code not in (worker.EXIT_RAISED, worker.EXIT_UNUSABLE, worker.EXIT_NOT_JSON):
        return
    lines = [line.strip() for line in stderr.decode("utf-8", "replace").splitlines() if line.strip()]
    last = lines[-1] if lines and complete else ""
    if code == worker.EXIT_RAISED:
        outcome.error = f"handler raised {last}" if last else \
            f"handler {function}() raised an exception; the traceback is in stderr"
    elif code == worker.EXIT_UNUSABLE:
        outcome.error = last or f"{HANDLER_FILE} cannot be called; the reason is in stderr"
    else:
        outcome.error = last or "the handler's return value is not JSON"


def _payload_fd(data: bytes) -> int:
    """The call as a readable fd for the worker's stdin: no pipe to feed, no file left behind."""
    try:
        fd = os.memfd_create("bitong-call", os.MFD_CLOEXEC)
    except (AttributeError, OSError):  # not Linux: an already unlinked temporary file
        with tempfile.TemporaryFile() as fh:
            fd = os.dup(fh.fileno())
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]
    os.lseek(fd, 0, os.SEEK_SET)
    return fd


def _site_dirs() -> list[str]:
    dirs = [d for d in site.getsitepackages() if os.path.isdir(d)]
    return list(dict.fromkeys(dirs))
