"""Zygotes: pre-started handler interpreters, one per sandbox profile, that fork a fresh process per call.

A fresh ``python -I -S -B`` per call spends ~45 ms of CPU before the
handler runs (interpreter start-up, then ``json``, ``re``, ``enum``), so two
cores cap out near 43 calls/s. A zygote (zygote_main.py) is that same
interpreter, started once with those imports done, that forks one child
per call: every call still starts from the same clean state, and nothing of
one call is seen by another (a fresh process each time; see zygote_main.py
for the warden that kills whatever a call leaves behind).

* One zygote per *profile*: the worker's argv, the tool's sandbox options
  (sandbox.py), its environment (with its secrets, if it declares
  ``secret: true``), its ``runtime/`` folder (by inode). It is started
  exactly as a one-shot worker is, under ``_reaper`` with those options, so
  it and every call it forks live in the tool's PID namespace, mounts,
  Landlock domain and limits, and die with the server. A changed
  definition, secret or environment is a new profile, so a new zygote; the
  tool's previous one is retired (it exits once its calls are done), so an
  old secret does not stay in memory.
* A call: the server makes the stdout and stderr pipes, as for any process
  tool, and one socketpair, and hands the write ends, the payload fd and
  one end of the socketpair to the zygote (SCM_RIGHTS). The handler writes
  straight into the server's pipes, read by the same loop code as a shell
  tool's (shell._Run); the socketpair says "started", then the exit code
  once nothing of the call is left. The deadline and cancellation send
  ``K`` on it: the zygote SIGKILLs the call's process, then everything it
  left (zygote_main.py says how nothing escapes).
* A zygote that died (or exited idle) is found at the next call: the send
  fails, or the call's socket closes before "started". Then a new one is
  started and the call retried, once, since nothing of it ran. A call
  that had started is never retried.
* A call waits for its profile's zygote to start (~70 ms) no longer than
  its own deadline; the start goes on, and is held, whoever waits for it.
* Bounded: at most ``limit`` zygotes (least recently used retired first),
  and a zygote with no call for ``idle_s`` exits by itself.

Where a zygote cannot run, the one-shot worker does (handler.py says when).
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import functools
import logging
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Sequence

from bitong.v1.agent_pb2 import ToolDef

from . import shell
from .base import STDERR, STDOUT, Outcome, Sink
from .reaper import Containment

__all__ = ["Zygotes", "ZYGOTE_FILE"]

ZYGOTE_FILE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "zygote_main.py")
_START_TIMEOUT_S = 20.0
_RETRY_START_S = 60.0   # a profile whose zygote could not start runs one-shot workers this long, then tries again
_STATUS_LEN = 5   # b"X" + signed 32-bit exit code

log = logging.getLogger("bitong.executors")

Key = tuple[object, ...]


class _Zygote:
    """One started zygote: the launcher process the server waits for, and the control socket."""

    def __init__(self, key: Key, folder: str, proc: subprocess.Popen[bytes], ctl: socket.socket,
                 err_fd: int) -> None:
        self.key = key
        self.folder = folder
        self.proc = proc
        self.ctl = ctl
        self.alive = True
        self.inflight = 0
        self.retiring = False
        self.lock = threading.Lock()
        threading.Thread(target=self._watch, args=(err_fd,), name=f"bitong-zygote-{proc.pid}",
                         daemon=True).start()

    def _watch(self, err_fd: int) -> None:
        """Log what the zygote says on its stderr (only its own failures), then reap it."""
        with open(err_fd, "rb") as err:
            for line in err:
                log.warning("python zygote for %s: %s", self.folder, line.decode("utf-8", "replace").rstrip())
        self.proc.wait()
        with self.lock:
            self.alive = False
            if self.inflight == 0:   # else the last call's end closes it: no send is ever racing a close
                self._close()

    def send(self, fds: Sequence[int]) -> bool:
        """Hand one call to the zygote; False when it is gone (nothing was sent)."""
        try:
            socket.send_fds(self.ctl, [b"C"], list(fds))
            return True
        except OSError:   # EPIPE, ECONNRESET, closed, or a full queue (a stuck zygote): start another
            self.alive = False
            return False

    def retire(self) -> None:
        """Exit once no call is in flight: closing the control socket is the zygote's signal to exit."""
        with self.lock:
            self.retiring = True
            if self.inflight == 0:
                self._close()

    def done_one(self) -> None:
        with self.lock:
            self.inflight -= 1
            if (self.retiring or not self.alive) and self.inflight == 0:
                self._close()

    def _close(self) -> None:
        if self.ctl.fileno() >= 0:
            self.ctl.close()


