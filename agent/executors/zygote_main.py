"""The python executor's zygote: a clean interpreter that forks one fresh process per handler call.

Run by :mod:`agent.executors.zygote` as ``python -I -S -B zygote_main.py CTLFD
IDLE_S``, under ``_reaper`` with the tool's own sandbox options, exactly as
the one-shot worker is (so it and every call it forks are inside the tool's
PID namespace, mounts, Landlock domain and limits). Standard library only;
it never reads a handler: each call's child loads ``handler.py`` after the
fork, so a changed file is seen by the next call and nothing of one call is
in the zygote for the next.

The protocol, on CTLFD (a SOCK_SEQPACKET socket whose other end the server
holds): the zygote sends ``R`` once ready; each call is one message ``C``
carrying four fds (SCM_RIGHTS): the call's stdin (the payload), stdout and
stderr pipes (so the handler writes straight into the server's pipes), and
one end of the call's own socketpair. EOF on CTLFD, or IDLE_S seconds with
no call in flight, and the zygote exits.

Per call, two processes::

    zygote ── W  the call's warden: PR_SET_CHILD_SUBREAPER, so everything
               │  the handler starts (double forks, setsid daemons) stays
               │  beneath it; sends ``S`` on the call's socket once C exists
               └─ C  the handler (handler_worker.main), fds 0/1/2 the call's;
                     in a Landlock domain of its own where the kernel has
                     scopes (ABI 6): it cannot signal W, the zygote or
                     another call, nor ptrace them

W waits for C's exit or for ``K`` (or EOF) on the call's socket (the
server's deadline or cancellation: C is SIGKILLed), then kills and reaps
every process left beneath it, and only then sends ``X`` and C's exit code
(signed 32 bits, negative for a signal, as Popen reports it) and exits. So
"the server read X" means "nothing of the call is left", as "_reaper
exited" does on the one-shot path. The zygote is a subreaper too: a
process orphaned by a W that died is killed when the zygote sees that W go.
"""

import ctypes
# What a handler call needs, imported once here instead of in every child (json alone costs a fresh
# interpreter ~19 ms, traceback a failing call a few more). Each child still starts from this same state.
import json  # noqa: F401
import os
import select
import signal
import socket
import struct
import sys
import traceback  # noqa: F401
import types  # noqa: F401

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import handler_worker as worker  # type: ignore[import-not-found]  # stdlib only; not left on sys.path

del sys.path[0]

_PR_SET_CHILD_SUBREAPER = 36
_PR_GET_NO_NEW_PRIVS = 39
_SYS_LANDLOCK_CREATE_RULESET = 444   # the same number on every architecture (generic syscall table)
_SYS_LANDLOCK_RESTRICT_SELF = 446
_LANDLOCK_CREATE_RULESET_VERSION = 1
_SCOPES = 0x1 | 0x2                  # LANDLOCK_SCOPE_ABSTRACT_UNIX_SOCKET | LANDLOCK_SCOPE_SIGNAL
_STATUS = struct.Struct("=i")

_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long


def _subreaper() -> None:
    if _libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_CHILD_SUBREAPER)")


def _scoped_domain_possible() -> bool:
    """A nested Landlock domain per call needs no_new_privs (the sandbox set it) and ABI 6 (scopes)."""
    if _libc.prctl(_PR_GET_NO_NEW_PRIVS, 0, 0, 0, 0) != 1:
        return False
    abi = _libc.syscall(_SYS_LANDLOCK_CREATE_RULESET, None, ctypes.c_size_t(0),
                        ctypes.c_uint32(_LANDLOCK_CREATE_RULESET_VERSION))
    return bool(abi >= 6)


def _own_domain() -> None:
    """Enter a Landlock domain of this call alone: no signal or ptrace outside it, no abstract socket."""
    attr = struct.pack("=QQQ", 0, 0, _SCOPES)
    buf = ctypes.create_string_buffer(attr, len(attr))
    fd = _libc.syscall(_SYS_LANDLOCK_CREATE_RULESET, buf, ctypes.c_size_t(len(attr)), ctypes.c_uint32(0))
    if fd < 0:
        raise OSError(ctypes.get_errno(), "landlock_create_ruleset")
    try:
        if _libc.syscall(_SYS_LANDLOCK_RESTRICT_SELF, ctypes.c_int(fd), ctypes.c_uint32(0)) != 0:
            raise OSError(ctypes.get_errno(), "landlock_restrict_self")
    finally:
        os.close(fd)


class _Children:
    """This process's children, read from /proc in this process's own pid numbers."""

    def __init__(self) -> None:
        self.path = "/proc/thread-self/children"
        # /proc may be the host's (no sandbox): its numbers are then not this namespace's; NSpid translates.
        self.same_ns = os.readlink("/proc/self") == str(os.getpid())

    def __call__(self) -> list[int]:
        try:
            with open(self.path, "rb") as fh:
                listed = [int(p) for p in fh.read().split()]
        except OSError:
            return []
        if self.same_ns:
            return listed
        out = []
        for pid in listed:
            try:
                with open(f"/proc/{pid}/status", "rb") as fh:
                    for line in fh:
                        if line.startswith(b"NSpid:"):
                            out.append(int(line.split()[-1]))
                            break
            except (OSError, ValueError):
                pass
        return out


