"""The cache agent keeps picking up changes whatever lands in a tools root.

Real files and the real watch (inotify, and the polling fallback): every wait
is on a swap the agent reports (``on_swap``), bounded, never a sleep.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import os
import shutil
import threading
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest

from bitong.agent.registry.cache import CacheAgent
from bitong.agent.registry.snapshot import Registry, Snapshot
from tests.support import tool_text

WriteTool = Callable[..., Path]


class Swaps:
    """Collects swapped snapshots and lets a test wait for one that fits."""

    def __init__(self) -> None:
        self.changed = asyncio.Event()
        self.last: Snapshot | None = None
        self.seen: list[Snapshot] = []

    def __call__(self, snap: Snapshot) -> None:
        self.last = snap
        self.seen.append(snap)
        self.changed.set()

    async def until(self, registry: Registry, fits: Callable[[Snapshot], bool], timeout: float = 10.0) -> Snapshot:
        async def wait() -> Snapshot:
            while not fits(registry.snapshot):
                self.changed.clear()
                await self.changed.wait()
            return registry.snapshot
        return await asyncio.wait_for(wait(), timeout)

    async def calibrated(self, first: Snapshot, timeout: float = 10.0) -> None:
        """The first swap after start() is the background calibration (always, for a fresh registry):
        wait for it, so a test's own changes are the only swaps that follow."""
        async def wait() -> None:
            while not any(s.generation > first.generation for s in self.seen):
                self.changed.clear()
                await self.changed.wait()
        await asyncio.wait_for(wait(), timeout)


def _release_fifo(path: Path) -> None:
    try:
        fd = os.open(path, os.O_WRONLY | os.O_NONBLOCK)
    except OSError:
        return
    os.close(fd)


async def test_hostile_files_added_while_serving_do_not_stop_later_updates(tools_root: Path,
                                                                        write_tool: WriteTool) -> None:
    registry = Registry([str(tools_root)])
    swaps = Swaps()
    agent = CacheAgent(registry, debounce_s=0.02, poll_s=0.05, safety_poll_s=30, on_swap=swaps)
    await agent.start()
    fifo = tools_root / "fifo" / "TOOL.hdlp"
    try:
        fifo.parent.mkdir()
        os.mkfifo(fifo)
        (tools_root / "zero").mkdir()
        (tools_root / "zero" / "TOOL.hdlp").symlink_to("/dev/zero")
        write_tool("evil", params="{ x: { type: string, pattern: '^(a+)+$', default: '" + "a" * 28 + "!' } }")
        snap = await swaps.until(registry, lambda s: len(s.errors) == 3)
        assert {Path(e.path).parent.name for e in snap.errors} == {"fifo", "zero", "evil"}
        write_tool("after")  # a change after the hostile files is still picked up
        snap = await swaps.until(registry, lambda s: "after" in s.tools)
        assert len(snap.tools) == 8
    finally:
        _release_fifo(fifo)
        await agent.stop()


async def test_a_root_deleted_and_made_again_is_reported_then_served_again(tools_root: Path, tmp_path: Path) -> None:
    """A new root folder has a new inode: no old watch sees it, so only polling for the lost root finds it."""
    registry = Registry([str(tools_root)])
    swaps = Swaps()
    # inotify on, slow safety poll: only the watch and the lost-root poll can see the root come back
    agent = CacheAgent(registry, debounce_s=0.02, poll_s=0.05, safety_poll_s=30, on_swap=swaps)
    first = await agent.start()
    try:
        assert agent.mode == "inotify"
        shutil.copytree(tools_root, tmp_path / "copy")
        shutil.rmtree(tools_root)
        lost = await swaps.until(registry, lambda s: bool(s.lost_roots))
        assert lost.tools.keys() == first.tools.keys()
        assert [e.path for e in lost.errors] == [str(tools_root)]
        shutil.copytree(tmp_path / "copy", tools_root)
        back = await swaps.until(registry, lambda s: not s.lost_roots)
        assert back.errors == () and back.tools.keys() == first.tools.keys()
        (tools_root / "git-ops" / "TOOL.hdlp").unlink()  # and the root is watched again
        gone = await swaps.until(registry, lambda s: "git-ops" not in s.tools)
        assert len(gone.tools) == 6
    finally:
        await agent.stop()


# ---------------------------------------------------------------- the watch, both ways

MODES = ["inotify", "poll"]


def make_agent(registry: Registry, mode: str, swaps: Swaps, debounce_s: float = 0.02) -> CacheAgent:
    """inotify with both polls at 30 s, so only an event can explain a swap within a test's wait;
    or polling every 50 ms with inotify off."""
    if mode == "inotify":
        return CacheAgent(registry, debounce_s=debounce_s, poll_s=30, safety_poll_s=30, on_swap=swaps)
    return CacheAgent(registry, debounce_s=debounce_s, poll_s=0.05, safety_poll_s=30, use_inotify=False,
                      on_swap=swaps)