class Zygotes:
    """The server's zygotes, by profile. Thread-safe and loop-agnostic (one executor serves every loop)."""

    def __init__(self, *, limit: int = 8, idle_s: float = 60.0) -> None:
        self.limit = limit
        self.idle_s = idle_s
        self._ready: collections.OrderedDict[Key, _Zygote] = collections.OrderedDict()
        self._starting: dict[Key, concurrent.futures.Future[_Zygote | str]] = {}
        self._by_folder: dict[str, Key] = {}
        self._lock = threading.RLock()   # a start that already ended runs _started inside add_done_callback
        self._failed: dict[Key, float] = {}   # when a profile's zygote last failed to start

    async def call(self, tool: ToolDef, argv: Sequence[str], payload_fd: int, *, env: dict[str, str],
                   deadline: float, sink: Sink | None, started: float, box: Containment,
                   options: list[str] | None, pass_fds: tuple[int, ...]) -> Outcome | None:
        """Run one call in the profile's zygote; None when no zygote can run it (use the one-shot worker)."""
        cwd = shell.runtime_dir(tool)
        if cwd not in shell._made_dirs:
            os.makedirs(cwd, exist_ok=True)
            shell._made_dirs.add(cwd)
        try:
            st = os.stat(cwd)
        except OSError:
            return None
        folder = os.path.dirname(cwd)
        key: Key = (tuple(argv), tuple(options or ()), tuple(sorted(env.items())), cwd, st.st_dev, st.st_ino)
        for _ in range(2):
            zygote = await self._get(key, folder, argv, cwd, env, box, options, pass_fds, deadline)
            if zygote is None:
                return None
            with zygote.lock:
                zygote.inflight += 1
            try:
                outcome = await _run_in(zygote, tool, payload_fd, deadline, sink, started)
            finally:
                zygote.done_one()
            if outcome is not None:
                return outcome
            self._forget(zygote)   # it died before the call started: nothing ran, so once more on a new one
            os.lseek(payload_fd, 0, os.SEEK_SET)
        return None

    async def _get(self, key: Key, folder: str, argv: Sequence[str], cwd: str, env: dict[str, str],
                   box: Containment, options: list[str] | None, pass_fds: tuple[int, ...],
                   deadline: float) -> _Zygote | None:
        with self._lock:
            zygote = self._ready.get(key)
            if zygote is not None and zygote.alive and not zygote.retiring:
                self._ready.move_to_end(key)
                return zygote
            if zygote is not None:
                del self._ready[key]
                zygote.retire()
            if time.monotonic() - self._failed.get(key, -_RETRY_START_S) < _RETRY_START_S:
                return None
            future = self._starting.get(key)
            if future is None:
                future = shell._SPAWNER.submit(_start, key, folder, list(argv), cwd, env, box, options, pass_fds,
                                               self.idle_s)
                self._starting[key] = future
                future.add_done_callback(functools.partial(self._started, key))
        try:   # a call waits for the start no longer than its own deadline; the start goes on regardless
            got = await asyncio.wait_for(asyncio.shield(asyncio.wrap_future(future)), deadline - time.monotonic())
        except TimeoutError:
            return None
        return got if isinstance(got, _Zygote) and got.alive else None

    def _started(self, key: Key, future: concurrent.futures.Future[_Zygote | str]) -> None:
        """A start ended (on the spawner thread): hold the zygote, or remember the failure for a while."""
        got = future.result() if not future.cancelled() and future.exception() is None else "its start failed"
        with self._lock:
            if self._starting.get(key) is future:
                del self._starting[key]
            if isinstance(got, str):
                now = time.monotonic()
                self._failed = {k: t for k, t in self._failed.items() if now - t < _RETRY_START_S}
                self._failed[key] = now
                log.warning("python handlers of %s run in a fresh interpreter per call for %.0f s: no zygote (%s)",
                            os.path.dirname(str(key[3])), _RETRY_START_S, got)
            else:
                self._admit(got)

    def _admit(self, zygote: _Zygote) -> None:
        """Hold a new zygote: retire the tool's previous profile, and the least recently used past the limit."""
        old_key = self._by_folder.get(zygote.folder)
        if old_key is not None and old_key != zygote.key:
            old = self._ready.pop(old_key, None)
            if old is not None:
                old.retire()
        self._by_folder[zygote.folder] = zygote.key
        self._ready[zygote.key] = zygote
        while len(self._ready) > self.limit:
            _, lru = self._ready.popitem(last=False)
            lru.retire()

    def _forget(self, zygote: _Zygote) -> None:
        zygote.alive = False
        with self._lock:
            if self._ready.get(zygote.key) is zygote:
                del self._ready[zygote.key]
        zygote.retire()

    def close(self) -> None:
        """Retire every zygote (each exits once its calls are done)."""
        with self._lock:
            zygotes = list(self._ready.values())
            self._ready.clear()
            self._by_folder.clear()
        for zygote in zygotes:
            zygote.retire()


