"""The python executor's zygote: a clean interpreter that forks one fresh process per handler call.

Run by :mod:`bitong.agent.calling.executors.zygote` as ``python -I -S -B zygote_main.py CTLFD
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

Per call, one child, C: a session of its own, a child subreaper (what its
processes orphan, double forks and setsid daemons included, stays beneath
it while it runs), fds 0/1/2 the call's and no other fd of the zygote's,
and, where the kernel has Landlock scopes (ABI 6), a Landlock domain of its
own: it cannot signal or ptrace the zygote or another call. It runs
handler_worker.main. The zygote sends ``S`` on the call's socket once C
exists; ``K`` (or EOF) there from the server (its deadline, cancellation)
and C is SIGKILLed. The zygote is a subreaper too: when C ends, whatever C
left comes to the zygote, which SIGKILLs every child that is not a running
call and reaps it, and only once none is left sends ``X`` and C's exit code
(signed 32 bits, negative for a signal, as Popen reports it). So "the
server read X" means "nothing of the call is left", as "_reaper exited"
does on the one-shot path.
"""

import ctypes
import gc
# What a handler call needs, imported once here instead of in every child (json alone costs a fresh
# interpreter ~19 ms, traceback a failing call a few more). Each child still starts from this same state.
import json
import os
import select
import signal
import socket
import struct
import sys
import traceback
import types

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
_MAX_FD = 1 << 20

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
        with open(self.path, "rb") as fh:
            listed = [int(p) for p in fh.read().split()]
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


def _handler(fds: list[int], scoped: bool) -> None:
    """C: become the call's process and run the worker; never returns."""
    code = 1
    try:
        os.setsid()
        _subreaper()
        stdin, out, err = fds
        os.dup2(stdin, 0)
        os.dup2(out, 1)
        os.dup2(err, 2)
        os.closerange(3, _MAX_FD)   # the zygote's sockets, other calls' sockets: none of them is this call's
        if scoped:
            _own_domain()
        sys.argv = [worker.__file__]   # as the one-shot worker's
        code = worker.main()
    except BaseException:
        traceback.print_exc()
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


def _warm() -> None:
    """Do once here what every call does first (the compiler's and json's first use cost ~3 ms a child)."""
    source = b"def run(a, b=1, *, c=2):\n    return {'ok': [a, b, c], 'text': '\\u00e9'}\n"
    module = types.ModuleType("handler")
    exec(compile(source, "<warm>", "exec"), module.__dict__)
    params = json.loads('{"a": 1, "c": "x\\u00e9"}')
    worker._signature_problem(module.run, params, "run")
    json.dumps(module.run(**params), ensure_ascii=False, allow_nan=False).encode("utf-8")


class _Call:
    __slots__ = ("sock", "code")

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.code: int | None = None


def main() -> int:
    ctl = socket.socket(fileno=int(sys.argv[1]))
    idle_s = float(sys.argv[2])
    _subreaper()
    scoped = _scoped_domain_possible()
    children = _Children()
    wake_r, wake_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda _sig, _frame: None)
    running: dict[int, _Call] = {}      # C's pid -> its call
    by_fd: dict[int, int] = {}          # a call socket's fd -> C's pid
    ended: list[_Call] = []             # C exited; reported once nothing of any ended call is left
    poller = select.poll()
    poller.register(ctl.fileno(), select.POLLIN)
    poller.register(wake_r, select.POLLIN)
    _warm()
    gc.collect()
    gc.freeze()   # what the zygote holds stays out of the children's collections (fewer copied pages)
    sys.stderr.flush()
    ctl.send(b"R")
    while True:
        events = poller.poll(None if running or ended else idle_s * 1000)
        if not events and not running and not ended:
            return 0  # idle: the server starts another when it needs one
        for fd, _ in events:
            if fd == wake_r:
                try:
                    while os.read(wake_r, 512):
                        pass
                except BlockingIOError:
                    pass
            elif fd == ctl.fileno():
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
                sys.stderr.flush()
                pid = os.fork()
                if pid == 0:
                    signal.set_wakeup_fd(-1)
                    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
                    _handler(fds[:3], scoped)
                for extra in fds[:3]:
                    os.close(extra)
                sock = socket.socket(fileno=fds[3])
                sock.setblocking(False)
                running[pid] = _Call(sock)
                by_fd[fds[3]] = pid
                poller.register(fds[3], select.POLLIN)
                try:
                    sock.send(b"S")
                except OSError:
                    pass
            else:  # K, or the server went away: stop that call
                pid = by_fd.pop(fd)
                poller.unregister(fd)
                os.kill(pid, signal.SIGKILL)
        _reap(running, by_fd, ended, poller)
        if ended:
            _sweep(running, ended, children)


def _reap(running: dict[int, _Call], by_fd: dict[int, int], ended: list[_Call], poller: select.poll) -> None:
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if not pid:
            return
        call = running.pop(pid, None)
        if call is not None:
            call.code = os.waitstatus_to_exitcode(status)
            ended.append(call)
            fd = call.sock.fileno()
            if by_fd.pop(fd, None) is not None:
                poller.unregister(fd)


def _sweep(running: dict[int, _Call], ended: list[_Call], children: _Children) -> None:
    """Kill what ended calls left (it came to us: only running calls are our children by right); report the
    ended calls once none is left. Each leftover's death wakes us again (SIGCHLD) for the next sweep."""
    try:
        left = [pid for pid in children() if pid not in running]
    except OSError:  # no /proc to read: the reap that woke us is all we can know
        left = []
    for pid in left:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    if left:
        return
    for call in ended:
        try:
            call.sock.send(b"X" + _STATUS.pack(call.code or 0))
        except OSError:
            pass
        call.sock.close()
    ended.clear()


if __name__ == "__main__":
    sys.exit(main())