def _kill_all(children: _Children) -> None:
    """SIGKILL every process beneath this one and reap them: orphans come to us (subreaper), so when we
    have no child left, nothing of the call is left."""
    while True:
        for pid in children():
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        try:
            os.waitpid(-1, 0)
        except ChildProcessError:
            return


def _handler(fds: list[int], scoped: bool) -> None:
    """C: become the call's process and run the worker; never returns."""
    stdin, out, err = fds
    os.dup2(stdin, 0)
    os.dup2(out, 1)
    os.dup2(err, 2)
    for fd in fds:
        os.close(fd)
    code = worker.EXIT_UNUSABLE
    try:
        if scoped:
            _own_domain()
        code = worker.main()
    finally:
        _exit(code)


def _exit(code: int) -> None:
    """What the interpreter's own exit does that a handler can see (non-daemon threads joined, atexit,
    buffers flushed), without tearing the zygote's modules down."""
    threading = sys.modules.get("threading")
    if threading is not None:
        try:
            threading._shutdown()
        except BaseException:  # a thread's error is printed by threading itself
            pass
    import atexit
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except BaseException:
            pass
    os._exit(code)


def _warden(fds: list[int], scoped: bool) -> None:
    """W: run one call in C, wait for its end or the server's kill, leave nothing behind; never returns."""
    code = 0
    try:
        call = socket.socket(fileno=fds[3])
        _subreaper()
        children = _Children()
        pid = os.fork()
        if pid == 0:
            call.close()
            _handler(fds[:3], scoped)
        for fd in fds[:3]:
            os.close(fd)
        call.send(b"S")
        pidfd = os.pidfd_open(pid)
        poller = select.poll()
        poller.register(pidfd, select.POLLIN)
        poller.register(call.fileno(), select.POLLIN)
        done = False
        while not done:
            for fd, _ in poller.poll():
                if fd == pidfd:
                    done = True
                else:  # K, or the server went away: stop the call
                    try:
                        call.recv(16)
                    except OSError:
                        pass
                    os.kill(pid, signal.SIGKILL)
                    poller.unregister(call.fileno())
        _, status = os.waitpid(pid, 0)
        _kill_all(children)
        try:
            call.send(b"X" + _STATUS.pack(os.waitstatus_to_exitcode(status)))
        except OSError:
            pass
    except BaseException as exc:  # a warden that fails says why on the zygote's stderr
        code = 1
        try:
            os.write(2, f"bitong-zygote: call warden failed: {exc!r}\n".encode())
        except OSError:
            pass
    os._exit(code)


def main() -> int:
    ctl = socket.socket(fileno=int(sys.argv[1]))
    idle_s = float(sys.argv[2])
    _subreaper()
    scoped = _scoped_domain_possible()
    children = _Children()
    wake_r, wake_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda _sig, _frame: None)
    wardens: set[int] = set()
    poller = select.poll()
    poller.register(ctl.fileno(), select.POLLIN)
    poller.register(wake_r, select.POLLIN)
    sys.stderr.flush()
    ctl.send(b"R")
    while True:
        events = poller.poll(None if wardens else idle_s * 1000)
        if not events and not wardens:
            return 0  # idle: the server starts another when it needs one
        for fd, _ in events:
            if fd == wake_r:
                while True:
                    try:
                        if not os.read(wake_r, 512):
                            break
                    except BlockingIOError:
                        break
                gone = False
                while True:
                    try:
                        pid, _ = os.waitpid(-1, os.WNOHANG)
                    except ChildProcessError:
                        break
                    if not pid:
                        break
                    wardens.discard(pid)
                    gone = True
                if gone:  # what a dead warden left came to us: it belongs to no call any more
                    for pid in children():
                        if pid not in wardens:
                            try:
                                os.kill(pid, signal.SIGKILL)
                            except ProcessLookupError:
                                pass
                continue
            try:
                msg, fds, _, _ = socket.recv_fds(ctl, 16, 4)
            except InterruptedError:
                continue
            if not msg:
                return 0  # the server closed its end
            if msg != b"C" or len(fds) != 4:
                for extra in fds:
                    os.close(extra)
                continue
            pid = os.fork()
            if pid == 0:
                signal.set_wakeup_fd(-1)
                signal.signal(signal.SIGCHLD, signal.SIG_DFL)
                os.close(wake_r)
                os.close(wake_w)
                ctl.close()
                _warden(fds, scoped)
            wardens.add(pid)
            for extra in fds:
                os.close(extra)


if __name__ == "__main__":
    sys.exit(main())
