"""Versions and rollback: the last three definitions, lint on version moves, pins, the state, the CLI."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import grpc
import pytest

from bitong.agent.registry.snapshot import Registry
from bitong.agent.registry.versions import RollbackError, semver_key
from bitong.v1 import agent_pb2 as pb
from bitong.v1 import agent_pb2_grpc as pb_grpc
from bitong.v1 import state_pb2
from tests.support import WriteTool, tool_text

BITONG = [sys.executable, "-m", "bitong"]


def versioned(name: str, version: str, word: str) -> str:
    return tool_text(name, command=f"echo {word}") + f"version: {version}\n"


def test_semantic_versions_order_as_semver_says() -> None:
    ordered = ["0.9.9", "1.0.0-alpha", "1.0.0-alpha.1", "1.0.0-beta", "1.0.0", "1.0.1", "1.2.0", "1.10.0", "2.0.0"]
    assert sorted(ordered, key=semver_key) == ordered


def test_the_last_three_distinct_definitions_are_kept_newest_first(tools_root: Path, write_tool: WriteTool) -> None:
    registry = Registry([str(tools_root)])
    for version, word in (("1.0.0", "one"), ("1.0.1", "two"), ("1.1.0", "three"), ("2.0.0", "four")):
        write_tool("vt", versioned("vt", version, word))
        registry.rescan()
    kept = registry.versions.versions("vt")
    assert [v.tool.version for v in kept] == ["2.0.0", "1.1.0", "1.0.1"]
    assert all(not v.tool.warnings for v in kept)
    assert registry.snapshot.tools["vt"].loaded_unix_ms == kept[0].loaded_unix_ms > 0


def test_a_version_going_down_or_content_changing_under_one_version_is_served_with_a_warning(
        tools_root: Path, write_tool: WriteTool) -> None:
    registry = Registry([str(tools_root)])
    write_tool("vt", versioned("vt", "1.2.0", "one"))
    registry.rescan()
    write_tool("vt", versioned("vt", "1.2.0", "changed"))
    served = registry.rescan().tools["vt"]
    assert served.command == "echo changed"   # served, never silently
    assert served.warnings == ["content changed but version stayed 1.2.0: bump it (patch for fixes, minor for "
                               "params, major for rewrites)"]
    write_tool("vt", versioned("vt", "1.1.9", "older"))
    served = registry.rescan().tools["vt"]
    assert served.command == "echo older" and "version went down from 1.2.0 to 1.1.9" in served.warnings[0]
    params = tool_text("vt", command="echo {w}", params="{ w: { type: string } }") + "version: 1.1.10\n"
    write_tool("vt", params)
    assert "parameters changed with a patch bump" in registry.rescan().tools["vt"].warnings[0]


def test_rollback_pins_an_earlier_definition_until_a_higher_version_arrives(
        tools_root: Path, write_tool: WriteTool) -> None:
    registry = Registry([str(tools_root)])
    write_tool("vt", versioned("vt", "1.0.0", "one"))
    registry.rescan()
    write_tool("vt", versioned("vt", "1.1.0", "two"))
    registry.rescan()
    snap = registry.rollback("vt")
    assert snap.tools["vt"].command == "echo one" and snap.tools["vt"].version == "1.0.0"
    assert snap.tools["vt"].pinned.startswith("rolled back to 1.0.0")
    with pytest.raises(RollbackError, match="no definition older"):
        registry.rollback("vt")   # 1.0.0 is the oldest kept
    with pytest.raises(RollbackError, match="version 9.9.9 is not among the kept definitions; kept: 1.1.0"):
        registry.rollback("vt", "9.9.9")
    # a fix under the same version (or a lower one) does not end the pin
    write_tool("vt", versioned("vt", "1.1.0", "two-fixed"))
    assert registry.rescan().tools["vt"].command == "echo one"
    write_tool("vt", versioned("vt", "1.2.0", "three"))
    served = registry.rescan().tools["vt"]
    assert served.command == "echo three" and not served.pinned
    # by version, then unpin
    assert registry.rollback("vt", "1.1.0").tools["vt"].command == "echo two-fixed"
    assert registry.unpin("vt").tools["vt"].command == "echo three"
    with pytest.raises(RollbackError, match="is not rolled back"):
        registry.unpin("vt")


def test_the_match_index_follows_a_rollback(tools_root: Path, write_tool: WriteTool) -> None:
    registry = Registry([str(tools_root)])
    write_tool("vt", tool_text("vt", intent="count the penguins in the zoo") + "version: 1.0.0\n")
    registry.rescan()
    write_tool("vt", tool_text("vt", intent="measure the volcano temperature") + "version: 2.0.0\n")
    registry.rescan()
    assert registry.snapshot.index.match("volcano temperature", 1).found
    snap = registry.rollback("vt")
    hit = snap.index.match("count penguins zoo", 1)
    assert hit.found and hit.hits[0].name == "vt"


def two_versions(tools_root: Path, write_tool: WriteTool) -> Registry:
    """A registry that saw vt 1.0.0 ("echo one"), then 1.1.0 ("echo two")."""
    registry = Registry([str(tools_root)])
    write_tool("vt", versioned("vt", "1.0.0", "one"))
    registry.rescan()
    write_tool("vt", versioned("vt", "1.1.0", "two"))
    registry.rescan()
    return registry


def test_versions_and_pins_survive_a_restart_through_the_state(tools_root: Path, write_tool: WriteTool,
                                                              tmp_path: Path) -> None:
    state = str(tmp_path / "state.pb")
    first = two_versions(tools_root, write_tool)
    first.rollback("vt")
    first.save_state(state)

    again = Registry([str(tools_root)])
    assert again.load_state(state)
    assert [v.tool.version for v in again.versions.versions("vt")] == ["1.1.0", "1.0.0"]
    assert again.snapshot.tools["vt"].command == "echo one" and again.snapshot.tools["vt"].pinned
    assert again.unpin("vt").tools["vt"].command == "echo two"


def test_histories_restored_unpinned_keep_their_versions_and_take_a_new_one(tools_root: Path, write_tool: WriteTool,
                                                                           tmp_path: Path) -> None:
    """A history no pin needs is decoded when first read: the same versions, the same rollback."""
    state = str(tmp_path / "state.pb")
    two_versions(tools_root, write_tool).save_state(state)
    stored = next(h for h in state_pb2.RegistryState.FromString(Path(state).read_bytes()).history if h.name == "vt")
    assert [(v.tool_sha256 != "", v.HasField("tool")) for v in stored.versions] == [(True, False), (False, True)], \
        "the definition its file holds is stored once (by its sha256), the older one in full"

    again = Registry([str(tools_root)])
    assert again.load_state(state)
    assert [v.tool.version for v in again.versions.versions("vt")] == ["1.1.0", "1.0.0"]
    write_tool("vt", versioned("vt", "1.2.0", "three"))
    assert again.rescan().tools["vt"].command == "echo three"
    assert [v.tool.version for v in again.versions.versions("vt")] == ["1.2.0", "1.1.0", "1.0.0"]
    assert again.rollback("vt").tools["vt"].command == "echo two"

    third = Registry([str(tools_root)])   # the file moved on since the state: recorded over the stored history
    assert third.load_state(state)
    assert third.rollback("vt").tools["vt"].command == "echo two"
    assert [v.tool.version for v in third.versions.versions("vt")] == ["1.2.0", "1.1.0", "1.0.0"]


# ---------------------------------------------------------------- through the server and the CLI

class Served:
    def __init__(self, car: object, admin_path: str, agent: pb_grpc.ToolAgentStub) -> None:
        self.car = car
        self.admin_path = admin_path
        self.agent = agent

    def cli(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([*BITONG, *args, "--admin-socket", self.admin_path], capture_output=True, text=True,
                              timeout=60)

    async def serving(self, name: str, version: str) -> pb.ToolDef:
        """Wait until the served ``name`` is at ``version`` (the cache agent picks up the file)."""
        for _ in range(2000):
            reply = await self.agent.ListTools(pb.ListToolsRequest())
            tool = next((t for t in reply.tools if t.name == name), None)
            if tool is not None and tool.version == version:
                return tool
            await asyncio.sleep(0.01)
        raise AssertionError(f"{name} {version} never served")


@pytest.fixture
async def served(tools_root: Path, tmp_path: Path) -> AsyncIterator[Served]:
    from bitong.agent.serving.server import Sidecar

    admin_path = str(tmp_path / "admin" / "admin.sock")
    car = Sidecar([str(tools_root)], f"unix:{tmp_path}/bitong.sock", poll_s=0.1, grace_s=5, admin_socket=admin_path)
    await car.start()
    try:
        async with grpc.aio.insecure_channel(car.address) as channel:
            yield Served(car, admin_path, pb_grpc.ToolAgentStub(channel))
    finally:
        await car.stop(0)


async def test_bitong_rollback_and_unpin_change_what_a_call_runs(served: Served, write_tool: WriteTool) -> None:
    first = write_tool("vt", versioned("vt", "1.0.0", "one"))
    await served.serving("vt", "1.0.0")
    write_tool("vt", versioned("vt", "1.1.0", "two"))
    newest = await served.serving("vt", "1.1.0")
    result = await served.agent.Call(pb.CallRequest(tool="vt"))
    assert result.output == b"two\n" and result.tool_version == "1.1.0"
    assert result.tool_sha256 == newest.content_sha256 != ""

    listed = await asyncio.to_thread(served.cli, "versions", "vt")
    assert listed.returncode == 0, listed.stderr
    lines = listed.stdout.splitlines()
    assert lines[0].startswith("* 1.1.0") and lines[1].startswith("  1.0.0") and str(first) in lines[1]

    rolled = await asyncio.to_thread(served.cli, "rollback", "vt")
    assert rolled.returncode == 0, rolled.stderr
    assert rolled.stdout.splitlines()[1].startswith("* 1.0.0") and "pinned: rolled back to 1.0.0" in rolled.stdout
    result = await served.agent.Call(pb.CallRequest(tool="vt"))
    assert result.output == b"one\n" and result.tool_version == "1.0.0"
    tool = next(t for t in (await served.agent.ListTools(pb.ListToolsRequest())).tools if t.name == "vt")
    assert tool.pinned.startswith("rolled back to 1.0.0")   # a pinned tool says so in ListTools

    refused = await asyncio.to_thread(served.cli, "rollback", "vt", "3.0.0")
    assert refused.returncode != 0 and "version 3.0.0 is not among the kept definitions" in refused.stderr
    unpinned = await asyncio.to_thread(served.cli, "unpin", "vt")
    assert unpinned.returncode == 0, unpinned.stderr
    result = await served.agent.Call(pb.CallRequest(tool="vt"))
    assert result.output == b"two\n" and result.tool_version == "1.1.0"
    missing = await asyncio.to_thread(served.cli, "versions", "no-such-tool")
    assert missing.returncode != 0 and "no versions are kept of a tool named 'no-such-tool'" in missing.stderr


async def test_the_lifecycle_service_is_not_on_the_tool_agent_listener(served: Served) -> None:
    channel = grpc.aio.insecure_channel(served.car.address)  # type: ignore[attr-defined]
    async with channel:
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await pb_grpc.LifecycleStub(channel).Rollback(pb.RollbackRequest(tool="file-read"))
    assert caught.value.code() == grpc.StatusCode.UNIMPLEMENTED
