"""The cache agent keeps picking up changes whatever lands in a tools root."""

from __future__ import annotations

import asyncio
import os
import shutil
from pathlib import Path
from collections.abc import Callable

from agent.cache import CacheAgent
from agent.registry import Registry, Snapshot

WriteTool = Callable[..., Path]


class Swaps:
    """Collects swapped snapshots and lets a test wait for one that fits."""

    def __init__(self) -> None:
        self.changed = asyncio.Event()
        self.last: Snapshot | None = None

    def __call__(self, snap: Snapshot) -> None:
        self.last = snap
        self.changed.set()

    async def until(self, registry: Registry, fits: Callable[[Snapshot], bool], timeout: float = 10.0) -> Snapshot:
        async def wait() -> Snapshot:
            while not fits(registry.snapshot):
                self.changed.clear()
                await self.changed.wait()
            return registry.snapshot
        return await asyncio.wait_for(wait(), timeout)


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
