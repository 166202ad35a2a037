"""WatchTools: a real stream from a real sidecar while real files change; a slow watcher is coalesced."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import grpc

from bitong.agent.registry.snapshot import Registry
from bitong.agent.registry.watch import ToolWatch, changes
from bitong.v1 import agent_pb2 as pb
from bitong.v1 import agent_pb2_grpc as pb_grpc
from tests.support import WriteTool, tool_text

WAIT_S = 30   # a safety net for a stream that never answers, not a timing assertion


async def test_a_watch_stream_follows_edits_additions_and_deletions(start_sidecar: Any, write_tool: WriteTool,
                                                                    tools_root: Path, tmp_path: Path) -> None:
    path = write_tool("watched", command="echo one")
    car = await start_sidecar(f"unix:{tmp_path}/w.sock")
    async with grpc.aio.insecure_channel(car.address) as channel:
        stream = pb_grpc.ToolAgentStub(channel).WatchTools(pb.WatchToolsRequest())
        first = await asyncio.wait_for(stream.read(), WAIT_S)
        assert first.initial and not first.changed and not first.removed
        assert "watched" in first.added and list(first.added) == sorted(first.added)
        assert first.tool_count == len(first.added) == len(car.registry.snapshot.tools)

        path.write_text(tool_text("watched", command="echo two"), encoding="utf-8")
        edited = await asyncio.wait_for(stream.read(), WAIT_S)
        assert (list(edited.added), list(edited.changed), list(edited.removed)) == ([], ["watched"], [])
        assert not edited.initial and edited.generation > first.generation
        assert edited.generation <= car.registry.snapshot.generation

        write_tool("newcomer")
        added = await asyncio.wait_for(stream.read(), WAIT_S)
        assert (list(added.added), list(added.changed), list(added.removed)) == (["newcomer"], [], [])
        assert added.tool_count == first.tool_count + 1

        path.unlink()
        removed = await asyncio.wait_for(stream.read(), WAIT_S)
        assert (list(removed.added), list(removed.changed), list(removed.removed)) == ([], [], ["watched"])
        assert car.registry.snapshot.lookup("watched") is None
        stream.cancel()


async def test_a_server_stopping_ends_the_watch_streams_cleanly(start_sidecar: Any, tmp_path: Path) -> None:
    """Shutdown does not wait out its grace period on watchers: their streams end with status OK."""
    car = await start_sidecar(f"unix:{tmp_path}/w.sock", grace_s=30)
    async with grpc.aio.insecure_channel(car.address) as channel:
        stream = pb_grpc.ToolAgentStub(channel).WatchTools(pb.WatchToolsRequest())
        assert (await asyncio.wait_for(stream.read(), WAIT_S)).initial
        await asyncio.wait_for(car.stop(), WAIT_S)
        assert await asyncio.wait_for(stream.read(), WAIT_S) is grpc.aio.EOF
        assert await stream.code() == grpc.StatusCode.OK


async def test_a_slow_watcher_gets_the_changes_it_missed_as_one_message(tools_root: Path,
                                                                       write_tool: WriteTool) -> None:
    """Swaps never wait for a watcher: one that reads nothing during three swaps reads one coalesced
    message, and a tool added then removed meanwhile is not in it at all."""
    registry = Registry([str(tools_root)])
    registry.rescan()
    hub = ToolWatch(registry)
    watcher = hub.watch()
    first = await anext(watcher)
    assert first.initial and len(hub) == 1

    write_tool("one")
    registry.rescan()
    hub.swapped()
    (tools_root / "shell-exec" / "TOOL.hdlp").unlink()
    registry.rescan()
    hub.swapped()
    brief = write_tool("brief")
    registry.rescan()
    hub.swapped()
    brief.unlink()
    registry.rescan()
    hub.swapped()

    late = await anext(watcher)
    assert (list(late.added), list(late.changed), list(late.removed)) == (["one"], [], ["shell-exec"])
    assert late.generation == registry.snapshot.generation and late.tool_count == len(registry.snapshot.tools)
    hub.close()
    assert [m async for m in watcher] == []   # closed: the stream ends
    assert len(hub) == 0


def test_changes_compares_definitions_not_objects() -> None:
    a = pb.ToolDef(name="a", content_sha256="1")
    same = pb.ToolDef(name="a", content_sha256="1")
    edited = pb.ToolDef(name="a", content_sha256="2")
    assert not changes({"a": a}, {"a": same}, 5).changed
    assert list(changes({"a": a}, {"a": edited}, 5).changed) == ["a"]
    initial = changes({}, {"b": a, "a": a}, 7, initial=True)
    assert (list(initial.added), initial.initial, initial.generation, initial.tool_count) == (["a", "b"], True, 7, 2)
