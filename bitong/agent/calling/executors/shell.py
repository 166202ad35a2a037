"""The ``shell`` executor: run ``tool.command`` as an argv, never through a shell.

The template
    ``command: git -C {repo} log --oneline -n {n}``
is split with :func:`shlex.split` (POSIX rules: quotes group words, so
``"--format={fmt} x"`` is one token), then every ``{param}`` inside a token
is replaced by that parameter's value; ``{{`` and ``}}`` are literal braces.
A value always lands inside exactly one argument: it is never split and
never seen by a shell, so ``; rm -rf /`` or ``$(id)`` are just text. (The
bundled ``shell-exec`` tool is ``/bin/sh -c {cmd}``: running a shell is that
tool's choice, not this executor's.)

A value that begins a word and starts with ``-`` is refused before
anything runs (``param_errors``: "would be read as an option"), unless its
parameter declares ``allow_option: true`` or a ``--`` word comes before it:
see :func:`option_values`.

Rendering a value into its token:

* an optional parameter that is absent (no value, no default): the whole
  token holding it is dropped, so ``--limit={n}`` disappears; give a flag
  and its value one token (``--limit={n}``) or give the parameter a default;
* text as is; booleans ``true``/``false``; numbers in their shortest form,
  20 not 20.0 and 1.5 as 1.5; arrays and objects as compact JSON text.

The process:

* spawned with :class:`subprocess.Popen` (vfork/posix_spawn), never the
  loop's own subprocess transport: under uvloop that forks without vfork
  and costs milliseconds more per spawn, growing with the server's memory;
  on a small spawner thread pool, since Popen blocks until the child has
  exec'd and on the loop thread that would serialize concurrent calls;
* in a PID namespace of its own under ``_reaper`` (see reaper.py), so
  nothing the tool starts outlives its call, not even a ``setsid`` daemon,
  and every tool dies with the server, even one killed with SIGKILL: when
  the tool's first process exits, the kernel kills the rest of the
  namespace; at the deadline and on cancellation the server stops the whole
  namespace (SIGTERM to ``_reaper``, which SIGKILLs its pid 1), and the
  call ends only once all of it is gone. Where the kernel refuses a
  namespace, the fallback is a process group (``start_new_session``)
  killed with SIGKILL at the same moments, which a ``setsid`` escapes; the
  server says so in a warning at start;
* stdin is ``/dev/null``; stdout and stderr are pipes read by the running
  event loop (``add_reader`` on non-blocking fds, so it works the same on
  uvloop and on the default loop); the exit is seen through a pidfd on the
  same loop (a waiting thread where pidfds do not exist), never a blocking
  wait;
* working directory: the tool's own ``runtime/`` folder beside its
  TOOL.hdlp, created on demand (seed 002 §4.3: a tool's scratch files stay
  in its folder and two tools never share one). A tool parsed from text
  without a file gets ``$TMPDIR/bitong-runtime/<name>/runtime``;
* environment: only :data:`ENV_PASSTHROUGH` from the server's (PATH, HOME,
  locale, TZ, TMPDIR, USER...), never its tokens; plus ``BITONG_TOOL`` and
  ``BITONG_TOOL_DIR``; LANG defaults to C.UTF-8.

Results (see base.py for the shared rules): exit status 0 is ``ok``; any
other is ``ok=False`` with ``error`` "exit status N"; a signal gives
``exit_code = -signum`` and ``signal``. A command that cannot be started
answers ``ok=False`` without raising, with ``exit_code`` 127 when the program
is not found and 126 for any other refusal (not executable, a bad template,
a NUL byte in an argument), as a POSIX shell does.
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import errno
import fcntl
import functools
import json
import math
import os
import re
import shlex
import signal as signals
import subprocess
import sys
import tempfile
import threading
import time
from typing import Any, NamedTuple
from collections.abc import Mapping, Sequence

from bitong.v1.agent_pb2 import ToolDef

from ...config import Secret, SecretUnavailable
from . import reaper
from . import sandbox as sandboxes
from .base import STDERR, STDOUT, Outcome, Sink
from .reaper import Containment
from .sandbox import Sandbox

__all__ = ["ShellExecutor", "TemplateError", "render_argv", "option_values", "render_value", "check_command", "run_process",
           "runtime_dir", "tool_dir", "state_dir", "set_state_dir", "child_env", "ENV_PASSTHROUGH", "EXIT_NOT_FOUND", "EXIT_CANNOT_RUN"]

EXIT_NOT_FOUND = 127
EXIT_CANNOT_RUN = 126

ENV_PASSTHROUGH = ("PATH", "HOME", "USER", "LOGNAME", "LANG", "LANGUAGE", "LC_ALL", "LC_CTYPE", "LC_MESSAGES",
                   "TZ", "TMPDIR")
"""The only variables a tool sees from the server's environment (which may hold tokens)."""

