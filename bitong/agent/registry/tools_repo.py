"""A git-synced tools repository: clone, fetch on a period or a push, swap one commit in at a time.

Seed 000 §5 keeps the tools in a repository (``native-repo/tools/``), not a
local folder. The system ``git`` does the transport (file://, ssh, https,
git://: whatever it speaks, with its own credential setup), so nothing here
knows a protocol. Layout under the repository folder::

    mirror.git/           a bare clone; fetches land on refs/bitong/fetched
    commits/<sha>/        one commit's files (git archive), never changed after
    current -> commits/<sha>   the commit serving; the registry's root is current/<subdir>

A new commit is extracted beside the serving one, then ``current`` is
replaced by one rename(2): the registry's next scan sees the old commit or the
new one, never a mix, and it scans it at once, so every tool the commit
changed is swapped in one snapshot. Whatever goes wrong (the network, auth, a
force-push that rewrote what serves, a commit without the tools folder) keeps
the last good commit serving and says why in :attr:`ToolsRepo.status`.
A broken file in a new commit is the registry's business: its last good
definition keeps serving, every other tool of the commit is swapped in.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import io
import logging
import os
import shutil
import subprocess
import tarfile
import threading
import time
from collections.abc import Callable

from .snapshot import Registry, Snapshot

__all__ = ["ToolsRepo", "RepoSync", "RepoStatus", "RepoError", "GIT_TIMEOUT_S"]

log = logging.getLogger("bitong.repo")

GIT_TIMEOUT_S = 120.0
_FETCHED = "refs/bitong/fetched"
_KEEP_COMMITS = 2   # the serving one and the one before (a call in flight may still read its files)


class RepoError(Exception):
    """A git step failed; the message is git's own stderr, with what was being done."""


@dataclasses.dataclass(frozen=True)
class RepoStatus:
    url: str
    branch: str
    subdir: str
    commit: str = ""              # serving
    fetched_unix_ms: int = 0      # the last fetch that worked
    applied_unix_ms: int = 0      # when the serving commit was swapped in
    error: str = ""               # why the last fetch or apply failed ("" once one works again)