def _start(key: Key, folder: str, argv: list[str], cwd: str, env: dict[str, str], box: Containment,
           options: list[str] | None, pass_fds: tuple[int, ...], idle_s: float) -> _Zygote | str:
    """Start a zygote under _reaper with the profile's sandbox and wait for its "ready"; or say why not.

    Runs on the spawner pool: its threads live as long as the server, and the
    launcher's PDEATHSIG follows the thread that spawned it.
    """
    srv, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    err_r, err_w = os.pipe2(os.O_CLOEXEC)
    exec_r, exec_w = os.pipe2(os.O_CLOEXEC | os.O_NONBLOCK)
    full = [*box.argv(exec_w, options or ()), *argv[:-1], ZYGOTE_FILE, str(theirs.fileno()), repr(idle_s)]
    try:
        proc = subprocess.Popen(full, stdin=shell._devnull(), stdout=subprocess.DEVNULL, stderr=err_w, cwd=cwd,
                                env=env, close_fds=True, start_new_session=True,
                                pass_fds=(exec_w, theirs.fileno(), *pass_fds))
    except (OSError, ValueError) as exc:
        for fd in (err_r, exec_r):
            os.close(fd)
        srv.close()
        return f"cannot start it: {exc}"
    finally:
        theirs.close()
        os.close(err_w)
        os.close(exec_w)
    os.close(exec_r)
    srv.settimeout(_START_TIMEOUT_S)
    try:
        ready = srv.recv(1)
    except OSError:
        ready = b""
    if ready != b"R":
        srv.close()
        try:
            os.kill(proc.pid, 15)   # _reaper: SIGTERM stops its whole namespace
        except ProcessLookupError:
            pass
        proc.wait()
        with open(err_r, "rb") as err:
            said = err.read().decode("utf-8", "replace").strip().splitlines()
        return f"it exited with status {proc.returncode}" + (f": {said[-1]}" if said else "")
    srv.setblocking(False)
    return _Zygote(key, folder, proc, srv, err_r)


class _ForkedRun(shell._Run):
    """A call forked by a zygote: the same pipes and reader as any process tool, but the exit comes
    over the call's socket (the warden's "started", then the exit code), and a kill is asked for there."""

    def __init__(self, loop: asyncio.AbstractEventLoop, call: socket.socket, out_fd: int, err_fd: int, cap: int,
                 sink: Sink | None) -> None:
        self.loop = loop
        self.proc = None   # type: ignore[assignment]
        self.pid = 0
        self.contained = True
        self.exec_fd = -1
        self.sink = sink
        self.out = shell._Pipe(out_fd, STDOUT, cap)
        self.err = shell._Pipe(err_fd, STDERR, cap)
        self.status = None
        self.killed = False
        self.pending: collections.deque[tuple[shell._Pipe, bytes]] = collections.deque()
        self.waiter = None
        self.pidfd = -1
        self.exited = loop.create_future()
        self.call = call
        self.started = False
        self.said = b""
        for pipe in (self.out, self.err):
            self._resume(pipe)
        loop.add_reader(call.fileno(), self._on_call)

    def _on_call(self) -> None:
        try:
            data = self.call.recv(64)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            data = b""
        self.said += data
        self.started = self.said[:1] == b"S"
        status = self.said[1:] if self.started else b""
        if status[:1] == b"X" and len(status) >= _STATUS_LEN:
            self.status = int.from_bytes(status[1:_STATUS_LEN], sys.byteorder, signed=True)
        elif data:
            return
        self.loop.remove_reader(self.call.fileno())
        if not self.exited.done():
            self.exited.set_result(None)
        self._wake()

    def _reap(self) -> None:
        return None

    def kill(self) -> None:
        """Ask the warden to kill the call (it answers with the exit code once nothing of it is left)."""
        if self.exited.done():
            return
        try:
            self.call.send(b"K")
            self.killed = True
        except OSError:
            pass

    def close(self) -> None:
        super().close()
        if self.call.fileno() >= 0:
            if not self.exited.done():
                self.loop.remove_reader(self.call.fileno())
            self.call.close()


async def _run_in(zygote: _Zygote, tool: ToolDef, payload_fd: int, deadline: float, sink: Sink | None,
                  started: float) -> Outcome | None:
    """One call through ``zygote``; None if the zygote was gone before the call started (nothing ran)."""
    loop = asyncio.get_running_loop()
    cap = tool.constraints.max_output_bytes or shell.DEFAULT_MAX_OUTPUT
    out_r, out_w = os.pipe2(os.O_CLOEXEC)
    err_r, err_w = os.pipe2(os.O_CLOEXEC)
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sent = zygote.send([payload_fd, out_w, err_w, theirs.fileno()])
    finally:
        os.close(out_w)
        os.close(err_w)
        theirs.close()
    if not sent:
        for fd in (out_r, err_r):
            os.close(fd)
        ours.close()
        return None
    os.set_blocking(out_r, False)
    os.set_blocking(err_r, False)
    ours.setblocking(False)
    run = _ForkedRun(loop, ours, out_r, err_r, cap, sink)
    timed_out = await shell.supervise(run, deadline)
    if not run.started and not timed_out:
        run.close()
        return None
    outcome = shell._outcome(run, started, timed_out, deadline)
    run.close()
    return outcome
