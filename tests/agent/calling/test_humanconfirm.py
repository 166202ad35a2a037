"""confirm_by: human end to end: a real server on a real socket, the real admin socket and CLI.

The caller gets a request id and no token; only the admin socket (owner-only)
decides; the caller's own channel can wait for and collect a decision, never
make one.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import grpc
import pytest
from google.protobuf import struct_pb2

from bitong.agent import config
from bitong.agent.calling.humanconfirm import (
    APPROVED,
    DENIED,
    EXPIRED,
    PENDING,
    RAN,
    DecisionError,
    HumanConfirmations,
)
from bitong.v1 import agent_pb2 as pb
from bitong.v1 import agent_pb2_grpc as pb_grpc
from tests.support import WriteTool, tool_text

BITONG = [sys.executable, "-m", "bitong"]


def human_tool(name: str = "guarded", by: str = "human") -> str:
    text = tool_text(name, command="echo ran {word}", params="{ word: { type: string, required: true } }",
                     confirm=True)
    return text.replace("require_confirm: true }", f"require_confirm: true, confirm_by: {by} }}")


def request(tool: str, token: str = "", **params: object) -> pb.CallRequest:
    struct = struct_pb2.Struct()
    struct.update(params)
    return pb.CallRequest(tool=tool, params=struct, confirm_token=token)


class Server:
    """A running sidecar with its admin socket, and clients of both."""

    def __init__(self, car: object, admin_path: str, agent: pb_grpc.ToolAgentStub, admin: pb_grpc.ApprovalsStub,
                 channel: grpc.aio.Channel) -> None:
        self.car = car
        self.admin_path = admin_path
        self.agent = agent
        self.admin = admin
        self.channel = channel   # the caller's channel to the ToolAgent listener

    async def pending(self, tool: str, count: int = 1) -> list[pb.PendingApproval]:
        """Wait until ``count`` requests for ``tool`` are pending (each Call opens one as it starts waiting)."""
        for _ in range(1000):
            reply = await self.admin.ListPending(pb.ListPendingRequest())
            found = [r for r in reply.requests if r.tool == tool and r.state == PENDING]
            if len(found) >= count:
                return found
            await asyncio.sleep(0.01)
        raise AssertionError(f"no pending request for {tool}")

    def cli(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([*BITONG, *args, "--admin-socket", self.admin_path], capture_output=True, text=True,
                              timeout=60)


async def start(tools_root: Path, tmp_path: Path, settings: dict[str, object] | None = None) -> AsyncIterator[Server]:
    from bitong.agent.serving.server import Sidecar

    cfg = config.from_dict(settings or {}, "test.toml")
    admin_path = str(tmp_path / "admin" / "admin.sock")
    car = Sidecar([str(tools_root)], f"unix:{tmp_path}/bitong.sock", config=cfg, poll_s=0.1, grace_s=5,
                  admin_socket=admin_path)
    await car.start()
    try:
        async with grpc.aio.insecure_channel(car.address) as channel, \
                grpc.aio.insecure_channel(f"unix:{admin_path}") as admin_channel:
            yield Server(car, admin_path, pb_grpc.ToolAgentStub(channel), pb_grpc.ApprovalsStub(admin_channel),
                         channel)
    finally:
        await car.stop(0)


@pytest.fixture
async def server(tools_root: Path, tmp_path: Path, write_tool: WriteTool) -> AsyncIterator[Server]:
    write_tool("guarded", human_tool())
    async for running in start(tools_root, tmp_path):
        yield running


async def test_a_person_approves_with_bitong_approve_and_the_waiting_call_runs_once(server: Server) -> None:
    call = asyncio.ensure_future(server.agent.Call(request("guarded", word="hello"), timeout=60))
    (pending,) = await server.pending("guarded")
    assert dict(pending.params) == {"word": "hello"} and pending.command == "echo ran {word}"
    assert not call.done()   # the call waits for the person

    approved = await asyncio.to_thread(server.cli, "approve", pending.id)
    assert approved.returncode == 0, approved.stderr
    assert f"{pending.id}  approved" in approved.stdout and "the admin socket" in approved.stdout

    result = await call
    assert result.ok and result.output == b"ran hello\n"
    assert result.approval_id == pending.id and result.confirm_token == "" and not result.needs_confirmation

    again = await server.agent.Call(request("guarded", pending.id, word="hello"), timeout=30)
    assert not again.ok and again.output == b"" and "already run" in again.error
    twice = await asyncio.to_thread(server.cli, "approve", pending.id)
    assert twice.returncode == 1 and "already ran" in twice.stderr


async def test_a_denial_answers_the_waiting_call_refused_and_nothing_runs(server: Server) -> None:
    call = asyncio.ensure_future(server.agent.Call(request("guarded", word="rm"), timeout=60))
    (pending,) = await server.pending("guarded")
    denied = await asyncio.to_thread(server.cli, "deny", pending.id, "--reason", "not on a Friday")
    assert denied.returncode == 0, denied.stderr
    result = await call
    assert not result.ok and result.output == b"" and result.exit_code == 0
    assert f"request {pending.id} was denied by the admin socket" in result.error
    assert "not on a Friday" in result.error and "nothing ran" in result.error


async def test_the_callers_deadline_ends_the_wait_and_a_later_call_collects_the_approval(server: Server) -> None:
    first = await server.agent.Call(request("guarded", word="later"), timeout=1)
    assert first.needs_confirmation and not first.ok and first.output == b""
    assert first.approval_id and first.confirm_token == "" and first.approval_expires_unix_ms > 0
    assert f"bitong approve {first.approval_id}" in first.error

    # the id is not a key: with other parameters or another tool it runs nothing
    other = await server.agent.Call(request("guarded", first.approval_id, word="other"), timeout=30)
    assert not other.ok and "issued for other parameters" in other.error and other.output == b""

    await server.admin.Approve(pb.DecideRequest(id=first.approval_id))
    collected = await server.agent.Call(request("guarded", first.approval_id, word="later"), timeout=30)
    assert collected.ok and collected.output == b"ran later\n"


async def test_the_caller_cannot_approve_its_own_request(server: Server, tmp_path: Path) -> None:
    waiting = await server.agent.Call(request("guarded", word="self"), timeout=1)
    assert waiting.needs_confirmation and waiting.approval_id

    # the ToolAgent listener serves no Approvals: the same RPC the admin uses is not there
    on_callers_channel = pb_grpc.ApprovalsStub(server.channel)
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await on_callers_channel.Approve(pb.DecideRequest(id=waiting.approval_id))
    assert info.value.code() == grpc.StatusCode.UNIMPLEMENTED

    # sending the id back, or one it made up, only waits or fails: nothing runs
    again = await server.agent.Call(request("guarded", waiting.approval_id, word="self"), timeout=1)
    assert again.needs_confirmation and not again.ok and again.output == b""
    forged = await server.agent.Call(request("guarded", "forged-id-123", word="self"), timeout=30)
    assert not forged.ok and "unknown approval id" in forged.error and forged.output == b""
    with pytest.raises(grpc.aio.AioRpcError) as info:
        await server.admin.Approve(pb.DecideRequest(id="forged-id-123"))
    assert info.value.code() == grpc.StatusCode.NOT_FOUND

    (still,) = await server.pending("guarded")
    assert still.id == waiting.approval_id   # still waiting for a person


@pytest.mark.skipif(os.geteuid() != 0 or not os.access("/usr/bin/python3", os.X_OK),
                    reason="needs root and a system python3 to run a client as another user")
async def test_another_user_cannot_open_the_admin_socket(server: Server) -> None:
    assert os.stat(server.admin_path).st_mode & 0o777 == 0o600
    assert os.stat(os.path.dirname(server.admin_path)).st_mode & 0o777 == 0o700
    probe = ("import socket, sys\n"
             "s = socket.socket(socket.AF_UNIX)\n"
             "try:\n    s.connect(sys.argv[1])\nexcept OSError as e:\n    print(e.errno)\nelse:\n    print('connected')\n")
    # the directory stays traversable for this probe only when it is not bitong's own: test the socket's mode too
    os.chmod(os.path.dirname(server.admin_path), 0o711)
    try:
        out = await asyncio.to_thread(subprocess.run, ["/usr/bin/python3", "-c", probe, server.admin_path],
                                      capture_output=True, text=True, timeout=30, user=65534, group=65534)
    finally:
        os.chmod(os.path.dirname(server.admin_path), 0o700)
    assert out.stdout.strip() == "13", out   # EACCES: the socket file is rw------- for its owner


async def test_a_request_nobody_decides_expires_and_nothing_runs(tools_root: Path, tmp_path: Path,
                                                                 write_tool: WriteTool) -> None:
    write_tool("guarded", human_tool())
    async for server in start(tools_root, tmp_path, {"confirm": {"ttl_s": 1}}):
        result = await server.agent.Call(request("guarded", word="late"), timeout=60)
        assert not result.ok and result.output == b"" and "expired" in result.error and "nothing ran" in result.error
        decide = await asyncio.to_thread(server.cli, "approve", result.approval_id)
        assert decide.returncode == 1 and "expired" in decide.stderr


async def test_the_config_makes_every_confirm_tool_human_confirmed(tools_root: Path, tmp_path: Path,
                                                                   write_tool: WriteTool) -> None:
    write_tool("agentish", human_tool("agentish", by="agent"))   # the tool says agent; the config says human
    async for server in start(tools_root, tmp_path, {"confirm": {"by": "human"}}):
        result = await server.agent.Call(request("agentish", word="x"), timeout=1)
        assert result.needs_confirmation and result.approval_id and result.confirm_token == ""
        listed = await asyncio.to_thread(server.cli, "pending")
        assert listed.returncode == 0 and result.approval_id in listed.stdout and "agentish" in listed.stdout


async def test_agent_confirmation_stays_the_default_two_step_token(tools_root: Path, tmp_path: Path,
                                                                   write_tool: WriteTool) -> None:
    write_tool("agentish", human_tool("agentish", by="agent"))
    async for server in start(tools_root, tmp_path):
        first = await server.agent.Call(request("agentish", word="x"), timeout=30)
        assert first.needs_confirmation and first.confirm_token and not first.approval_id
        second = await server.agent.Call(request("agentish", first.confirm_token, word="x"), timeout=30)
        assert second.ok and second.output == b"ran x\n"


# ---------------------------------------------------------------- the book itself


async def test_decisions_apply_once_and_unknown_ids_are_not_found() -> None:
    book = HumanConfirmations(60)
    request_ = book.open("t", "sha", {"a": 1})
    with pytest.raises(DecisionError) as info:
        book.decide("nope", True, "me")
    assert info.value.code == "NOT_FOUND"
    assert book.decide(request_.id, False, "me", "no").state == DENIED
    with pytest.raises(DecisionError) as info:
        book.decide(request_.id, True, "me")
    assert info.value.code == "FAILED_PRECONDITION" and "already denied (by me)" in info.value.message
    assert await book.wait(request_, None) == DENIED


async def test_an_approval_is_collected_once() -> None:
    book = HumanConfirmations(60)
    request_ = book.open("t", "sha", {"a": 1})
    book.decide(request_.id, True, "me")
    assert await book.wait(request_, None) == APPROVED
    assert await book.wait(request_, None) == RAN


async def test_the_book_is_bounded_and_drops_the_oldest_first() -> None:
    book = HumanConfirmations(60, max_pending=3)
    first = book.open("t", "sha", {"n": 0})
    for n in range(1, 4):
        book.open("t", "sha", {"n": n})
    assert len(book.pending()) == 3 and first.state == EXPIRED and "dropped" in first.reason
    assert book.find(first.id, "t", "sha", {"n": 0})[0] is None


async def test_without_an_admin_channel_a_human_tool_is_refused_at_once(tools_root: Path, tmp_path: Path,
                                                                         write_tool: WriteTool) -> None:
    write_tool("guarded", human_tool())
    cli = await asyncio.to_thread(subprocess.run, [*BITONG, "call", "--tools", str(tools_root), "guarded", "word=x"],
                                  capture_output=True, text=True, timeout=60)
    assert cli.returncode == 1 and cli.stdout == ""
    assert "needs a person's approval (confirm_by: human), and nobody can give it here" in cli.stderr


async def test_an_approval_for_a_definition_changed_meanwhile_runs_nothing(server: Server,
                                                                            write_tool: WriteTool) -> None:
    call = asyncio.ensure_future(server.agent.Call(request("guarded", word="x"), timeout=60))
    (pending,) = await server.pending("guarded")
    write_tool("guarded", human_tool().replace("echo ran {word}", "echo changed {word}"))
    for _ in range(1000):   # the cache agent picks the edit up
        tools = (await server.agent.ListTools(pb.ListToolsRequest())).tools
        if any(t.name == "guarded" and t.command.startswith("echo changed") for t in tools):
            break
        await asyncio.sleep(0.01)
    await server.admin.Approve(pb.DecideRequest(id=pending.id))
    result = await call
    assert not result.ok and result.output == b"" and "was changed or removed while request" in result.error


async def test_a_request_opened_by_one_caller_cannot_be_collected_by_another() -> None:
    book = HumanConfirmations(60)
    request_ = book.open("t", "sha", {"a": 1}, requester="agent-a")
    book.decide(request_.id, True, "admin")
    found, why = book.find(request_.id, "t", "sha", {"a": 1}, requester="agent-b")
    assert found is None and "issued to another caller" in why
    assert book.find(request_.id, "t", "sha", {"a": 1}, requester="agent-a")[0] is request_