@contextlib.asynccontextmanager
async def running(agent: CacheAgent, swaps: Swaps, mode: str) -> AsyncIterator[Snapshot]:
    first = await agent.start()
    try:
        assert agent.mode == mode
        await swaps.calibrated(first)
        yield first
    finally:
        await agent.stop()


def put(root: Path, name: str, **options: object) -> Path:
    folder = root / name
    folder.mkdir(exist_ok=True)
    path = folder / "TOOL.hdlp"
    path.write_text(tool_text(name, **options), encoding="utf-8")
    return path


@pytest.fixture
def root(tmp_path: Path) -> Path:
    """A small root of its own (one tool), so each rescan and calibration is cheap."""
    folder = tmp_path / "root"
    folder.mkdir()
    put(folder, "alpha", intent="show the alpha report")
    return folder


@pytest.mark.parametrize("mode", MODES)
async def test_new_changed_and_deleted_tools_are_served_without_restart(root: Path, mode: str) -> None:
    registry = Registry([str(root)])
    swaps = Swaps()
    agent = make_agent(registry, mode, swaps)
    async with running(agent, swaps, mode) as first:
        assert set(first.tools) == {"alpha"}

        # a new folder first empty, its TOOL.hdlp written later (mkdir, then the editor saves):
        # in inotify mode only a watch on the new folder itself sees that file appear
        (root / "beta").mkdir()
        put(root, "gamma")
        await swaps.until(registry, lambda s: "gamma" in s.tools)
        beta = put(root, "beta", intent="show the beta report")
        snap = await swaps.until(registry, lambda s: "beta" in s.tools)
        assert snap.tools["beta"].source_path == str(beta)
        assert snap.tools["beta"].content_sha256 == hashlib.sha256(beta.read_bytes()).hexdigest()

        alpha = put(root, "alpha", intent="print the monthly alpha summary")
        snap = await swaps.until(registry, lambda s: s.tools["alpha"].intent == "print the monthly alpha summary")
        assert snap.errors == ()
        assert snap.tools["alpha"].content_sha256 == hashlib.sha256(alpha.read_bytes()).hexdigest()

        alpha.unlink()                      # the file goes, its folder stays
        shutil.rmtree(root / "beta")        # the whole folder goes
        snap = await swaps.until(registry, lambda s: not {"alpha", "beta"} & set(s.tools))
        assert set(snap.tools) == {"gamma"} and snap.errors == ()


@pytest.mark.parametrize("mode", MODES)
async def test_on_swap_is_called_with_each_new_snapshot(root: Path, mode: str) -> None:
    registry = Registry([str(root)])
    swaps = Swaps()
    agent = make_agent(registry, mode, swaps)
    async with running(agent, swaps, mode) as first:
        put(root, "beta")
        await swaps.until(registry, lambda s: "beta" in s.tools)
        put(root, "beta", intent="a new intent for beta")
        await swaps.until(registry, lambda s: s.tools["beta"].intent == "a new intent for beta")
        shutil.rmtree(root / "beta")
        last = await swaps.until(registry, lambda s: "beta" not in s.tools)
        # generations go up by one per snapshot: a gap would be a snapshot nobody was told of
        assert [s.generation for s in swaps.seen] == list(range(first.generation + 1, last.generation + 1))
        assert swaps.seen[-1] is last
        assert len({id(s) for s in swaps.seen}) == len(swaps.seen)