DEFAULT_MAX_OUTPUT = 65536
_HAVE_PIDFD = hasattr(os, "pidfd_open")
# 64 KiB, a full pipe's worth: os.read allocates the whole size up front, so
# larger reads cost page faults for nothing.
_READ_SIZE = 64 * 1024
# StreamCall: stdout's pipe grows to 1 MiB (the default /proc/sys/fs/pipe-max-size)
# and is read up to 127 KiB at a time: each read becomes one gRPC message, so
# fewer, larger reads pay the per-message cost (the event, its framing, a loop
# turn, a flow-control wait) less often, and a 1 MiB pipe lets the tool run
# ahead while a chunk is being sent. Not 256 KiB: a bytes object of 128 KiB or
# more (the read, then the serialized message) is mmap'd and unmapped by glibc
# each time, measured at 140 page faults and 3x the CPU per chunk (issue 13 §5).
_STREAM_PIPE_SIZE = 1 << 20
_STREAM_READ_SIZE = 127 * 1024
_REAP_GRACE_S = 5.0
# The same rule as parser/build.py's _PLACEHOLDER_RE, which checks the names at
# load time: {name} (spaces inside ignored) is a parameter, {{ and }} are
# literal braces, any other brace is literal text. A test keeps them in step.
_PLACEHOLDER = re.compile(r"\{\{|\}\}|\{[ \t]*([A-Za-z0-9_-]+)[ \t]*\}")


class TemplateError(ValueError):
    """``tool.command`` cannot be rendered: a definition problem, not the caller's."""


# ---------------------------------------------------------------- the template


@functools.lru_cache(maxsize=1024)
def _tokens(command: str) -> tuple[tuple[str | tuple[str], ...], ...]:
    """Split the template into tokens, each literal text and ``(param,)`` holes; cached per template."""
    try:
        words = shlex.split(command, posix=True)
    except ValueError as exc:  # e.g. "No closing quotation"
        raise TemplateError(f"command {command!r} cannot be split: {exc}") from None
    out: list[tuple[str | tuple[str], ...]] = []
    for word in words:
        parts: list[str | tuple[str]] = []
        pos = 0
        for m in _PLACEHOLDER.finditer(word):
            parts.append(word[pos:m.start()])
            text = m.group()
            if m.group(1):
                parts.append((m.group(1),))
            else:
                parts.append(text[0])   # {{ or }}
            pos = m.end()
        parts.append(word[pos:])
        out.append(tuple(p for p in parts if p != ""))
    return tuple(out)


def check_command(tool: ToolDef) -> list[str]:
    """Problems with ``tool.command`` (for lint): unsplittable quoting, unknown params."""
    if not tool.command.strip():
        return ["executor shell needs a command: (an argv template such as `git log -n {n}`)"]
    try:
        tokens = _tokens(tool.command)
    except TemplateError as exc:
        return [str(exc)]
    problems = []
    for token in tokens:
        for part in token:
            if isinstance(part, tuple) and part[0] not in tool.params_schema:
                problems.append(f"command names {{{part[0]}}}, which is not in params_schema")
    return problems