class ToolsRepo:
    """The repository's side: git steps and the atomic swap. Blocking: call it from a worker thread."""

    def __init__(self, url: str, folder: str, *, branch: str = "", subdir: str = "tools",
                 git: str = "git") -> None:
        if not url:
            raise ValueError("--tools-repo needs a repository URL")
        subdir = subdir.strip("/")
        if subdir.startswith("..") or "/../" in f"/{subdir}/":
            raise ValueError(f"--subdir must be a folder inside the repository, not {subdir!r}")
        self.url = url
        self.folder = os.path.abspath(folder)
        self.branch = branch
        self.subdir = subdir
        self.git = git
        self.mirror = os.path.join(self.folder, "mirror.git")
        self.current = os.path.join(self.folder, "current")
        self._lock = threading.Lock()   # one sync at a time (the period and a webhook may meet)
        self.status = RepoStatus(url, branch, subdir, commit=self._serving())

    @property
    def root(self) -> str:
        """The tools root the registry scans: the serving commit's subdir, through the ``current`` link."""
        return os.path.join(self.current, self.subdir) if self.subdir else self.current

    def _serving(self) -> str:
        try:
            return os.path.basename(os.readlink(self.current))
        except OSError:
            return ""

    def _run(self, *args: str, what: str, capture: bool = True) -> bytes:
        env = dict(os.environ, GIT_TERMINAL_PROMPT="0", GIT_ASKPASS="true", LC_ALL="C")
        try:
            done = subprocess.run([self.git, *args], capture_output=True, env=env, timeout=GIT_TIMEOUT_S,
                                  stdin=subprocess.DEVNULL, check=False)
        except FileNotFoundError:
            raise RepoError(f"{what}: the git program ({self.git}) is not installed") from None
        except subprocess.TimeoutExpired:
            raise RepoError(f"{what}: git did not finish in {GIT_TIMEOUT_S:g}s") from None
        if done.returncode != 0:
            err = done.stderr.decode("utf-8", "replace").strip() or f"git exited {done.returncode}"
            raise RepoError(f"{what}: {err}")
        return done.stdout

    def _git(self, *args: str, what: str) -> bytes:
        return self._run("--git-dir", self.mirror, *args, what=what)

    # ------------------------------------------------------------ sync

    def sync(self) -> bool:
        """Fetch and, if the branch moved forward, swap its commit in. True when a new commit now serves.

        Never raises for git's or the network's failures: they are :attr:`status`'s
        ``error``, and the last good commit keeps serving.
        """
        with self._lock:
            try:
                target = self._fetch()
                now = time.time_ns() // 1_000_000
                self.status = dataclasses.replace(self.status, fetched_unix_ms=now, branch=self.branch)
                serving = self._serving()
                if target == serving:
                    self._ok()
                    return False
                if serving and not self._descends(serving, target):
                    raise RepoError(f"branch {self.branch} at {target[:12]} does not contain the serving commit "
                                    f"{serving[:12]} (history was rewritten, a force-push?); keeping "
                                    f"{serving[:12]} until a commit that descends from it arrives or the "
                                    f"repository folder {self.folder} is removed")
                self._apply(target)
                return True
            except RepoError as exc:
                if exc.args[0] != self.status.error:
                    log.error("tools repository %s: %s; serving commit %s", self.url, exc,
                              self.status.commit[:12] or "(none)")
                self.status = dataclasses.replace(self.status, error=str(exc))
                return False

    def _ok(self) -> None:
        if self.status.error:
            log.info("tools repository %s: fetch works again; serving commit %s", self.url, self.status.commit[:12])
            self.status = dataclasses.replace(self.status, error="")

    def _fetch(self) -> str:
        os.makedirs(self.folder, exist_ok=True)
        if not os.path.isdir(self.mirror):
            tmp = f"{self.mirror}.{os.getpid()}.tmp"
            shutil.rmtree(tmp, ignore_errors=True)
            self._run("clone", "--bare", "--quiet", "--", self.url, tmp, what=f"cloning {self.url}")
            os.replace(tmp, self.mirror)
        if not self.branch:
            head = self._git("symbolic-ref", "--short", "HEAD", what="reading the default branch").decode()
            self.branch = head.strip()
        self._git("fetch", "--quiet", "--force", "--no-tags", "--", self.url,
                  f"+refs/heads/{self.branch}:{_FETCHED}", what=f"fetching branch {self.branch}")
        return self._git("rev-parse", "--verify", f"{_FETCHED}^{{commit}}",
                         what="reading the fetched commit").decode().strip()

    def _descends(self, ancestor: str, commit: str) -> bool:
        env = dict(os.environ, LC_ALL="C")
        done = subprocess.run([self.git, "--git-dir", self.mirror, "merge-base", "--is-ancestor", ancestor, commit],
                              capture_output=True, env=env, timeout=GIT_TIMEOUT_S, check=False)
        if done.returncode not in (0, 1):
            raise RepoError(f"comparing {ancestor[:12]} with {commit[:12]}: "
                            f"{done.stderr.decode('utf-8', 'replace').strip()}")
        return done.returncode == 0

    def _apply(self, commit: str) -> None:
        """Extract ``commit`` beside the serving one, then point ``current`` at it with one rename."""
        commits = os.path.join(self.folder, "commits")
        final = os.path.join(commits, commit)
        if not os.path.isdir(final):
            what = f"reading {self.subdir or 'the files'} of commit {commit[:12]}"
            listed = self._git("ls-tree", "--name-only", commit, "--", self.subdir or ".", what=what)
            if self.subdir and not listed.strip():
                raise RepoError(f"commit {commit[:12]} has no folder {self.subdir}; keeping the serving commit")
            data = self._git("archive", "--format=tar", commit, *([self.subdir] if self.subdir else []), what=what)
            tmp = f"{final}.{os.getpid()}.tmp"
            shutil.rmtree(tmp, ignore_errors=True)
            os.makedirs(tmp)
            try:
                with tarfile.open(fileobj=io.BytesIO(data)) as archive:
                    archive.extractall(tmp, filter="data")   # no links or paths out of the folder
                os.replace(tmp, final)
            except BaseException:
                shutil.rmtree(tmp, ignore_errors=True)
                raise
        link = f"{self.current}.{os.getpid()}.tmp"
        with contextlib.suppress(FileNotFoundError):
            os.unlink(link)
        os.symlink(os.path.join("commits", commit), link)
        os.replace(link, self.current)   # the swap: one rename
        previous = self.status.commit
        self.status = dataclasses.replace(self.status, commit=commit, applied_unix_ms=time.time_ns() // 1_000_000,
                                          error="")
        log.info("tools repository %s: commit %s serves (was %s)", self.url, commit[:12], previous[:12] or "none")
        self._prune(commits, {commit, previous})

    @staticmethod
    def _prune(commits: str, keep: set[str]) -> None:
        for name in os.listdir(commits):
            if name not in keep and len(keep) >= _KEEP_COMMITS:
                shutil.rmtree(os.path.join(commits, name), ignore_errors=True)

    def commit_of(self, path: str) -> str:
        """The commit a tool file under :attr:`root` is served from (what ``current`` points at)."""
        return self.status.commit if path.startswith(self.current + os.sep) else ""


