"""CPU-bound work of a big registry shared over every core this process may use.

A cold start of 10,000 tools spends about 0.4 ms a file reading, parsing and
indexing it by words, then about 0.7 ms a tool analysing it in full, one
after another, with a second core idle. :func:`forked_map` gives each extra
core a share in a forked child (the parser, the matcher and the loaded code
are already there: nothing is imported again), while this process does its
own share; each child sends its results back through a pipe, marshalled.

A child only computes: it takes no lock, logs nothing, closes every file
descriptor it inherited but its pipe (a socket the server closes meanwhile
is closed for its peer at once), dies of SIGTERM and SIGINT as a plain
process does, and is killed when the server dies (PR_SET_PDEATHSIG), so
forking from the threaded server is safe here and nothing outlives it.
Whatever goes wrong with a child (it cannot start, dies, sends less than it
should) costs only time: its share is done again in this process.
"""

from __future__ import annotations

import gc
import marshal
import os
import resource
import signal
from collections.abc import Callable, Sequence
from typing import TypeVar

__all__ = ["FROM", "cores", "forked_map"]

FROM = 2000
"""Files (or tools) a first scan (or analysis) has before it is shared out: below this, a fork costs
more than it saves."""

_MAX_CORES = 4
_PR_SET_PDEATHSIG = 1


def _fd_limit() -> int:
    """One past the highest file descriptor this process can hold (its soft limit; unlimited: 2**20)."""
    soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    return soft if 0 < soft <= 1 << 20 else 1 << 20


A = TypeVar("A")
R = TypeVar("R")


def cores() -> int:
    """The cores this process may run on (its CPU affinity), at most :data:`_MAX_CORES`."""
    try:
        n = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        n = os.cpu_count() or 1
    return max(1, min(n, _MAX_CORES))


def forked_map(fn: Callable[[A], R], items: Sequence[A], encode: Callable[[R], object],
               decode: Callable[[object], R], workers: int | None = None) -> list[R]:
    """``[fn(x) for x in items]``, the work shared with ``workers - 1`` forked children.

    ``encode`` turns a child's result into what :mod:`marshal` writes (plain
    data), ``decode`` turns it back; ``fn`` must not log or take a lock another
    thread may hold. Results come back in the order of ``items``.
    """
    n = cores() if workers is None else workers
    if n < 2 or len(items) < 2 or not hasattr(os, "fork"):
        return [fn(x) for x in items]
    bounds = [len(items) * i // n for i in range(n + 1)]
    children: list[tuple[int, int, int, int]] = []   # (pid, read fd, first, end)
    for i in range(1, n):
        started = _fork(fn, items, bounds[i], bounds[i + 1], encode)
        if started is not None:
            children.append((*started, bounds[i], bounds[i + 1]))
    mine = bounds[1] if children else len(items)
    try:
        out = [fn(x) for x in items[:mine]]
        done = mine
        while children:
            pid, fd, first, end = children[0]
            results = _collect(pid, fd, end - first)
            del children[0]
            if first > done:   # a child before this one failed: its share, here
                out.extend(fn(x) for x in items[done:first])
            if results is not None:
                out.extend(decode(r) for r in results)
            else:
                out.extend(fn(x) for x in items[first:end])
            done = end
        out.extend(fn(x) for x in items[done:])
        return out
    finally:
        for pid, fd, _, _ in children:   # what failed here ends the children too: none is left behind
            _abandon(pid, fd)


def _fork(fn: Callable[[A], R], items: Sequence[A], first: int, end: int,
          encode: Callable[[R], object]) -> tuple[int, int] | None:
    """A child computing ``items[first:end]``; (its pid, the pipe's read end), or None when none could start."""
    try:
        rfd, wfd = os.pipe()
    except OSError:
        return None
    parent = os.getpid()
    try:
        pid = os.fork()
    except OSError:
        os.close(rfd)
        os.close(wfd)
        return None
    if pid == 0:   # the child: compute, write, and leave without running anything of the parent's
        status = 1
        try:
            _die_with(parent)
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            signal.signal(signal.SIGINT, signal.SIG_DFL)
            os.closerange(3, wfd)
            os.closerange(wfd + 1, _fd_limit())
            gc.disable()   # a collection would touch (and so copy) every page of the parent's heap
            data = marshal.dumps([encode(fn(x)) for x in items[first:end]], 4)
            view = memoryview(data)
            while view:
                view = view[os.write(wfd, view):]
            status = 0
        except BaseException:   # whatever it is, the parent does this share itself
            pass
        finally:
            os._exit(status)
    os.close(wfd)
    return pid, rfd


def _die_with(parent: int) -> None:
    """In the child: be killed when the process that forked it dies (Linux), and leave at once if it already has.

    The parent waits for its children in the thread that forked them, so that thread outlives them."""
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):   # not Linux: the pipe's EPIPE ends the child when it writes
        pass
    if os.getppid() != parent:
        os._exit(1)


def _abandon(pid: int, fd: int) -> None:
    """Kill a child whose results will not be read, and reap it."""
    os.close(fd)
    try:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
    except (ProcessLookupError, ChildProcessError):
        pass


def _collect(pid: int, fd: int, expected: int) -> list[object] | None:
    """A child's results, or None when it did not send all of them."""
    chunks: list[bytes] = []
    try:
        while True:
            chunk = os.read(fd, 1 << 20)
            if not chunk:
                break
            chunks.append(chunk)
    except OSError:
        chunks = []
    finally:
        os.close(fd)
        try:
            _, status = os.waitpid(pid, 0)
        except ChildProcessError:
            status = 0
    if status != 0 or not chunks:
        return None
    try:
        results = marshal.loads(b"".join(chunks))
    except (EOFError, ValueError, TypeError):
        return None
    return results if isinstance(results, list) and len(results) == expected else None
