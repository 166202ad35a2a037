"""Per-caller policy: a caller uses, is offered and sees only the tools its [callers] table allows."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import grpc
import pytest
from google.protobuf import struct_pb2

from bitong.agent.serving.callers import CallerPolicy, PermissionDenied
from bitong.agent.config import ConfigError, from_dict
from bitong.agent.serving.identity import Caller, VIA_TOKEN
from bitong.v1 import agent_pb2 as pb
from bitong.v1 import agent_pb2_grpc as pb_grpc

A = Caller("agent-a", VIA_TOKEN)
B = Caller("agent-b", VIA_TOKEN)


def test_without_a_policy_every_caller_may_use_every_tool() -> None:
    policy = CallerPolicy()
    assert policy.open and policy.allows(A, "shell-exec")


def test_globs_name_what_a_caller_may_use_and_nothing_else() -> None:
    policy = CallerPolicy({"agent-a": ("file-*", "git-ops")})
    assert policy.allows(A, "file-read") and policy.allows(A, "git-ops")
    assert not policy.allows(A, "shell-exec") and not policy.allows(A, "git-ops2")
    with pytest.raises(PermissionDenied, match=r"agent-a \(bearer-token\) may not use tool 'shell-exec': "
                                               r"\[callers.agent-a\] allows file-\*, git-ops"):
        policy.check(A, "shell-exec")
    with pytest.raises(PermissionDenied, match="no \\[callers\\] table.*may use no tool"):
        policy.check(B, "file-read")
    assert policy.allows(None, "shell-exec")   # in process: the user's own rights


def test_the_star_table_is_the_default_for_callers_without_their_own() -> None:
    policy = CallerPolicy({"agent-a": ("file-*",), "*": ("system-info",)})
    assert policy.allows(B, "system-info") and not policy.allows(B, "file-read")
    assert not policy.allows(A, "system-info")   # its own table replaces the default


def test_a_callers_table_must_list_tools() -> None:
    with pytest.raises(ConfigError, match="expected a list of tool names or patterns"):
        from_dict({"callers": {"agent-a": {"tools": "file-*"}}})
    with pytest.raises(ConfigError, match="unknown key"):
        from_dict({"callers": {"agent-a": {"tool": ["x"]}}})
    assert from_dict({"callers": {"uid:1000": {"tools": []}}}).callers == {"uid:1000": ()}


# ---------------------------------------------------------------- on a real server

@pytest.fixture
def config(monkeypatch: pytest.MonkeyPatch) -> Any:
    monkeypatch.setenv("T_A", "token-a-0123456789")
    monkeypatch.setenv("T_B", "token-b-0123456789")
    return from_dict({"auth": {"tokens": {"agent-a": {"token_env": "T_A"}, "agent-b": {"token_env": "T_B"}}},
                      "callers": {"agent-a": {"tools": ["file-*", "git-ops"]}, "agent-b": {"tools": ["*"]}}})


def _as(name: str) -> list[tuple[str, str]]:
    return [("authorization", f"Bearer token-{name}-0123456789")]


async def test_a_caller_outside_its_allow_list_is_refused_and_nothing_runs(
        start_sidecar: Any, config: Any, tmp_path: Path) -> None:
    trail = tmp_path / "audit.jsonl"
    car = await start_sidecar("127.0.0.1:0", config=config, audit_path=str(trail))
    marker = tmp_path / "tools" / "shell-exec" / "runtime" / "ran"   # its one writable host folder (sandbox)
    marker.parent.mkdir(parents=True, exist_ok=True)
    params = struct_pb2.Struct()
    params.update({"cmd": f"touch {marker}", "cwd": "/tmp"})
    async with grpc.aio.insecure_channel(car.address) as channel:
        stub = pb_grpc.ToolAgentStub(channel)
        with pytest.raises(grpc.aio.AioRpcError) as denied:
            await stub.Call(pb.CallRequest(tool="shell-exec", params=params), metadata=_as("a"))
        assert denied.value.code() == grpc.StatusCode.PERMISSION_DENIED
        assert "[callers.agent-a] allows file-*, git-ops" in (denied.value.details() or "")
        assert not marker.exists()
        with pytest.raises(grpc.aio.AioRpcError) as streamed:
            async for _ in stub.StreamCall(pb.CallRequest(tool="shell-exec", params=params), metadata=_as("a")):
                pass
        assert streamed.value.code() == grpc.StatusCode.PERMISSION_DENIED
        assert not marker.exists()
        allowed = await stub.Call(pb.CallRequest(tool="shell-exec", params=params), metadata=_as("b"))
        assert allowed.ok and marker.exists()
    lines = [json.loads(line) for line in trail.read_text().splitlines()]
    assert [(e["caller"], e["rpc"], e["outcome"], e.get("status")) for e in lines] == [
        ("agent-a", "Call", "refused", "PERMISSION_DENIED"), ("agent-a", "StreamCall", "refused", "PERMISSION_DENIED"),
        ("agent-b", "Call", "ok", None)]
    assert "may not use tool 'shell-exec'" in lines[0]["error"] and lines[0]["params"]["cmd"] == f"touch {marker}"


async def test_match_and_list_tools_offer_a_caller_only_its_tools(start_sidecar: Any, config: Any) -> None:
    car = await start_sidecar("127.0.0.1:0", config=config)
    intent = "run git log command in the shell"
    async with grpc.aio.insecure_channel(car.address) as channel:
        stub = pb_grpc.ToolAgentStub(channel)
        everything = await stub.Match(pb.MatchRequest(intent=intent, top_k=5, explain=True), metadata=_as("b"))
        restricted = await stub.Match(pb.MatchRequest(intent=intent, top_k=5, explain=True), metadata=_as("a"))
        shown_b = [c.name for c in [*everything.candidates, *everything.near_misses]]
        shown_a = [c.name for c in [*restricted.candidates, *restricted.near_misses]]
        assert everything.found and shown_b[:2] == ["shell-exec", "git-ops"]
        assert restricted.found and shown_a[0] == "git-ops"
        assert all(n.startswith("file-") or n == "git-ops" for n in shown_a)
        listed_a = await stub.ListTools(pb.ListToolsRequest(), metadata=_as("a"))
        listed_b = await stub.ListTools(pb.ListToolsRequest(), metadata=_as("b"))
    assert [t.name for t in listed_a.tools] == ["file-read", "file-stats", "file-write", "git-ops"]
    assert "shell-exec" in [t.name for t in listed_b.tools]


async def test_an_unknown_tool_name_suggests_only_allowed_tools(start_sidecar: Any, config: Any) -> None:
    car = await start_sidecar("127.0.0.1:0", config=config)
    async with grpc.aio.insecure_channel(car.address) as channel:
        stub = pb_grpc.ToolAgentStub(channel)
        with pytest.raises(grpc.aio.AioRpcError) as denied:   # outside the list, existing or not: denied
            await stub.Call(pb.CallRequest(tool="shel-exec"), metadata=_as("a"))
        assert denied.value.code() == grpc.StatusCode.PERMISSION_DENIED
        missing = await stub.Call(pb.CallRequest(tool="file-raed"), metadata=_as("a"))
    assert not missing.found and "did you mean 'file-read'" in missing.error


async def test_watch_tools_tells_a_caller_only_of_its_tools(start_sidecar: Any, config: Any,
                                                            write_tool: Any) -> None:
    """WatchTools follows [callers] as ListTools does: a change to a tool a caller may not use is not
    news to it, and a caller without a token is refused."""
    import asyncio

    car = await start_sidecar("127.0.0.1:0", config=config)
    async with grpc.aio.insecure_channel(car.address) as channel:
        stub = pb_grpc.ToolAgentStub(channel)
        watch_a = stub.WatchTools(pb.WatchToolsRequest(), metadata=_as("a"))
        watch_b = stub.WatchTools(pb.WatchToolsRequest(), metadata=_as("b"))
        first_a = await asyncio.wait_for(watch_a.read(), 30)
        first_b = await asyncio.wait_for(watch_b.read(), 30)
        assert set(first_a.added) == {n for n in car.registry.snapshot.tools if n.startswith("file-") or n == "git-ops"}
        assert set(first_b.added) == set(car.registry.snapshot.tools)
        write_tool("other-tool")   # not for agent-a
        write_tool("file-new")     # agent-a may use file-*
        seen_b: set[str] = set()
        while seen_b != {"other-tool", "file-new"}:
            seen_b |= set((await asyncio.wait_for(watch_b.read(), 30)).added)
        change_a = await asyncio.wait_for(watch_a.read(), 30)
        assert list(change_a.added) == ["file-new"] and change_a.tool_count == len(first_a.added) + 1
        watch_a.cancel()
        watch_b.cancel()
        nobody = stub.WatchTools(pb.WatchToolsRequest())
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await nobody.read()
        assert refused.value.code() == grpc.StatusCode.UNAUTHENTICATED