def editor_saves(path: Path, versions: list[str], pause_s: float) -> None:
    """Save each version as an editor does: truncate, then the bytes in two writes; a short pause between."""
    for text in versions:
        data = text.encode("utf-8")
        with open(path, "wb") as fh:
            fh.write(data[: len(data) // 2])
            fh.flush()
            fh.write(data[len(data) // 2:])
        time.sleep(pause_s)   # the writer's pace, not a wait for the agent


async def test_a_burst_of_writes_to_one_file_makes_one_snapshot_with_the_final_content(root: Path) -> None:
    """Without the debounce each write (and each half-written file) would be a rescan of its own."""
    registry = Registry([str(root)])
    swaps = Swaps()
    agent = make_agent(registry, "inotify", swaps, debounce_s=0.5)
    async with running(agent, swaps, "inotify"):
        before = len(swaps.seen)
        versions = [tool_text("alpha", intent=f"show the alpha report, draft {i}") for i in range(1, 6)]
        # from a thread, so the event loop reads every event as it comes, as it would from an editor
        await asyncio.to_thread(editor_saves, root / "alpha" / "TOOL.hdlp", versions, 0.01)
        final = "show the alpha report, draft 5"
        await swaps.until(registry, lambda s: s.tools["alpha"].intent == final)
        burst = swaps.seen[before:]
        assert [(s.tools["alpha"].intent, s.errors) for s in burst] == [(final, ())]


class Logged(logging.Handler):
    """Sets an event when a record with ``text`` is logged (on the event loop, where the agent logs)."""

    def __init__(self, text: str) -> None:
        super().__init__()
        self.text = text
        self.event = asyncio.Event()
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        if self.text in record.getMessage():
            self.records.append(record)
            self.event.set()


@pytest.mark.parametrize("mode", MODES)
async def test_a_rescan_that_raises_keeps_the_old_snapshot_and_the_watch_going(
        root: Path, mode: str, monkeypatch: pytest.MonkeyPatch) -> None:
    registry = Registry([str(root)])
    swaps = Swaps()
    agent = make_agent(registry, mode, swaps)
    logged = Logged("rescan failed; the previous snapshot keeps serving")
    logger = logging.getLogger("bitong.cache")
    logger.addHandler(logged)
    try:
        async with running(agent, swaps, mode):
            before = registry.snapshot
            seen = len(swaps.seen)
            real = registry.rescan
            calls: list[str] = []

            def rescan_failing_once(*args: object) -> Snapshot:
                calls.append(threading.current_thread().name)
                if len(calls) == 1:
                    raise RuntimeError("injected: the first rescan after start fails")
                return real(*args)  # type: ignore[arg-type]

            monkeypatch.setattr(registry, "rescan", rescan_failing_once)
            put(root, "beta")
            await asyncio.wait_for(logged.event.wait(), 10)
            # the failure is logged with its cause, and the old snapshot is what requests still see
            [record] = logged.records
            assert record.exc_info is not None and "injected" in str(record.exc_info[1])
            assert registry.snapshot is before and len(swaps.seen) == seen

            put(root, "gamma")  # the watch still runs: the next change brings in both tools
            snap = await swaps.until(registry, lambda s: {"beta", "gamma"} <= set(s.tools))
            assert set(snap.tools) == {"alpha", "beta", "gamma"} and snap.errors == ()
            assert len(calls) >= 2 and len(logged.records) == 1
    finally:
        logger.removeHandler(logged)


def agent_tasks() -> set[str]:
    return {t.get_name() for t in asyncio.all_tasks() if t.get_name().startswith("bitong-")}


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("settle", [True, False], ids=["settled", "at-once"])
async def test_stop_leaves_no_task_and_no_watch(root: Path, mode: str, settle: bool) -> None:
    """Stopped while idle, or at once (the calibration still running in its thread)."""
    registry = Registry([str(root)])
    swaps = Swaps()
    agent = make_agent(registry, mode, swaps)
    first = await agent.start()
    assert agent_tasks() >= {"bitong-cache-agent"}
    fd = agent._inotify.fd if agent._inotify is not None else None
    if settle:
        await swaps.calibrated(first)
    await agent.stop()
    assert agent_tasks() == set()
    assert agent.mode == "poll"          # no inotify object left
    if fd is not None:                   # and the loop no longer reads its descriptor
        assert not asyncio.get_running_loop().remove_reader(fd)
    await agent.stop()                   # a second stop is harmless
    assert agent_tasks() == set()


# ---------------------------------------------------------------- the state file, and the folder an event names


async def test_a_restart_with_nothing_changed_does_not_write_the_state(root: Path, tmp_path: Path) -> None:
    state = tmp_path / "state.pb"
    for path in root.glob("*/TOOL.hdlp"):
        os.utime(path, ns=(1_000_000_000, 1_000_000_000))   # older than the racy window: trusted by its stat
    swaps = Swaps()
    first = CacheAgent(Registry([str(root)]), debounce_s=0.02, poll_s=30, safety_poll_s=30, state_path=str(state),
                       on_swap=swaps)
    snap = await first.start(defer=True)
    assert not state.exists(), "nothing is written before the server answers"
    first.serving()
    await swaps.calibrated(snap)
    await first.stop()          # stop writes what is not written yet (5 s would pass before the agent does)
    written = state.stat()

    ready = Logged("matching ready")
    logger = logging.getLogger("bitong.cache")
    level = logger.level
    logger.setLevel(logging.INFO)
    logger.addHandler(ready)
    try:
        swaps = Swaps()
        registry = Registry([str(root)])
        again = CacheAgent(registry, debounce_s=0.02, poll_s=30, safety_poll_s=30, state_path=str(state),
                           on_swap=swaps)
        await again.start()
        await asyncio.wait_for(ready.event.wait(), 10)   # the background step that could ask for a save is done
        assert swaps.seen == [], "the stored calibration serves: nothing fitted again, nothing swapped"
        await again.stop()
    finally:
        logger.removeHandler(ready)
        logger.setLevel(level)
    after = state.stat()
    assert (after.st_ino, after.st_mtime_ns) == (written.st_ino, written.st_mtime_ns), "rewritten for nothing"

    put(root, "beta")
    swaps = Swaps()
    registry = Registry([str(root)])
    third = CacheAgent(registry, debounce_s=0.02, poll_s=30, safety_poll_s=30, state_path=str(state), on_swap=swaps)
    served = await third.start()
    assert "beta" not in served.tools, "the saved snapshot answers first; the files are checked after"
    await swaps.until(registry, lambda snap: "beta" in snap.tools)   # the check, once serving
    await third.stop()
    assert state.stat().st_ino != written.st_ino
    reloaded = Registry([str(root)])
    assert reloaded.load_state(str(state)) and {"alpha", "beta"} <= set(reloaded.snapshot.tools)


async def test_a_cold_start_serves_a_rough_index_first_and_saves_only_the_full_one(root: Path, tmp_path: Path) -> None:
    for name in ("beta", "gamma"):
        put(root, name)
    state = tmp_path / "state.pb"
    ready = Logged("matching ready")
    logger = logging.getLogger("bitong.cache")
    level = logger.level
    logger.setLevel(logging.INFO)
    logger.addHandler(ready)
    try:
        registry = Registry([str(root)])
        registry.rough_from = 1   # (a thousand tools by default)
        swaps = Swaps()
        agent = CacheAgent(registry, debounce_s=0.02, poll_s=30, safety_poll_s=30, state_path=str(state),
                           on_swap=swaps, save_every_s=0)
        first = await agent.start(defer=True)
        rough_at_start = registry.rough
        assert rough_at_start and sorted(first.tools) == ["alpha", "beta", "gamma"]
        agent.serving()
        await asyncio.wait_for(ready.event.wait(), 10)   # refined, then calibrated
        assert not registry.rough
        assert registry.snapshot.index.typos_ready, "the typo map is made off the request path"
        assert {a.fingerprint for a in registry.snapshot.index.analyses()} != {"rough"}
        await agent.stop()
    finally:
        logger.removeHandler(ready)
        logger.setLevel(level)
    restarted = Registry([str(root)])
    assert restarted.load_state(str(state))
    assert restarted.snapshot.index.postings_restored, "the saved index is the full one"
    full = Registry([str(root)])
    full.rescan()
    for text in ("print the monthly beta summary", "gamma", "nothing like any tool"):
        assert [h.name for h in restarted.snapshot.index.match(text).hits] == \
            [h.name for h in full.snapshot.index.match(text).hits]


async def test_an_event_rescans_the_folder_it_names_and_nothing_else(root: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    registry = Registry([str(root)])
    swaps = Swaps()
    agent = make_agent(registry, "inotify", swaps)
    async with running(agent, swaps, "inotify"):
        asked: list[object] = []
        real = registry.rescan

        def rescan(folders: object = None) -> Snapshot:
            asked.append(None if folders is None else sorted(folders))  # type: ignore[call-overload]
            return real(folders)  # type: ignore[arg-type]

        monkeypatch.setattr(registry, "rescan", rescan)
        put(root, "beta")
        await swaps.until(registry, lambda s: "beta" in s.tools)
        put(root, "alpha", intent="a changed alpha")
        await swaps.until(registry, lambda s: s.tools["alpha"].intent == "a changed alpha")
        assert None not in asked, "no full rescan: the events said where"
        assert {str(root / "beta"), str(root / "alpha")} == {f for fs in asked for f in fs}  # type: ignore[attr-defined]


async def test_a_tool_folder_moved_out_and_back_is_watched_again(root: Path, tmp_path: Path) -> None:
    registry = Registry([str(root)])
    swaps = Swaps()
    agent = make_agent(registry, "inotify", swaps)
    async with running(agent, swaps, "inotify"):
        os.rename(root / "alpha", tmp_path / "alpha")
        await swaps.until(registry, lambda s: "alpha" not in s.tools)
        put(tmp_path, "alpha", intent="edited while away")   # no longer ours: nothing to see
        os.rename(tmp_path / "alpha", root / "alpha")
        await swaps.until(registry, lambda s: "alpha" in s.tools and s.tools["alpha"].intent == "edited while away")
        put(root, "alpha", intent="edited back home")   # its watch is set again
        snap = await swaps.until(registry, lambda s: s.tools["alpha"].intent == "edited back home")
        assert snap.errors == () and set(snap.tools) == {"alpha"}
