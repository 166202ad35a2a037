"""The cache agent: keeps the registry snapshot warm while files change.

Seed 000 §6 gives the cache agent the job of keeping the tool index on the
big table so nobody rescans per request. Here it watches the tools roots and
asks the registry to rescan when something changed; the registry re-reads
only what changed (by stat key, then content hash), so a new, changed or
deleted TOOL.hdlp is served within a fraction of a second, without restart.

On Linux the watch is inotify (through ctypes; no dependency), with a short
debounce so an editor's burst of writes makes one rescan. Anywhere inotify
is unavailable, or when its queue overflows, it falls back to polling, and a
slow safety poll runs in any case.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import ctypes
import ctypes.util
import errno
import logging
import os
import struct
from collections.abc import Callable

from .registry import Registry, Snapshot

__all__ = ["CacheAgent"]

log = logging.getLogger("bitong.cache")

_IN_MODIFY = 0x002
_IN_ATTRIB = 0x004
_IN_CLOSE_WRITE = 0x008
_IN_MOVED_FROM = 0x040
_IN_MOVED_TO = 0x080
_IN_CREATE = 0x100
_IN_DELETE = 0x200
_IN_DELETE_SELF = 0x400
_IN_MOVE_SELF = 0x800
_IN_Q_OVERFLOW = 0x4000
_IN_IGNORED = 0x8000
_IN_ISDIR = 0x40000000
_IN_NONBLOCK = 0o4000
_IN_CLOEXEC = 0o2000000
_MASK = (_IN_MODIFY | _IN_ATTRIB | _IN_CLOSE_WRITE | _IN_MOVED_FROM | _IN_MOVED_TO | _IN_CREATE
         | _IN_DELETE | _IN_DELETE_SELF | _IN_MOVE_SELF)
_EVENT = struct.Struct("iIII")


class _Inotify:
    """A minimal inotify binding: one fd, watches on the roots and tool folders."""

    def __init__(self) -> None:
        name = ctypes.util.find_library("c")
        libc = ctypes.CDLL(name or "libc.so.6", use_errno=True)
        self._add = libc.inotify_add_watch
        self._add.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_uint32]
        self._rm = libc.inotify_rm_watch
        self._rm.argtypes = [ctypes.c_int, ctypes.c_int]
        fd = libc.inotify_init1(_IN_NONBLOCK | _IN_CLOEXEC)
        if fd < 0:
            raise OSError(ctypes.get_errno(), "inotify_init1 failed")
        self.fd = fd
        self.watches: dict[int, str] = {}
        self.by_path: dict[str, int] = {}
        self._warned: set[str] = set()

    def watch(self, path: str) -> bool:
        if path in self.by_path:
            return True
        wd = self._add(self.fd, os.fsencode(path), _MASK)
        if wd < 0:
            err = ctypes.get_errno()
            if err != errno.ENOENT and path not in self._warned:  # once, not at every poll
                self._warned.add(path)
                log.warning("cannot watch %s: %s; polling covers it", path, os.strerror(err))
            return False
        self._warned.discard(path)
        self.watches[wd] = path
        self.by_path[path] = wd
        return True

    def read(self) -> tuple[bool, bool]:
        """Drain events; return (something changed, the queue overflowed)."""
        changed = overflow = False
        while True:
            try:
                buf = os.read(self.fd, 65536)
            except BlockingIOError:
                return changed, overflow
            if not buf:
                return changed, overflow
            pos = 0
            while pos < len(buf):
                wd, mask, _cookie, length = _EVENT.unpack_from(buf, pos)
                pos += _EVENT.size + length
                if mask & _IN_Q_OVERFLOW:
                    overflow = True
                if mask & (_IN_IGNORED | _IN_MOVE_SELF):
                    # a moved folder keeps its watch under its new name: drop it, so that
                    # the path is watched again (and polled until then) when it is back
                    path = self.watches.pop(wd, None)
                    if path is not None:
                        self.by_path.pop(path, None)
                        if not mask & _IN_IGNORED:
                            self._rm(self.fd, wd)
                changed = True

    def close(self) -> None:
        os.close(self.fd)


class CacheAgent:
    """Watches the registry's roots and rescans on change.

    ``start()`` does the first scan before returning, so the service never
    answers from an empty index; then the watch runs on the event loop. With
    ``state_path`` the first scan starts from the saved snapshot (validated
    file by file against its stat key) and every new snapshot is saved.
    ``on_swap`` is called with each new snapshot (logging, metrics).
    """

    def __init__(self, registry: Registry, *, debounce_s: float = 0.05, poll_s: float = 0.5,
                 safety_poll_s: float = 30.0, use_inotify: bool = True, state_path: str | None = None,
                 on_swap: Callable[[Snapshot], None] | None = None) -> None:
        self.registry = registry
        self.state_path = state_path
        self.debounce_s = debounce_s
        self.poll_s = poll_s
        self.safety_poll_s = safety_poll_s
        self.use_inotify = use_inotify
        self.on_swap = on_swap
        self._inotify: _Inotify | None = None
        self._task: asyncio.Task[None] | None = None
        self._wake = asyncio.Event()
        self._semantic_task: asyncio.Task[None] | None = None
        self._semantic_again = False
        self._semantic_pool: concurrent.futures.ThreadPoolExecutor | None = None

    @property
    def mode(self) -> str:
        return "inotify" if self._inotify is not None else "poll"

    async def start(self) -> Snapshot:
        seeded = False
        if self.state_path:
            seeded = await asyncio.to_thread(self.registry.load_state, self.state_path)
            log.info("registry state %s: %s", self.state_path, "loaded" if seeded else "not used")
        if not seeded:
            await asyncio.to_thread(self.registry.rescan)
        snap = self.registry.snapshot
        await self._save()
        if self.use_inotify:
            try:
                self._inotify = _Inotify()
            except (OSError, AttributeError) as exc:
                log.info("inotify unavailable (%s); polling every %.2fs", exc, self.poll_s)
        if self._inotify is not None:
            self._rewatch()
            asyncio.get_running_loop().add_reader(self._inotify.fd, self._on_readable)
        self._task = asyncio.create_task(self._run(), name="bitong-cache-agent")
        self._semantics()
        return snap

    def _semantics(self) -> None:
        """Tool vectors and calibration in the background: the index serves lexically until they are in."""
        if self._semantic_task is not None and not self._semantic_task.done():
            self._semantic_again = True
            return
        self._semantic_task = asyncio.create_task(self._run_semantics(), name="bitong-semantics")

    async def _run_semantics(self) -> None:
        loop = asyncio.get_running_loop()
        if self._semantic_pool is None:
            self._semantic_pool = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="bitong-vectors")
        while True:
            self._semantic_again = False
            try:
                changed = await loop.run_in_executor(self._semantic_pool, self.registry.refresh_semantics)
            except Exception:  # the lexical index keeps serving
                log.exception("computing tool vectors failed; matching stays lexical for now")
                return
            if changed:
                await self._save()
                if self.on_swap is not None:
                    self.on_swap(self.registry.snapshot)
            if not self._semantic_again:
                return

    async def stop(self) -> None:
        if self._semantic_task is not None:
            self._semantic_task.cancel()
            try:
                await self._semantic_task
            except asyncio.CancelledError:
                pass
            self._semantic_task = None
        if self._semantic_pool is not None:  # its thread ends once a step under way is done
            self._semantic_pool.shutdown(wait=False, cancel_futures=True)
            self._semantic_pool = None
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass
            self._task = None
        if self._inotify is not None:
            asyncio.get_running_loop().remove_reader(self._inotify.fd)
            self._inotify.close()
            self._inotify = None

    def _rewatch(self) -> None:
        """Watch every root and every tool folder in it (new folders appear as events)."""
        ino = self._inotify
        assert ino is not None
        for root in self.registry.roots:
            if not ino.watch(root):
                continue
            try:
                entries = os.scandir(root)
            except OSError:
                continue
            with entries:
                for entry in entries:
                    if entry.is_dir(follow_symlinks=True) and not entry.name.startswith("."):
                        ino.watch(entry.path)

    def _on_readable(self) -> None:
        assert self._inotify is not None
        changed, overflow = self._inotify.read()
        if overflow:
            log.warning("inotify queue overflowed; rescanning everything")
        if changed or overflow:
            self._wake.set()

    def _interval(self) -> float:
        """How long to wait for an event: the slow safety poll while inotify sees
        every root; the fast poll otherwise, so a root that was renamed, deleted
        or made unreadable is picked up soon after it is back (no event says so:
        nothing watches its parent)."""
        ino = self._inotify
        if (ino is not None and not self.registry.snapshot.lost_roots
                and all(root in ino.by_path for root in self.registry.roots)):
            return self.safety_poll_s
        return self.poll_s

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            interval = self._interval()
            try:
                await asyncio.wait_for(self._wake.wait(), timeout=interval)
                await asyncio.sleep(self.debounce_s)  # coalesce an editor's burst of writes
            except TimeoutError:
                pass
            self._wake.clear()
            if self._inotify is not None:
                self._rewatch()
            before = self.registry.snapshot
            try:
                snap = await loop.run_in_executor(None, self.registry.rescan)
            except Exception:  # a bug must not stop the watch; the old snapshot keeps serving
                log.exception("rescan failed; the previous snapshot keeps serving")
                continue
            if snap is not before:
                await self._save()
                if self.on_swap is not None:
                    self.on_swap(snap)
                self._semantics()

    async def _save(self) -> None:
        if not self.state_path:
            return
        try:
            await asyncio.to_thread(self.registry.save_state, self.state_path)
        except OSError as exc:  # a cache that cannot be written costs a slower restart, nothing more
            log.warning("cannot write registry state %s: %s", self.state_path, exc)