class RepoSync:
    """Runs :class:`ToolsRepo` for a served registry: a fetch every ``interval_s`` and on every push
    (:meth:`trigger`, thread-safe); a new commit is one full rescan, the cooldown bypassed, one snapshot."""

    def __init__(self, repo: ToolsRepo, registry: Registry, *, interval_s: float = 60.0,
                 on_swap: Callable[[Snapshot], None] | None = None) -> None:
        if not interval_s > 0:
            raise ValueError(f"--interval must be more than 0 seconds, got {interval_s}")
        self.repo = repo
        self.registry = registry
        self.interval_s = interval_s
        self.on_swap = on_swap
        self.syncs = 0   # fetches done (a test awaits them)
        self._wake: asyncio.Event | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._task: asyncio.Task[None] | None = None
        self._synced = asyncio.Condition()
        registry.origin = repo.commit_of

    async def first(self) -> None:
        """Before serving: the commit a previous run left serves as it is; without one, clone now."""
        if not self.repo.status.commit:
            await asyncio.to_thread(self.repo.sync)

    def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._wake = asyncio.Event()
        self._task = asyncio.create_task(self._run(), name="bitong-tools-repo")

    def trigger(self) -> None:
        """Fetch now (a push arrived); callable from any thread."""
        if self._loop is not None and self._wake is not None:
            self._loop.call_soon_threadsafe(self._wake.set)

    async def wait_syncs(self, count: int) -> None:
        """Wait until ``count`` fetches (and their swaps) are done."""
        async with self._synced:
            await self._synced.wait_for(lambda: self.syncs >= count)

    async def _run(self) -> None:
        assert self._wake is not None
        first = True
        while True:
            if not first:
                try:
                    await asyncio.wait_for(self._wake.wait(), timeout=self.interval_s)
                except TimeoutError:
                    pass
            first = False
            self._wake.clear()
            try:
                changed = await asyncio.to_thread(self.repo.sync)
                if changed:
                    snap = await asyncio.to_thread(self.registry.rescan, whole=True)
                    if self.on_swap is not None:
                        self.on_swap(snap)
            except Exception:   # a bug must not stop the sync: the serving commit stays
                log.exception("tools repository sync failed; the serving commit stays")
            async with self._synced:
                self.syncs += 1
                self._synced.notify_all()

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