def render_value(value: Any) -> str:
    """One parameter value as argument text (see the module docstring); HTTP executors use it for URLs."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if math.isfinite(value) and value.is_integer():
            return str(int(value))
        return repr(value)
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def option_values(tool: ToolDef, params: dict[str, Any]) -> list[tuple[str, str]]:
    """Values that would become options of the program: ``(param, message)`` for each (issue 9 §3).

    A value that begins a word of the argv and starts with ``-`` is read by
    most programs as an option (``rev=--output=/tmp/x`` makes ``git show``
    write a file), so it is refused, unless its parameter declares
    ``allow_option: true`` or a literal ``--`` word comes before it (the
    program's end of options). A value inside a word (``--limit={n}``) is
    that option's value and may be anything.
    """
    refused: list[tuple[str, str]] = []
    ended = False
    for token in _tokens(tool.command):
        if token == ("--",):
            ended = True
            continue
        if ended or not token or not isinstance(token[0], tuple):
            continue
        name = token[0][0]
        value = params.get(name)
        spec = tool.params_schema.get(name)
        if value is None or spec is None or spec.allow_option:
            continue
        text = render_value(value)
        if text.startswith("-"):
            refused.append((name, f"{text[:40]!r} starts with '-' and would be read as an option: a value in this "
                                  f"place may not start with '-' (the tool may declare allow_option: true for "
                                  f"'{name}', or put -- before it in its command)"))
    return refused


def render_argv(tool: ToolDef, params: dict[str, Any]) -> list[str]:
    """The argv for one call; raises :class:`TemplateError` for a broken template."""
    if not tool.command.strip():
        raise TemplateError("executor shell needs a command: (an argv template) and this tool has none")
    argv: list[str] = []
    for token in _tokens(tool.command):
        pieces: list[str] = []
        for part in token:
            if isinstance(part, tuple):
                name = part[0]
                if name not in tool.params_schema:
                    raise TemplateError(f"command names {{{name}}}, which is not in params_schema")
                value = params.get(name)
                if value is None:
                    break  # absent optional parameter: drop this whole token
                pieces.append(render_value(value))
            else:
                pieces.append(part)
        else:
            argv.append("".join(pieces))
    if not argv:
        raise TemplateError("command rendered to nothing (every token held an absent parameter)")
    return argv


# ---------------------------------------------------------------- the environment


def tool_dir(tool: ToolDef) -> str:
    """The folder holding the tool's TOOL.hdlp (a private temporary one for a tool parsed from text)."""
    src = tool.source_path
    if src and not src.startswith("<"):
        return os.path.dirname(os.path.abspath(src))
    return os.path.join(tempfile.gettempdir(), "bitong-runtime", tool.name or "unnamed")


def runtime_dir(tool: ToolDef) -> str:
    """The tool's own ``runtime/`` folder (created by the caller of this, on demand).

    Beside its TOOL.hdlp (seed 002 §4.3), except for a tool installed as
    package data (the bundled tools of a wheel, in site-packages): an install
    is code, not a place for a tool's files, so those get
    ``<state dir>/runtime/<name>`` (:func:`state_dir`).
    """
    folder = tool_dir(tool)
    if _installed(folder):
        return os.path.join(state_dir(), "runtime", tool.name or "unnamed")
    return os.path.join(folder, "runtime")


_state_dir: str | None = None


def set_state_dir(path: str | None) -> None:
    """``--state-dir``: where the tools' own files go when their folder is an installed package's."""
    global _state_dir
    _state_dir = os.path.abspath(path) if path else None


def state_dir() -> str:
    """--state-dir, else systemd's $STATE_DIRECTORY, else $XDG_STATE_HOME/bitong (~/.local/state/bitong);
    root without either: /var/lib/bitong."""
    if _state_dir:
        return _state_dir
    given = os.environ.get("STATE_DIRECTORY", "").split(":")[0]
    if given:
        return given
    xdg = os.environ.get("XDG_STATE_HOME")
    if xdg:
        return os.path.join(xdg, "bitong")
    if os.getuid() == 0:
        return "/var/lib/bitong"
    return os.path.join(os.path.expanduser("~"), ".local", "state", "bitong")


@functools.lru_cache(maxsize=1)
def installed_roots() -> tuple[str, ...]:
    """The folders where installed packages live (site-packages and its kin)."""
    import site
    import sysconfig

    found = {sysconfig.get_paths().get(key, "") for key in ("purelib", "platlib")}
    try:
        found.update(site.getsitepackages())
    except AttributeError:  # pragma: no cover - virtualenv's old site.py
        pass
    found.add(site.getusersitepackages())
    return tuple(sorted(os.path.realpath(p) for p in found if p))


def _installed(folder: str) -> bool:
    real = os.path.realpath(folder)
    return any(real == root or real.startswith(root + os.sep) for root in installed_roots())


def child_env(tool: ToolDef, base: Mapping[str, str] | None = None) -> dict[str, str]:
    """The minimal environment a tool runs with.

    ``base`` defaults to the server's environment as it was at the first call
    (read once: a server's environment does not change, and reading
    ``os.environ`` costs more than the rest of a call's setup).
    """
    env = dict(_server_env() if base is None else _passthrough(base))
    env["BITONG_TOOL"] = tool.name
    env["BITONG_TOOL_DIR"] = tool_dir(tool)
    return env


def secret_env(tool: ToolDef, secrets: Mapping[str, Mapping[str, Secret]],
               env: dict[str, str] | None = None) -> dict[str, str] | None:
    """The environment with the tool's configured secrets (``[secrets.TOOL]``), read now, when the tool
    declares ``secret: true``; else ``env`` as given (None: the minimal one). Raises SecretUnavailable."""
    named = secrets.get(tool.name) if tool.permissions.secret else None
    if not named:
        return env
    out = dict(child_env(tool) if env is None else env)
    for var, secret in named.items():
        out[var] = secret.reveal()
    return out


def _passthrough(src: Mapping[str, str]) -> dict[str, str]:
    env = {k: src[k] for k in ENV_PASSTHROUGH if k in src}
    env.setdefault("PATH", os.defpath)
    env.setdefault("LANG", "C.UTF-8")
    return env


@functools.lru_cache(maxsize=1)
def _server_env() -> dict[str, str]:
    return _passthrough(os.environ)


# ---------------------------------------------------------------- running


class _Pipe:
    """One output pipe: its fd, what was kept, and where reading stands."""

    __slots__ = ("fd", "kind", "buf", "cap", "seen", "sent", "eof", "reading", "size")

    def __init__(self, fd: int, kind: int, cap: int, size: int = _READ_SIZE) -> None:
        self.fd = fd
        self.kind = kind
        self.size = size   # bytes asked of each read
        self.buf = bytearray()
        self.cap = cap
        self.seen = 0      # bytes read from the pipe
        self.sent = 0      # bytes the sink has taken
        self.eof = False
        self.reading = False


def _stream_pipe(fd: int) -> int:
    """Grow a streamed stdout pipe (either end's fd will do) and say how much to read at a time.

    Where the kernel refuses (a lower pipe-max-size, or the user's pipe pages
    past pipe-user-pages-soft) the pipe keeps its 64 KiB and reads stay 64 KiB.
    """
    try:
        fcntl.fcntl(fd, fcntl.F_SETPIPE_SZ, _STREAM_PIPE_SIZE)
    except OSError:
        return _READ_SIZE
    return _STREAM_READ_SIZE


class _Run:
    """One child process and its pipes, driven by callbacks on the running loop."""

    def __init__(self, loop: asyncio.AbstractEventLoop, child: _Child, cap: int, sink: Sink | None,
                 use_pidfd: bool) -> None:
        proc, out_fd, err_fd = child.proc, child.out_fd, child.err_fd
        self.loop = loop
        self.proc = proc
        self.pid = proc.pid
        self.contained = child.contained   # the pid is _reaper's: SIGTERM stops the whole namespace
        self.exec_fd = child.exec_fd       # _reaper writes the errno of a failed exec here
        self.sink = sink
        self.out = _Pipe(out_fd, STDOUT, cap, child.out_read)
        self.err = _Pipe(err_fd, STDERR, cap)
        self.status: int | None = None     # exit code as Popen reports it (negative: signal)
        self.killed = False                # we stopped it (the group's SIGKILL, or _reaper's SIGTERM)
        self.pending: collections.deque[tuple[_Pipe, bytes]] = collections.deque()
        self.waiter: asyncio.Future[None] | None = None
        self.pidfd = -1
        self.exited = loop.create_future()
        for pipe in (self.out, self.err):
            self._resume(pipe)
        if use_pidfd:
            try:
                self.pidfd = os.pidfd_open(self.pid)
            except OSError:
                self.pidfd = -1
        if self.pidfd >= 0:
            loop.add_reader(self.pidfd, self._on_exit)
        else:
            threading.Thread(target=self._wait_thread, name=f"bitong-wait-{self.pid}", daemon=True).start()

    # -- callbacks (run on the loop) --

    def _resume(self, pipe: _Pipe) -> None:
        if not pipe.eof and not pipe.reading:
            self.loop.add_reader(pipe.fd, self._on_readable, pipe)
            pipe.reading = True

    def _pause(self, pipe: _Pipe) -> None:
        if pipe.reading:
            self.loop.remove_reader(pipe.fd)
            pipe.reading = False

    def _on_readable(self, pipe: _Pipe) -> None:
        try:
            data = os.read(pipe.fd, pipe.size)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            data = b""
        if not data:
            self._pause(pipe)
            pipe.eof = True
            self._wake()
            return
        pipe.seen += len(data)
        if self.sink is None:
            room = pipe.cap - len(pipe.buf)
            if room > 0:
                pipe.buf += data[:room]
        else:
            # Flow control: one chunk in flight per pipe. Reading resumes only
            # after the sink took it, so a slow sink leaves the rest in the
            # pipe, and the tool blocks on write, as it would on a slow terminal.
            self._pause(pipe)
            self.pending.append((pipe, data))
            self._wake()

    def _read_on(self, pipe: _Pipe) -> None:
        """The sink took a chunk: read the next one at once (a busy pipe has it
        ready) and only go back to watching the fd when the pipe is empty."""
        if pipe.eof:
            return
        try:
            data = os.read(pipe.fd, pipe.size)
        except (BlockingIOError, InterruptedError):
            self._resume(pipe)
            return
        except OSError:
            data = b""
        if not data:
            pipe.eof = True
            return
        pipe.seen += len(data)
        self.pending.append((pipe, data))

    def _on_exit(self) -> None:
        """The pidfd is readable: the first process is a zombie (its pid still reserved)."""
        self.loop.remove_reader(self.pidfd)
        self._exited_now()

    def _wait_thread(self) -> None:
        """Where there is no pidfd: wait in a thread without reaping, then finish on the loop."""
        try:
            os.waitid(os.P_PID, self.pid, os.WEXITED | os.WNOWAIT)
        except ChildProcessError:
            pass
        try:
            self.loop.call_soon_threadsafe(self._exited_now)
        except RuntimeError:  # the loop is gone: reap here so no zombie is left
            self._reap()

    def _exited_now(self) -> None:
        # Kill what the tool left behind before reaping: while the zombie
        # exists its pid, and so its process group id, cannot be reused.
        # (_reaper exits only once its namespace is empty: nothing is left.)
        if not self.contained:
            self.kill()
        self._reap()
        if not self.exited.done():
            self.exited.set_result(None)
        self._wake()

    def _reap(self) -> None:
        if self.status is not None:
            return
        try:
            pid, status = os.waitpid(self.pid, os.WNOHANG)
        except ChildProcessError:
            return
        if pid:
            self.status = os.waitstatus_to_exitcode(status)
            self.proc.returncode = self.status  # Popen must not wait for it again

    def _wake(self) -> None:
        if self.waiter is not None and not self.waiter.done():
            self.waiter.set_result(None)

    # -- control --

    def kill(self) -> None:
        """Stop everything of the call: the namespace (via _reaper), or the process group (the fallback)."""
        if self.status is not None:
            return  # reaped: the id may belong to someone else now
        try:
            _stop(self.pid, self.contained)
            self.killed = True
        except (ProcessLookupError, PermissionError):
            pass

    def exec_error(self) -> OSError | None:
        """The tool's program could not be exec'd (inside _reaper): the errno it reported, as an OSError."""
        if self.exec_fd < 0:
            return None
        try:
            data = os.read(self.exec_fd, 4)
        except OSError:
            return None
        if len(data) != 4:
            return None
        code = int.from_bytes(data, sys.byteorder, signed=True)
        return OSError(code, os.strerror(code))

    @property
    def finished(self) -> bool:
        return self.exited.done() and self.out.eof and self.err.eof and not self.pending

    async def wait(self) -> None:
        """Deliver chunks to the sink in order, until the process exited and both pipes closed."""
        while not self.finished:
            if self.pending:
                pipe, data = self.pending.popleft()
                assert self.sink is not None
                await self.sink(pipe.kind, data)
                pipe.sent += len(data)
                self._read_on(pipe)
                continue
            self.waiter = self.loop.create_future()
            try:
                await self.waiter
            finally:
                self.waiter = None

    def drain(self) -> None:
        """After a kill: take what is already in the pipes, without waiting for more."""
        for pipe in (self.out, self.err):
            if pipe.eof or self.sink is not None:
                continue
            for _ in range(64):  # bounded: a writer outside the group could keep writing
                try:
                    data = os.read(pipe.fd, _READ_SIZE)
                except OSError:
                    break
                if not data:
                    break
                pipe.seen += len(data)
                room = pipe.cap - len(pipe.buf)
                if room > 0:
                    pipe.buf += data[:room]

    def close(self) -> None:
        """Stop watching and close the pipes; a still-running child is reaped later, in the background."""
        for pipe in (self.out, self.err):
            self._pause(pipe)
            if pipe.fd >= 0:
                os.close(pipe.fd)
                pipe.fd = -1
        self.pending.clear()
        if self.exec_fd >= 0:
            os.close(self.exec_fd)
            self.exec_fd = -1
        if self.status is None and not self.exited.done():
            # Killed but not yet seen to exit (cancellation): the pidfd
            # reader or the wait thread still reaps it; then the pidfd closes.
            self.exited.add_done_callback(lambda _f: self._close_pidfd())
        else:
            self._close_pidfd()

    def _close_pidfd(self) -> None:
        if self.pidfd >= 0:
            try:
                self.loop.remove_reader(self.pidfd)
            except (ValueError, RuntimeError):
                pass
            os.close(self.pidfd)
            self.pidfd = -1


class ShellExecutor:
    """``executor: shell``. Stateless; one instance serves every call."""

    name = "shell"

    def __init__(self, *, use_pidfd: bool | None = None, containment: Containment | None = None,
                 sandbox: Sandbox | None = None, secrets: Mapping[str, Mapping[str, Secret]] | None = None) -> None:
        # None: use a pidfd where the OS has one (Linux 5.3+), else a waiting thread.
        self.use_pidfd = _HAVE_PIDFD if use_pidfd is None else use_pidfd
        # None: a PID namespace per call where the kernel allows one (probed once, at start, warning if not).
        self.containment = reaper.containment() if containment is None else containment
        # None: the server's sandbox (sandbox.configure, or auto).
        self.sandbox = sandboxes.current() if sandbox is None else sandbox
        # [secrets.TOOL] of the config: given only to a tool that declares secret: true.
        self.secrets = secrets or {}

    async def run(self, tool: ToolDef, params: dict[str, Any], *, deadline: float,
                  sink: Sink | None = None) -> Outcome:
        """Run one call; see the module docstring and base.py. Raises only CancelledError (and the sink's errors)."""
        started = time.monotonic()
        try:
            refused = option_values(tool, params)
            argv = render_argv(tool, params)
        except TemplateError as exc:
            return Outcome(ok=False, error=f"tool definition: {exc}", exit_code=EXIT_CANNOT_RUN)
        if refused:
            names = ", ".join(name for name, _ in refused)
            return Outcome(ok=False, error=f"a value would be read as an option: {names}; nothing ran",
                           param_errors=tuple(refused))
        try:
            env = secret_env(tool, self.secrets)
        except SecretUnavailable as exc:
            return Outcome(ok=False, error=f"{exc}; nothing ran")
        return await run_process(tool, argv, deadline=deadline, sink=sink, use_pidfd=self.use_pidfd, started=started,
                                 containment=self.containment, sandbox=self.sandbox, env=env)


async def run_process(tool: ToolDef, argv: Sequence[str], *, deadline: float, sink: Sink | None = None,
                      use_pidfd: bool | None = None, stdin: int | None = None,
                      env: dict[str, str] | None = None, started: float | None = None,
                      containment: Containment | None = None, sandbox: Sandbox | None = None,
                      readable: Sequence[str] = ()) -> Outcome:
    """Run ``argv`` for ``tool`` under every rule of the module docstring; the one process runner.

    The ``python`` executor runs its worker through here too, so a handler
    gets the same group kill, deadline, cap and streaming as a shell tool.
    ``stdin`` is an fd to give the child (default ``/dev/null``; the caller
    keeps and closes its own); ``env`` defaults to :func:`child_env`;
    ``started`` is when the caller began the call (default: now), which
    ``duration_ms`` and the timeout's words count from; ``containment``
    defaults to :func:`.reaper.containment` (a PID namespace where allowed);
    ``sandbox`` to :func:`.sandbox.current` (the OS sandbox built from the
    tool's permissions, see sandbox.py; ``readable`` adds folders it may
    read, such as an interpreter's). Raises only CancelledError (and the
    sink's errors).
    """
    if started is None:
        started = time.monotonic()
    if deadline <= started:
        return Outcome(ok=False, timed_out=True,
                       error="timed out before start: the deadline had already passed; nothing ran")
    global _in_flight
    _in_flight += 1
    try:
        box = reaper.containment() if containment is None else containment
        jail = sandboxes.current() if sandbox is None else sandbox
        options: list[str] | None = None
        if jail.active and box.namespaced:
            options = jail.options(tool, argv, read=readable)
        try:
            outcome = await _run_process(tool, argv, deadline, sink, use_pidfd, stdin, env, started, box, options,
                                         jail.pass_fds if options is not None else ())
        finally:
            if options is not None:
                jail.cleanup(options)
        outcome.argv = tuple(argv)
        if options is not None:
            outcome.sandboxed = True
            _explain_setup(outcome)
        return outcome
    finally:
        _in_flight -= 1


def _explain_setup(outcome: Outcome) -> None:
    """Exit 125 with the launcher's reason: the sandbox could not be built, so nothing ran (fail closed)."""
    if outcome.exit_code != sandboxes.EXIT_SETUP or outcome.timed_out:
        return
    lines = [line for line in outcome.stderr.decode("utf-8", "replace").splitlines()
             if line.startswith("bitong-sandbox:")]
    if lines:
        outcome.error = f"the sandbox could not be set up, nothing ran: {lines[-1].partition(': ')[2]}"


async def _run_process(tool: ToolDef, argv: Sequence[str], deadline: float, sink: Sink | None,
                       use_pidfd: bool | None, stdin: int | None, env: dict[str, str] | None,
                       started: float, box: Containment, options: list[str] | None = None,
                       pass_fds: tuple[int, ...] = ()) -> Outcome:
    cwd = runtime_dir(tool)
    cap = tool.constraints.max_output_bytes or DEFAULT_MAX_OUTPUT
    loop = asyncio.get_running_loop()
    if env is None:
        env = child_env(tool)
    if use_pidfd is None:
        use_pidfd = _HAVE_PIDFD
    try:
        if cwd not in _made_dirs:
            os.makedirs(cwd, exist_ok=True)
            _made_dirs.add(cwd)
        try:
            child = await _spawn_off_loop(loop, argv, cwd, env, stdin, box, options, pass_fds, sink is not None)
        except FileNotFoundError as exc:
            if exc.filename != cwd:
                raise
            os.makedirs(cwd, exist_ok=True)  # runtime/ was removed since: make it again
            child = await _spawn_off_loop(loop, argv, cwd, env, stdin, box, options, pass_fds, sink is not None)
    except (OSError, ValueError) as exc:
        return _not_started(argv, cwd, exc, started)
    run = _Run(loop, child, cap, sink, use_pidfd)
    timed_out = await supervise(run, deadline)
    failed = run.exec_error()
    run.close()
    if failed is not None:  # the program could not be exec'd inside _reaper: as a direct spawn answers
        failed.filename = argv[0]
        return _not_started(argv, cwd, failed, started)
    return _outcome(run, started, timed_out, deadline)


async def supervise(run: _Run, deadline: float) -> bool:
    """Wait for ``run`` to end; at the deadline kill it and keep what it wrote (True: it timed out).

    On cancellation (or a sink that failed) it is killed, seen gone and
    closed before the exception goes on: nothing may outlive the call.
    """
    timeout = asyncio.timeout(deadline - time.monotonic())
    try:
        try:
            async with timeout:
                await run.wait()
        except TimeoutError:
            if not timeout.expired():
                raise
            run.kill()
            await _reaped(run)
            run.drain()
            return True
    except BaseException:
        run.kill()
        try:
            await _reaped(run)
        finally:
            run.close()
        raise
    return False


async def _reaped(run: _Run) -> None:
    """Wait for the killed first process to be reaped, so the caller sees it gone.

    SIGKILL is prompt; the bound is only for a process stuck in the kernel
    (then the pidfd reader or the wait thread reaps it later). A second
    cancellation while waiting is not swallowed: the caller asked twice.
    """
    if run.exited.done():
        return
    try:
        await asyncio.wait_for(asyncio.shield(run.exited), _REAP_GRACE_S)
    except TimeoutError:
        pass


_SPAWNER = concurrent.futures.ThreadPoolExecutor(max_workers=4, thread_name_prefix="bitong-spawn")
"""Popen blocks its caller until the child has exec'd (~0.2 ms, more on a busy
machine); done on the loop thread, that serializes every spawn behind every
other and stalls the server, so spawns run here."""


async def _spawn_off_loop(loop: asyncio.AbstractEventLoop, argv: Sequence[str], cwd: str, env: dict[str, str],
                          stdin: int | None, box: Containment, options: list[str] | None = None,
                          pass_fds: tuple[int, ...] = (), stream: bool = False) -> _Child:
    """:func:`_spawn` on a spawner thread. A call cancelled meanwhile waits for
    the spawn to land, then kills and reaps what it started before the
    cancellation goes on: nothing is left behind, and nothing outlives the call.

    When no other call of this process is running, the thread hop would only
    add latency (nobody waits behind this spawn), so the spawn runs inline."""
    if _in_flight <= 1:
        return _spawn(argv, cwd, env, stdin, box, options, pass_fds, stream)
    return await _spawn_on_thread(loop, argv, cwd, env, stdin, box, options, pass_fds, stream)


_in_flight = 0
"""Processes being run by :func:`run_process` in this server right now (all on one loop)."""


async def _spawn_on_thread(loop: asyncio.AbstractEventLoop, argv: Sequence[str], cwd: str, env: dict[str, str],
                           stdin: int | None, box: Containment, options: list[str] | None = None,
                           pass_fds: tuple[int, ...] = (), stream: bool = False) -> _Child:
    future = loop.run_in_executor(_SPAWNER, _spawn, argv, cwd, env, stdin, box, options, pass_fds, stream)
    try:
        return await asyncio.shield(future)
    except asyncio.CancelledError:
        try:
            spawned = await future
        except asyncio.CancelledError:  # cancelled twice: clean up whenever it lands
            future.add_done_callback(_discard_when_spawned)
            raise
        except Exception:  # the spawn failed: nothing started
            raise asyncio.CancelledError from None
        proc = _discard(spawned)
        try:
            await loop.run_in_executor(_SPAWNER, functools.partial(proc.wait, _REAP_GRACE_S))
        except subprocess.TimeoutExpired:  # stuck in the kernel: a thread reaps it later
            threading.Thread(target=proc.wait, name=f"bitong-reap-{proc.pid}", daemon=True).start()
        raise


def _discard_when_spawned(future: asyncio.Future[_Child]) -> None:
    if future.cancelled() or future.exception() is not None:
        return
    proc = _discard(future.result())
    threading.Thread(target=proc.wait, name=f"bitong-reap-{proc.pid}", daemon=True).start()


def _discard(child: _Child) -> subprocess.Popen[bytes]:
    """Stop a child nobody will read (its namespace, or its process group), and close its pipes."""
    try:
        _stop(child.proc.pid, child.contained)
    except (ProcessLookupError, PermissionError):
        pass
    for fd in (child.out_fd, child.err_fd, child.exec_fd):
        if fd >= 0:
            os.close(fd)
    return child.proc


def _stop(pid: int, contained: bool) -> None:
    """SIGTERM to _reaper (it SIGKILLs its namespace, then dies of SIGKILL), or SIGKILL to the process group."""
    if contained:
        os.kill(pid, signals.SIGTERM)
    else:
        os.killpg(pid, signals.SIGKILL)


class _Child(NamedTuple):
    """A spawned call: the process the server waits for, and the read ends of its pipes."""

    proc: subprocess.Popen[bytes]
    out_fd: int
    err_fd: int
    exec_fd: int       # -1 unless contained
    contained: bool    # proc is _reaper, the tool runs in its PID namespace
    out_read: int = _READ_SIZE   # bytes to ask of each stdout read (larger when streamed)


def _spawn(argv: Sequence[str], cwd: str, env: dict[str, str], stdin: int | None = None,
           box: Containment | None = None, options: Sequence[str] | None = None,
           pass_fds: tuple[int, ...] = (), stream: bool = False) -> _Child:
    """Popen with our own pipes, so the read ends are plain non-blocking fds the loop can watch.

    Contained, the argv is ``_reaper PID ERRFD -- argv``: still one Popen
    (vfork, no ``preexec_fn``), plus one pipe for an exec failure's errno.
    """
    if box is None:
        box = reaper.containment()
    out_r, out_w = os.pipe2(os.O_CLOEXEC)
    out_read = _stream_pipe(out_r) if stream else _READ_SIZE   # grown before the tool can see it
    err_r, err_w = os.pipe2(os.O_CLOEXEC)
    exec_r = exec_w = -1
    if box.namespaced:
        exec_r, exec_w = os.pipe2(os.O_CLOEXEC | os.O_NONBLOCK)
        argv = [*box.argv(exec_w, options or ()), *argv]
    try:
        proc = subprocess.Popen(argv, stdin=_devnull() if stdin is None else stdin, stdout=out_w, stderr=err_w,
                                cwd=cwd, env=env, close_fds=True, start_new_session=True,
                                pass_fds=((exec_w,) if exec_w >= 0 else ()) + pass_fds)
    except BaseException:
        for fd in (out_r, err_r, exec_r):
            if fd >= 0:
                os.close(fd)
        raise
    finally:
        for fd in (out_w, err_w, exec_w):
            if fd >= 0:
                os.close(fd)
    os.set_blocking(out_r, False)
    os.set_blocking(err_r, False)
    return _Child(proc, out_r, err_r, exec_r, box.namespaced, out_read)


_made_dirs: set[str] = set()
"""runtime/ folders known to exist: makedirs once per folder, not once per call."""


@functools.lru_cache(maxsize=1)
def _devnull() -> int:
    """One /dev/null fd for every child's stdin (Popen's DEVNULL opens and closes one per call)."""
    return os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC)


