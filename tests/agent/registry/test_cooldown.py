"""The reload cooldown: two reloads a window, the rest held (marked pending) and applied whole, latest, later."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import grpc
import pytest

from bitong.agent.registry.cooldown import Cooldown
from bitong.agent.registry.snapshot import Registry
from bitong.v1 import agent_pb2 as pb
from bitong.v1 import agent_pb2_grpc as pb_grpc
from tests.support import WriteTool, tool_text


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def text(word: str, version: str) -> str:
    return tool_text("busy", command=f"echo {word}") + f"version: {version}\n"


def test_the_window_allows_two_reloads_then_says_when_the_next_may_come() -> None:
    clock = Clock()
    cool = Cooldown(60, 2, clock=clock)
    assert cool.allow("a") and cool.allow("a") and not cool.allow("a")
    assert cool.allow("b")   # per tool
    assert cool.due("a") == 1060.0
    clock.now = 1059.9
    assert not cool.allow("a")
    clock.now = 1060.0
    assert cool.allow("a") and cool.allow("a") and not cool.allow("a")   # both earlier reloads left the window
    assert Cooldown(0).allow("a") and Cooldown(0).allow("a") and Cooldown(0).allow("a")
    with pytest.raises(ValueError):
        Cooldown(-1)


def test_a_third_change_is_held_and_the_latest_applies_when_the_window_allows(
        tools_root: Path, write_tool: WriteTool) -> None:
    clock = Clock()
    registry = Registry([str(tools_root)], cooldown=Cooldown(60, 2, clock=clock))
    write_tool("busy", text("one", "1.0.0"))
    registry.rescan()                       # a new tool: not a reload
    for word, version in (("two", "1.0.1"), ("three", "1.0.2")):
        write_tool("busy", text(word, version))
        assert registry.rescan().tools["busy"].command == f"echo {word}"
    assert registry.held_due() is None
    write_tool("busy", text("four", "1.0.3"))
    held = registry.rescan().tools["busy"]
    assert held.command == "echo three" and "applies at" in held.pending_change
    assert registry.held_due() == (1060.0, [str(tools_root / "busy")])
    write_tool("busy", text("five", "1.0.4"))
    assert registry.rescan().tools["busy"].command == "echo three"
    clock.now = 1060.0
    applied = registry.rescan([str(tools_root / "busy")]).tools["busy"]
    assert applied.command == "echo five" and applied.version == "1.0.4" and not applied.pending_change
    assert registry.held_due() is None
    assert [v.tool.version for v in registry.versions.versions("busy")] == ["1.0.4", "1.0.2", "1.0.1"]


def test_a_change_back_to_what_serves_ends_the_hold(tools_root: Path, write_tool: WriteTool) -> None:
    registry = Registry([str(tools_root)], cooldown=Cooldown(60, 1, clock=Clock()))
    write_tool("busy", text("one", "1.0.0"))
    registry.rescan()
    write_tool("busy", text("two", "1.0.1"))
    registry.rescan()
    write_tool("busy", text("three", "1.0.2"))
    assert registry.rescan().tools["busy"].pending_change
    write_tool("busy", text("two", "1.0.1"))
    served = registry.rescan().tools["busy"]
    assert served.command == "echo two" and not served.pending_change and registry.held_due() is None


@pytest.fixture
async def agent(tools_root: Path, tmp_path: Path) -> AsyncIterator[pb_grpc.ToolAgentStub]:
    from bitong.agent.serving.server import Sidecar

    car = Sidecar([str(tools_root)], f"unix:{tmp_path}/bitong.sock", poll_s=0.1, grace_s=5, reload_cooldown_s=3)
    await car.start()
    try:
        async with grpc.aio.insecure_channel(car.address) as channel:
            yield pb_grpc.ToolAgentStub(channel)
    finally:
        await car.stop(0)


async def served(agent: pb_grpc.ToolAgentStub, check: str) -> pb.ToolDef:
    """Wait until the served 'busy' tool satisfies ``check`` (a version, or 'pending')."""
    for _ in range(3000):
        tools = (await agent.ListTools(pb.ListToolsRequest())).tools
        tool = next((t for t in tools if t.name == "busy"), None)
        if tool is not None and (tool.pending_change if check == "pending" else tool.version == check):
            return tool
        await asyncio.sleep(0.01)
    raise AssertionError(f"busy never became {check}")


async def test_a_served_tool_that_keeps_changing_reloads_at_the_end_of_its_window(
        agent: pb_grpc.ToolAgentStub, write_tool: WriteTool) -> None:
    write_tool("busy", text("one", "1.0.0"))
    await served(agent, "1.0.0")
    for word, version in (("two", "1.0.1"), ("three", "1.0.2")):   # within a second each, as without a cooldown
        write_tool("busy", text(word, version))
        await served(agent, version)
    write_tool("busy", text("four", "1.0.3"))
    pending = await served(agent, "pending")
    assert pending.version == "1.0.2" and "reload cooldown (2 reloads in 3s)" in pending.pending_change
    write_tool("busy", text("five", "1.0.4"))
    await served(agent, "1.0.4")   # nothing wrote the file again: the cache agent applied it when the window let it
    result = await agent.Call(pb.CallRequest(tool="busy"))
    assert result.output == b"five\n" and result.tool_version == "1.0.4"


def test_a_negative_cooldown_is_refused_by_the_cli() -> None:
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-m", "bitong", "serve", "--reload-cooldown", "-1"], capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 2 and "--reload-cooldown: must be 0 or more seconds, got -1" in done.stderr
