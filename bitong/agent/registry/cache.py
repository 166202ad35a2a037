"""The cache agent: keeps the registry snapshot warm while files change.

Seed 000 §6 gives the cache agent the job of keeping the tool index on the
big table so nobody rescans per request. Here it watches the tools roots and
asks the registry to rescan when something changed; the registry re-reads
only what changed (by stat key, then content hash), so a new, changed or
deleted TOOL.hdlp is served within a fraction of a second, without restart.

On Linux the watch is inotify (through ctypes; no dependency), with a short
debounce so an editor's burst of writes makes one rescan. An event names the
folder that changed, and only that folder is looked at again, so a change is
served as fast in a root of 10,000 tools as in one of 40. Anywhere inotify is
unavailable, or when its queue overflows, it falls back to polling (of
everything), and a slow safety rescan of everything runs in any case.

Start-up serves first: ``start(defer=True)`` scans (or loads the state) and
returns; the watches on every tool folder, the state file and the vectors
come after :meth:`CacheAgent.serving`, off the event loop. The state file is
written only when what it holds changed, at most every ``save_every_s``, and
once more at stop.
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
import threading
import time
from collections.abc import Callable

from .snapshot import Registry, Snapshot

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
    """A minimal inotify binding: one fd, watches on the roots and tool folders.

    Watches are added from a worker thread (10,000 folders take a while) while
    the event loop reads events: the maps are changed under a lock.
    """

    def __init__(self, roots: tuple[str, ...]) -> None:
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
        self.roots = frozenset(roots)
        self.watches: dict[int, str] = {}
        self.by_path: dict[str, int] = {}
        self._warned: set[str] = set()
        self._lock = threading.Lock()
        self.closed = False

    def watch(self, path: str) -> bool:
        if path in self.by_path:
            return True
        with self._lock:
            if self.closed:   # stopped while a worker was still adding watches
                return False
            wd = self._add(self.fd, os.fsencode(path), _MASK)
        if wd < 0:
            err = ctypes.get_errno()
            if err != errno.ENOENT and path not in self._warned:  # once, not at every poll
                self._warned.add(path)
                log.warning("cannot watch %s: %s; polling covers it", path, os.strerror(err))
            return False
        with self._lock:
            self._warned.discard(path)
            self.watches[wd] = path
            self.by_path[path] = wd
        return True

    def read(self) -> tuple[set[str], bool, bool]:
        """Drain events: (the tool folders they name, a full rescan is needed, the queue overflowed).

        An event on a root names an entry of it (a tool folder made, moved or
        deleted); one on a tool folder names that folder. A root that goes, an
        overflow or an event of a watch no longer known asks for everything.
        """
        folders: set[str] = set()
        full = overflow = False
        while True:
            try:
                buf = os.read(self.fd, 65536)
            except BlockingIOError:
                return folders, full, overflow
            if not buf:
                return folders, full, overflow
            pos = 0
            while pos < len(buf):
                wd, mask, _cookie, length = _EVENT.unpack_from(buf, pos)
                name = buf[pos + _EVENT.size:pos + _EVENT.size + length].rstrip(b"\0")
                pos += _EVENT.size + length
                if mask & _IN_Q_OVERFLOW:
                    overflow = full = True
                    continue
                with self._lock:
                    path = self.watches.get(wd)
                    if mask & (_IN_IGNORED | _IN_MOVE_SELF) and path is not None:
                        # a moved folder keeps its watch under its new name: drop it, so that
                        # the path is watched again (and polled until then) when it is back
                        del self.watches[wd]
                        self.by_path.pop(path, None)
                        if not mask & _IN_IGNORED:
                            self._rm(self.fd, wd)
                if path is None:
                    # the IN_IGNORED that follows dropping a moved folder's watch says nothing new
                    full = full or not mask & _IN_IGNORED
                elif path in self.roots:
                    if name:
                        folders.add(os.path.join(path, os.fsdecode(name)))
                    else:
                        full = True    # the root itself moved or went
                else:
                    folders.add(path)

    def close(self) -> None:
        with self._lock:
            self.closed = True
            os.close(self.fd)


class CacheAgent:
    """Watches the registry's roots and rescans on change.

    ``start()`` does the first scan before returning, so the service never
    answers from an empty index. With ``defer=True`` the rest (watching every
    tool folder, writing the state, computing vectors) waits for
    :meth:`serving`; otherwise it follows at once. With ``state_path`` the
    first scan starts from the saved snapshot (validated file by file against
    its stat key) and the state is saved whenever what it holds changed.
    ``on_swap`` is called with each new snapshot (logging, metrics).
    """

    def __init__(self, registry: Registry, *, debounce_s: float = 0.05, poll_s: float = 0.5,
                 safety_poll_s: float = 30.0, use_inotify: bool = True, state_path: str | None = None,
                 on_swap: Callable[[Snapshot], None] | None = None, save_every_s: float = 5.0) -> None:
        self.registry = registry
        self.state_path = state_path
        self.debounce_s = debounce_s
        self.poll_s = poll_s
        self.safety_poll_s = safety_poll_s
        self.use_inotify = use_inotify
        self.save_every_s = save_every_s
        self.on_swap = on_swap
        self._inotify: _Inotify | None = None
        self._task: asyncio.Task[None] | None = None
        self._wake = asyncio.Event()
        self._serving = asyncio.Event()
        self._folders: set[str] = set()
        self._full = False
        self._semantic_task: asyncio.Task[None] | None = None
        self._semantic_again = False
        self._semantic_pool: concurrent.futures.ThreadPoolExecutor | None = None
        self._save_task: asyncio.Task[None] | None = None
        self._save_wanted = asyncio.Event()
        self._started = 0

    @property
    def mode(self) -> str:
        return "inotify" if self._inotify is not None else "poll"

    async def start(self, *, defer: bool = False) -> Snapshot:
        if self.use_inotify:
            try:
                self._inotify = _Inotify(self.registry.roots)
            except (OSError, AttributeError) as exc:
                log.info("inotify unavailable (%s); polling every %.2fs", exc, self.poll_s)
        if self._inotify is not None:
            # the roots before the scan: a folder made meanwhile is an event, not a miss
            for root in self.registry.roots:
                self._inotify.watch(root)
            asyncio.get_running_loop().add_reader(self._inotify.fd, self._on_readable)
        seeded = False
        if self.state_path:
            # the files are checked once the server answers (Calls wait for it; see Registry.verify)
            seeded = await asyncio.to_thread(self.registry.load_state, self.state_path, verify=False)
            log.info("registry state %s: %s", self.state_path, "loaded" if seeded else "not used")
        if not seeded:   # a big registry serves on a rough index first (words), refined in the background
            await asyncio.to_thread(self.registry.rescan, None, rough=True)
        snap = self.registry.snapshot
        self._started = snap.generation
        self._task = asyncio.create_task(self._run(), name="bitong-cache-agent")
        if not defer:
            self.serving()
        return snap

    def serving(self) -> None:
        """The server answers: set the watches, write the state, compute vectors (all in the background)."""
        self._serving.set()

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
                self._save()
                if self.on_swap is not None:
                    self.on_swap(self.registry.snapshot)
            if not self._semantic_again:
                index = self.registry.snapshot.index
                # the typo map too, here rather than at the first request with a typo (updates keep it)
                await loop.run_in_executor(self._semantic_pool, index.prepare_typos)
                log.info("matching ready: %d tools, %s", len(index),
                         "by meaning and words" if index.semantic_ready else "by words")
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
        for task in (self._task, self._save_task):
            if task is not None:
                task.cancel()
                try:
                    await task
                except asyncio.CancelledError:
                    pass
        self._task = self._save_task = None
        if self._inotify is not None:
            asyncio.get_running_loop().remove_reader(self._inotify.fd)
            self._inotify.close()
            self._inotify = None
        if self._serving.is_set():   # what changed since the last save is not lost (before serving: nothing is)
            await self._write()

    def _rewatch(self) -> None:
        """Watch every root and every tool folder in it (new folders appear as events). In a worker
        thread: 10,000 folders are 10,000 system calls."""
        ino = self._inotify
        if ino is None:
            return
        for root in self.registry.roots:
            if not ino.watch(root):
                continue
            try:
                entries = os.scandir(root)
            except OSError:
                continue
            with entries:
                for entry in entries:
                    if self._inotify is not ino:   # stopped meanwhile: its descriptor is closed
                        return
                    if not entry.name.startswith(".") and entry.path not in ino.by_path \
                            and entry.is_dir(follow_symlinks=True):
                        ino.watch(entry.path)

    def _on_readable(self) -> None:
        if self._inotify is None:
            return
        folders, full, overflow = self._inotify.read()
        if overflow:
            log.warning("inotify queue overflowed; rescanning everything")
        self._folders |= folders
        self._full = self._full or full
        if folders or full:
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
        await self._serving.wait()
        if not self.registry.verified:   # restarted from a state: the files as they are now, first
            try:
                snap = await loop.run_in_executor(None, self.registry.verify)
                if self.on_swap is not None and snap.generation != self._started:
                    self.on_swap(snap)
                self._started = snap.generation
            except Exception:
                log.exception("checking the files against the state failed; Calls check them again")
        if self._inotify is not None:
            await asyncio.to_thread(self._rewatch)
            log.info("watching %d folders", len(self._inotify.by_path))
            # a change made before its folder was watched: one full rescan sees it (the folders
            # events named meanwhile stay pending: the loop watches any the scan of the root missed)
            try:
                snap = await loop.run_in_executor(None, self.registry.rescan)
                if self.on_swap is not None and snap.generation != self._started:
                    self.on_swap(snap)
            except Exception:
                log.exception("rescan failed; the previous snapshot keeps serving")
        self._save()
        self._semantics()
        full = False
        while True:
            if not full:
                timeout = self._interval()
                held = self.registry.held_due()   # a change the reload cooldown holds: rescan it when it may apply
                if held is not None:
                    timeout = min(timeout, max(0.0, held[0] - time.monotonic()) + 0.005)
                try:
                    await asyncio.wait_for(self._wake.wait(), timeout=timeout)
                    await asyncio.sleep(self.debounce_s)  # coalesce an editor's burst of writes
                except TimeoutError:
                    if held is not None and time.monotonic() >= held[0]:
                        self._folders.update(held[1])
                    else:
                        full = True   # the safety rescan, or the poll
                self._wake.clear()
            folders, self._folders = self._folders, set()
            full = full or self._full or self._inotify is None
            self._full = False
            if self._inotify is not None:
                if full:
                    await asyncio.to_thread(self._rewatch)
                else:
                    for folder in folders:   # a folder just made: its own changes are its watch's events
                        if os.path.isdir(folder) and not os.path.basename(folder).startswith("."):
                            self._inotify.watch(folder)
            before = self.registry.snapshot
            try:
                snap = await loop.run_in_executor(None, self.registry.rescan, None if full else folders)
            except Exception:  # a bug must not stop the watch; the old snapshot keeps serving
                log.exception("rescan failed; the previous snapshot keeps serving")
                self._folders |= folders   # not done: looked at again with the next change
                self._full = self._full or full
                full = False
                continue
            full = False
            if snap is not before:
                self._save()
                if self.on_swap is not None:
                    self.on_swap(snap)
                self._semantics()

    def swapped(self, snap: Snapshot) -> None:
        """A snapshot made outside the watch (a rollback, a repository commit): save it, tell on_swap, index it."""
        self._save()
        if self.on_swap is not None:
            self.on_swap(snap)
        self._semantics()

    def _save(self) -> None:
        """Ask for the state to be written: by one task, ``save_every_s`` after the first change asked
        for it (10,000 tools take a while to write; a crash meanwhile costs a slower restart, no more)."""
        if not self.state_path:
            return
        self._save_wanted.set()
        if self._save_task is None or self._save_task.done():
            self._save_task = asyncio.create_task(self._saver(), name="bitong-state-writer")

    async def _saver(self) -> None:
        while True:
            await self._save_wanted.wait()
            await asyncio.sleep(self.save_every_s)   # the changes of a busy moment make one write
            self._save_wanted.clear()
            if self.registry.rough:   # not yet: the full analyses are what a restart should find (they ask again)
                continue
            await self._write()

    async def _write(self) -> None:
        if not self.state_path or not self.registry.state_dirty:
            return
        try:
            await asyncio.to_thread(self.registry.save_state, self.state_path)
        except OSError as exc:  # a cache that cannot be written costs a slower restart, nothing more
            log.warning("cannot write registry state %s: %s", self.state_path, exc)
