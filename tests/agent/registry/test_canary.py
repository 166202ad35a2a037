"""Canary releases (rollout: N): the split per caller, a file changing mid-rollout, promote, abort, restart."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import grpc
import pytest

from bitong.agent.registry.snapshot import Registry
from bitong.agent.registry.versions import RollbackError, canary_side
from bitong.v1 import agent_pb2 as pb
from bitong.v1 import agent_pb2_grpc as pb_grpc
from tests.support import WriteTool, tool_text

BITONG = [sys.executable, "-m", "bitong"]


def text(version: str, word: str, rollout: int = 0) -> str:
    return tool_text("cn", command=f"echo {word}") + f"version: {version}\n" + (f"rollout: {rollout}\n" if rollout
                                                                                else "")


def test_the_split_is_a_stable_share_of_the_callers() -> None:
    callers = [f"agent-{i}" for i in range(10_000)]
    at10 = {c for c in callers if canary_side("cn", c, 10)}
    at50 = {c for c in callers if canary_side("cn", c, 50)}
    assert 900 < len(at10) < 1100 and 4800 < len(at50) < 5200
    assert at10 <= at50   # raising the rollout only adds callers to the new side
    assert all(canary_side("cn", c, 10) == (c in at10) for c in callers[:100])   # the same answer every time
    assert all(canary_side("cn", c, 100) for c in callers[:100])


def served_words(registry: Registry, callers: list[str]) -> dict[str, str]:
    snap = registry.snapshot
    return {c: registry.versions.pick(snap.canaries, snap.tools["cn"], c).command for c in callers}


def test_a_new_version_with_rollout_serves_its_share_and_a_change_mid_rollout_keeps_the_stable(
        tools_root: Path, write_tool: WriteTool) -> None:
    registry = Registry([str(tools_root)])
    write_tool("cn", text("1.0.0", "one", rollout=30))   # a first version has nothing to share with: it serves
    assert "cn" not in registry.rescan().canaries
    write_tool("cn", text("2.0.0", "two", rollout=30))
    snap = registry.rescan()
    assert snap.tools["cn"].version == "1.0.0" and snap.tools["cn"].canary.startswith("canary: 2.0.0")
    callers = [f"agent-{i}" for i in range(200)]
    first = served_words(registry, callers)
    assert set(first.values()) == {"echo one", "echo two"}
    assert served_words(registry, callers) == first   # no flip-flopping
    new_side = {c for c, w in first.items() if w == "echo two"}

    write_tool("cn", text("2.1.0", "two-one", rollout=30))   # mid-rollout: the candidate moves, the stable stays
    registry.rescan()
    again = served_words(registry, callers)
    assert {c for c, w in again.items() if w == "echo two-one"} == new_side
    assert {w for c, w in again.items() if c not in new_side} == {"echo one"}

    write_tool("cn", text("2.2.0", "all"))   # no rollout: the canary ends, it serves everyone
    snap = registry.rescan()
    assert not snap.canaries and set(served_words(registry, callers).values()) == {"echo all"}


def test_promote_and_abort(tools_root: Path, write_tool: WriteTool, tmp_path: Path) -> None:
    registry = Registry([str(tools_root)])
    write_tool("cn", text("1.0.0", "one"))
    registry.rescan()
    write_tool("cn", text("2.0.0", "two", rollout=10))
    registry.rescan()
    # a restart keeps the canary
    registry.save_state(str(tmp_path / "state.pb"))
    again = Registry([str(tools_root)])
    assert again.load_state(str(tmp_path / "state.pb"))
    assert again.snapshot.canaries["cn"].candidate.version == "2.0.0"
    assert again.snapshot.tools["cn"].version == "1.0.0"

    snap = registry.promote("cn")
    assert not snap.canaries and snap.tools["cn"].command == "echo two" and not snap.tools["cn"].canary
    with pytest.raises(RollbackError, match="no canary running"):
        registry.promote("cn")

    write_tool("cn", text("3.0.0", "three", rollout=10))
    registry.rescan()
    snap = registry.abort("cn")
    assert not snap.canaries and snap.tools["cn"].command == "echo two" and "aborted" in snap.tools["cn"].pinned
    write_tool("cn", text("3.0.0", "three-fixed", rollout=10))   # not above the aborted version: still pinned
    assert registry.rescan().tools["cn"].command == "echo two"
    write_tool("cn", text("3.0.1", "three-one"))
    assert registry.rescan().tools["cn"].command == "echo three-one"


@pytest.fixture
async def served(tools_root: Path, tmp_path: Path) -> AsyncIterator[tuple[object, pb_grpc.ToolAgentStub, str]]:
    from bitong.agent.serving.server import Sidecar

    admin_path = str(tmp_path / "admin" / "admin.sock")
    car = Sidecar([str(tools_root)], f"unix:{tmp_path}/bitong.sock", poll_s=0.1, grace_s=5, admin_socket=admin_path)
    await car.start()
    try:
        async with grpc.aio.insecure_channel(car.address) as channel:
            yield car, pb_grpc.ToolAgentStub(channel), admin_path
    finally:
        await car.stop(0)


async def test_a_canary_through_the_server_the_caller_metadata_and_bitong_promote(
        served: tuple[object, pb_grpc.ToolAgentStub, str], write_tool: WriteTool) -> None:
    car, agent, admin_path = served

    async def tool() -> pb.ToolDef:
        return next(t for t in (await agent.ListTools(pb.ListToolsRequest())).tools if t.name == "cn")

    async def serving(check: str) -> None:
        for _ in range(2000):
            t = next((t for t in (await agent.ListTools(pb.ListToolsRequest())).tools if t.name == "cn"), None)
            if t is not None and (t.canary if check == "canary" else t.version == check):
                return
            await asyncio.sleep(0.01)
        raise AssertionError(f"cn never {check}")

    write_tool("cn", text("1.0.0", "one"))
    await serving("1.0.0")
    write_tool("cn", text("2.0.0", "two", rollout=50))
    await serving("canary")
    callers = [f"agent-{i}" for i in range(40)]
    expected = {c: b"two\n" if canary_side("cn", c, 50) else b"one\n" for c in callers}
    for c in callers:
        for _ in range(2):   # the same caller, the same side
            result = await agent.Call(pb.CallRequest(tool="cn"), metadata=(("caller", c),))
            assert result.output == expected[c] and result.tool_version == ("2.0.0" if expected[c] == b"two\n"
                                                                            else "1.0.0")
        hit = await agent.Match(pb.MatchRequest(intent="run the cn test tool"), metadata=(("caller", c),))
        assert hit.found and hit.candidates[0].tool.command == f"echo {expected[c].decode().strip()}"
    new_calls = 2 * sum(1 for v in expected.values() if v == b"two\n")
    listed = (await tool()).canary
    assert f"2.0.0: {new_calls} calls, 0 failed; 1.0.0: {2 * len(callers) - new_calls} calls, 0 failed" in listed

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([*BITONG, *args, "--admin-socket", admin_path], capture_output=True, text=True,
                              timeout=60)

    shown = await asyncio.to_thread(cli, "versions", "cn")
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.splitlines()[0].startswith("* 2.0.0") and f"{new_calls} calls, 0 failed" in shown.stdout
    promoted = await asyncio.to_thread(cli, "promote", "cn")
    assert promoted.returncode == 0, promoted.stderr
    assert (await tool()).version == "2.0.0" and not (await tool()).canary
    for c in callers[:5]:
        assert (await agent.Call(pb.CallRequest(tool="cn"), metadata=(("caller", c),))).output == b"two\n"
    refused = await asyncio.to_thread(cli, "abort", "cn")
    assert refused.returncode != 0 and "no canary running" in refused.stderr