def _not_started(argv: Sequence[str], cwd: str, exc: BaseException, started: float) -> Outcome:
    """A refused start as a result, in the words of the OS."""
    if isinstance(exc, OSError):
        where = exc.filename if exc.filename is not None else argv[0]
        missing = exc.errno == errno.ENOENT and where != cwd
        what = "program not found" if missing else "cannot start"
        error = f"{what}: {argv[0]!r}: [Errno {exc.errno}] {exc.strerror}"
        if where not in (argv[0], None):
            error += f" ({where})"
        code = EXIT_NOT_FOUND if missing else EXIT_CANNOT_RUN
    else:  # ValueError: an argument with a NUL byte
        error = f"cannot start {argv[0]!r}: {exc}"
        code = EXIT_CANNOT_RUN
    return Outcome(ok=False, error=error, exit_code=code, duration_ms=_ms(started))


def _outcome(run: _Run, started: float, timed_out: bool, deadline: float) -> Outcome:
    status = run.status if run.status is not None else -signals.SIGKILL
    sig = -status if status < 0 else 0
    out = Outcome(ok=status == 0 and not timed_out, exit_code=status, signal=sig, duration_ms=_ms(started),
                  timed_out=timed_out)
    if run.sink is None:
        out.stdout = bytes(run.out.buf)
        out.stderr = bytes(run.err.buf)
        out.truncated = run.out.seen > run.out.cap or run.err.seen > run.err.cap
    else:
        out.streamed_stdout_bytes = run.out.sent
        out.streamed_stderr_bytes = run.err.sent
    if timed_out:
        budget = round((deadline - started) * 1000)
        killed = "the tool and everything it started were killed" if run.contained else \
            "the process group was killed"
        out.error = f"timed out after {budget} ms; {killed}"
    elif sig:
        out.error = f"killed by signal {sig} ({_signame(sig)})"
    elif status:
        out.error = f"exit status {status}"
    return out


def _signame(sig: int) -> str:
    try:
        return signals.Signals(sig).name
    except ValueError:
        return f"signal {sig}"


def _ms(started: float) -> int:
    return int((time.monotonic() - started) * 1000)
