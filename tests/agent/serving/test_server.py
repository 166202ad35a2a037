"""The sidecar end to end: a real gRPC server on a real unix socket, real processes.

The first four tests are seed 000 §4's acceptance cases, in its words.
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import re
import time
from pathlib import Path
from collections.abc import Callable

import grpc
import pytest
from google.protobuf import struct_pb2
from grpc_health.v1 import health_pb2, health_pb2_grpc

from bitong.agent.matching import SUGGESTION
from tests.support import approve, tool_text, writes_to
from bitong.v1 import agent_pb2 as pb
from bitong.v1 import agent_pb2_grpc as pb_grpc

WriteTool = Callable[..., Path]


def request(tool: str, confirm_token: str = "", **params: object) -> pb.CallRequest:
    struct = struct_pb2.Struct()
    struct.update(params)
    return pb.CallRequest(tool=tool, params=struct, confirm_token=confirm_token)


async def until(predicate, within: float) -> bool:
    """Wait for a condition driven by the server (a file watch), up to ``within`` seconds."""
    end = time.monotonic() + within
    while time.monotonic() < end:
        if await predicate():
            return True
        await asyncio.sleep(0.01)
    return await predicate()


# ---------------------------------------------------------------- seed §4


async def test_shell_exec_runs_echo_hello_and_returns_hello(stub) -> None:
    result = await stub.Call(request("shell-exec", cmd="echo hello"))
    assert result.ok and result.found
    assert result.output == b"hello\n"
    assert result.exit_code == 0
    assert result.tool == "shell-exec" and result.method == "exec"


async def test_unknown_tool_answers_found_false_with_the_seed_suggestion(stub) -> None:
    result = await stub.Call(request("no-such-tool"))
    assert not result.ok and not result.found
    assert result.suggestion == SUGGESTION == "此工具尚不在仓库中，需铸渊新建"
    match = await stub.Match(pb.MatchRequest(intent="帮我订一张去上海的机票"))
    assert not match.found and match.suggestion == SUGGESTION
    assert list(match.candidates) == []  # no near misses for a caller to mistake for a match


async def test_a_failing_command_returns_its_real_stderr_and_exit_code(stub) -> None:
    result = await stub.Call(request("shell-exec", cmd="echo partial; echo 'disk on fire' >&2; exit 3"))
    assert not result.ok
    assert result.output == b"partial\n"
    assert result.stderr == b"disk on fire\n"
    assert result.exit_code == 3
    assert result.error  # said in words, too


async def test_a_tool_added_while_serving_is_found_by_the_next_match(stub, write_tool: WriteTool) -> None:
    write_tool("weather-probe", intent="查询机房温湿度传感器的读数", display="机房温湿度",
               command="echo 23C")

    async def matched() -> bool:
        reply = await stub.Match(pb.MatchRequest(intent="机房温湿度传感器读数"))
        return reply.found and reply.candidates[0].name == "weather-probe"

    assert await until(matched, within=1.0), "a new TOOL.hdlp must be served within one second"
    assert (await stub.Call(request("weather-probe"))).output == b"23C\n"


# ---------------------------------------------------------------- registry changes


async def test_changed_and_deleted_files_show_without_restart(stub, write_tool: WriteTool) -> None:
    path = write_tool("probe", command="echo one")

    async def says(expected: bytes) -> bool:
        return (await stub.Call(request("probe"))).output == expected

    assert await until(lambda: says(b"one\n"), within=1.0)
    write_tool("probe", command="echo two")
    assert await until(lambda: says(b"two\n"), within=1.0)
    path.unlink()

    async def gone() -> bool:
        return not (await stub.Call(request("probe"))).found

    assert await until(gone, within=1.0)


async def test_a_broken_file_is_listed_and_every_other_tool_keeps_serving(stub, write_tool: WriteTool) -> None:
    write_tool("broken", "name: broken\ndisplay: x\nintent: [unclosed\n")

    async def listed() -> bool:
        return any(e.path.endswith("broken/TOOL.hdlp") for e in (await stub.ListTools(pb.ListToolsRequest())).errors)

    assert await until(listed, within=1.0)
    reply = await stub.ListTools(pb.ListToolsRequest())
    err = next(e for e in reply.errors if e.path.endswith("broken/TOOL.hdlp"))
    assert (err.line, err.column) == (3, 9)
    assert "unclosed '['" in err.message
    assert {t.name for t in reply.tools} >= {"shell-exec", "git-ops", "file-read", "file-write", "http-request"}
    assert (await stub.Call(request("shell-exec", cmd="echo still here"))).output == b"still here\n"


async def test_a_file_that_breaks_after_loading_keeps_its_last_good_version(stub, write_tool: WriteTool) -> None:
    path = write_tool("steady", command="echo good")

    async def says_good() -> bool:
        return (await stub.Call(request("steady"))).output == b"good\n"

    assert await until(says_good, within=1.0)
    path.write_text(path.read_text().replace("executor: shell", "executor: teleport"))

    async def reported() -> bool:
        reply = await stub.ListTools(pb.ListToolsRequest())
        return any(e.serving_previous == "steady" for e in reply.errors)

    assert await until(reported, within=1.0)
    reply = await stub.ListTools(pb.ListToolsRequest())
    err = next(e for e in reply.errors if e.serving_previous == "steady")
    assert "unknown executor 'teleport'" in err.message
    assert await says_good()


# ---------------------------------------------------------------- params and confirmation


async def test_bad_params_name_each_parameter(stub) -> None:
    result = await stub.Call(request("git-ops", action="rebase", n="many", colour="red"))
    assert not result.ok and result.found
    named = {p.param for p in result.param_errors}
    assert named == {"action", "n", "colour", "repo"}
    assert all(p.message for p in result.param_errors)


async def test_params_are_coerced_by_the_schema(stub, write_tool: WriteTool, tools_root: Path) -> None:
    write_tool("counter", command="seq {n}", params="{ n: { type: integer, required: true, max: 5 } }")
    await asyncio.sleep(0)

    async def ready() -> bool:
        return (await stub.Call(request("counter", n="3"))).output == b"1\n2\n3\n"

    assert await until(ready, within=1.0)
    too_big = await stub.Call(request("counter", n=9))
    assert [p.param for p in too_big.param_errors] == ["n"]


async def test_a_confirm_tool_runs_only_with_its_token_and_exact_params(
        stub, sidecar, write_tool: WriteTool, tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    approve(sidecar, "danger")   # it declares exec and fs_write (it runs touch, writes tmp_path)
    write_tool("danger", command="touch {path}", confirm=True, permissions=writes_to(tmp_path),
               params="{ path: { type: string, required: true } }")

    async def loaded() -> bool:
        return (await stub.Call(request("danger", path=str(marker)))).needs_confirmation

    assert await until(loaded, within=1.0)
    first = await stub.Call(request("danger", path=str(marker)))
    assert first.needs_confirmation and first.confirm_token and not first.ok
    assert not marker.exists()

    other = await stub.Call(request("danger", first.confirm_token, path=str(tmp_path / "elsewhere")))
    assert not other.ok and not other.needs_confirmation and "other parameters" in other.error
    assert not (tmp_path / "elsewhere").exists()

    ran = await stub.Call(request("danger", first.confirm_token, path=str(marker)))
    assert ran.ok and marker.exists()

    again = await stub.Call(request("danger", first.confirm_token, path=str(marker)))
    assert not again.ok and "already used" in again.error


# ---------------------------------------------------------------- time, size, streams


@pytest.mark.host_proc
async def test_timeout_kills_the_process_group_and_keeps_the_output_so_far(stub, write_tool: WriteTool,
                                                                          tmp_path: Path) -> None:
    pidfile = tmp_path / "grandchild.pid"
    write_tool("slow", timeout_ms=300, params="{ pidfile: { type: string, required: true } }",
               command="/bin/sh -c 'echo started; { read p _ < /proc/self/stat; echo $p > \"$1\"; exec sleep 30; } & "
                       "wait' slow {pidfile}")

    async def loaded() -> bool:
        return (await stub.ListTools(pb.ListToolsRequest())).tools and any(
            t.name == "slow" for t in (await stub.ListTools(pb.ListToolsRequest())).tools)

    assert await until(loaded, within=1.0)
    result = await stub.Call(request("slow", pidfile=str(pidfile)))
    assert result.timed_out and not result.ok
    assert result.output == b"started\n"
    assert re.search(r"timed out after (29\d|300) ms", result.error), result.error   # counted from the executor's start
    grandchild = int(pidfile.read_text())

    async def dead() -> bool:   # SIGKILL is sent; its delivery and the reaping are not instant
        return not _alive(grandchild)

    assert await until(dead, within=5.0), "the whole process group must be killed"


@pytest.mark.host_proc
async def test_the_callers_deadline_bounds_the_call(stub, tmp_path: Path) -> None:
    pidfile = tmp_path / "pid"
    started = time.monotonic()
    result = await stub.Call(request("shell-exec", cmd=f"read p _ < /proc/self/stat; echo $p > {pidfile}; echo waiting; exec sleep 30"),
                             timeout=1.0)
    # bitong stops the tool just before the caller's deadline, so the answer is the
    # real result with the output so far, not a bare DEADLINE_EXCEEDED
    assert result.timed_out and not result.ok
    assert result.output == b"waiting\n"
    assert "caller's deadline" in result.error
    assert time.monotonic() - started < 5
    pid = int(pidfile.read_text())

    async def dead() -> bool:
        return not _alive(pid)

    assert await until(dead, within=5.0), "the process must die with the caller's deadline"


@pytest.mark.host_proc
async def test_a_cancelled_call_kills_its_process_group(stub, tmp_path: Path) -> None:
    pidfile = tmp_path / "pid"
    call = stub.Call(request("shell-exec", cmd=f"{{ read p _ < /proc/self/stat; echo $p > {pidfile}; exec sleep 30; }} & wait"))

    async def started() -> bool:
        return pidfile.exists() and pidfile.read_text().strip() != ""

    assert await until(started, within=5.0)
    call.cancel()
    with pytest.raises(asyncio.CancelledError):
        await call

    async def dead() -> bool:
        return not _alive(int(pidfile.read_text()))

    assert await until(dead, within=5.0), "cancelling the call must kill everything it started"


async def test_output_beyond_max_output_bytes_is_cut_and_said(stub, sidecar, write_tool: WriteTool) -> None:
    approve(sidecar, "chatty")   # it declares exec (a pipe of two programs)
    write_tool("chatty", max_output_bytes=1000, command="/bin/sh -c 'yes | head -c 5000000; echo done >&2'",
               permissions="exec: true")

    async def ready() -> bool:
        return (await stub.Call(request("chatty"))).found

    assert await until(ready, within=1.0)
    result = await stub.Call(request("chatty"))
    assert result.truncated
    assert len(result.output) == 1000
    assert result.stderr == b"done\n"
    assert result.exit_code == 0


async def test_stream_call_sends_chunks_as_produced_and_ends_with_the_result(stub) -> None:
    cmd = "for i in 1 2 3; do echo out$i; echo err$i >&2; done; head -c 300000 /dev/zero; exit 4"
    events = [e async for e in stub.StreamCall(request("shell-exec", cmd=cmd))]
    *chunks, last = events
    assert last.WhichOneof("event") == "result"
    assert all(e.WhichOneof("event") == "chunk" for e in chunks)
    stdout = b"".join(e.chunk.data for e in chunks if e.chunk.stream == pb.OutputChunk.STDOUT)
    stderr = b"".join(e.chunk.data for e in chunks if e.chunk.stream == pb.OutputChunk.STDERR)
    assert stdout == b"out1\nout2\nout3\n" + b"\0" * 300000  # beyond max_output_bytes: streams are not capped
    assert stderr == b"err1\nerr2\nerr3\n"
    result = last.result
    assert result.exit_code == 4 and not result.ok
    assert result.streamed_stdout_bytes == len(stdout) and result.streamed_stderr_bytes == len(stderr)


async def test_health_reports_serving(sidecar) -> None:
    async with grpc.aio.insecure_channel(sidecar.address) as channel:
        health = health_pb2_grpc.HealthStub(channel)
        for service in ("", "bitong.v1.ToolAgent"):
            reply = await health.Check(health_pb2.HealthCheckRequest(service=service))
            assert reply.status == health_pb2.HealthCheckResponse.SERVING


async def test_match_returns_scored_candidates_with_their_tool(stub) -> None:
    reply = await stub.Match(pb.MatchRequest(intent="看看 /opt/agent 仓库最近的提交记录"))
    assert reply.found
    assert reply.candidates[0].name == "git-ops"
    assert reply.candidates[0].tool.name == "git-ops"
    assert 1 <= len(reply.candidates) <= 3
    scores = [c.score for c in reply.candidates]
    assert scores == sorted(scores, reverse=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie is dead for our purposes (its parent was killed and init reaps it)
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().split(")")[-1].split()[0] != "Z"
    except FileNotFoundError:
        return False


async def test_a_path_outside_the_allow_list_is_refused_before_any_confirmation(
        stub, sidecar, write_tool: WriteTool, tmp_path: Path) -> None:
    from bitong.agent.registry.approval import Grant

    text = tool_text("guarded-rm", command="rm -- {path}", confirm=True,
                     params="{ path: { type: string, required: true, normalize: [path] } }")
    text = text.replace("author:", f'permissions: {{ fs_write: true, fs_write_paths: ["{tmp_path}/**"] }}\nauthor:')
    policy = sidecar.registry.approval   # fs_write is sensitive: approve this tool as a config would
    sidecar.registry.approval = dataclasses.replace(policy, grants=(*policy.grants, Grant("guarded-rm")))
    write_tool("guarded-rm", text)

    async def loaded() -> bool:
        return (await stub.Call(request("guarded-rm", path=str(tmp_path / "x")))).needs_confirmation

    assert await until(loaded, within=1.0)
    outside = await stub.Call(request("guarded-rm", path="/etc/hostname"))
    assert not outside.ok and not outside.needs_confirmation and not outside.confirm_token
    assert [p.param for p in outside.param_errors] == ["path"]
    assert "fs_write_paths" in outside.param_errors[0].message


async def test_reflection_lets_generic_clients_discover_the_contract(sidecar) -> None:
    from google.protobuf import descriptor_pb2
    from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

    async with grpc.aio.insecure_channel(sidecar.address) as channel:
        stub = reflection_pb2_grpc.ServerReflectionStub(channel)
        requests = [reflection_pb2.ServerReflectionRequest(list_services=""),
                    reflection_pb2.ServerReflectionRequest(file_containing_symbol="bitong.v1.ToolAgent")]
        replies = [r async for r in stub.ServerReflectionInfo(iter(requests))]
    services = {s.name for s in replies[0].list_services_response.service}
    assert {"bitong.v1.ToolAgent", "grpc.health.v1.Health"} <= services
    files = [descriptor_pb2.FileDescriptorProto.FromString(b)
             for b in replies[1].file_descriptor_response.file_descriptor_proto]
    agent = next(f for f in files if f.name == "bitong/v1/agent.proto")
    assert [m.name for m in agent.service[0].method] == ["Match", "Call", "StreamCall", "ListTools", "WatchTools",
                                                         "Subscribe"]


async def test_a_served_call_says_it_ran_sandboxed_and_what_ran(stub) -> None:
    result = await stub.Call(request("shell-exec", cmd="ls /proc | grep -c '^[0-9]'"))
    assert result.ok and result.sandboxed
    assert list(result.argv) == ["/bin/sh", "-c", 'cd -- "$1" && exec /bin/sh -c "$2"', "shell-exec", ".",
                                 "ls /proc | grep -c '^[0-9]'"]
    assert int(result.output) < 10   # the call's own processes only


async def test_an_edited_pinned_tool_is_reported_over_grpc_and_its_approved_version_keeps_serving(
        tools_root: Path, tmp_path: Path, write_tool: WriteTool) -> None:
    """The cache agent applies the approvals at every rescan while serving (hot reload)."""
    import hashlib

    from bitong.agent import config
    from bitong.agent.serving.server import Sidecar
    from bitong.v1 import agent_pb2_grpc as pb_grpc

    reviewed = tool_text("runner", command="echo reviewed") + "permissions: { exec: true }\n"
    path = write_tool("runner", reviewed)
    pin = hashlib.sha256(reviewed.encode()).hexdigest()[:12]
    cfg = config.from_dict({"approve": {"tools": [f"runner@{pin}"]}}, "prod.toml")
    car = Sidecar([str(tools_root)], f"unix:{tmp_path}/pinned.sock", config=cfg, poll_s=0.05, grace_s=1)
    await car.start()
    try:
        async with grpc.aio.insecure_channel(car.address) as channel:
            agent = pb_grpc.ToolAgentStub(channel)
            listed = await agent.ListTools(pb.ListToolsRequest())
            assert [t.name for t in listed.tools] == ["file-read", "file-stats", "git-ops", "runner"]
            shell = next(e for e in listed.errors if e.path.endswith("shell-exec/TOOL.hdlp"))
            assert list(shell.unapproved) == ["exec"] and "prod.toml does not approve" in shell.message

            write_tool("runner", reviewed.replace("echo reviewed", "echo edited"))

            async def reported() -> bool:   # (a rescan may first see the file half-written: an "empty file" error)
                errors = (await agent.ListTools(pb.ListToolsRequest())).errors
                return any(e.path == str(path) and e.unapproved for e in errors)

            assert await until(reported, within=10.0)
            errors = (await agent.ListTools(pb.ListToolsRequest())).errors
            err = next(e for e in errors if e.path == str(path))
            assert list(err.unapproved) == ["exec"] and err.serving_previous == "runner"
            assert f"only for runner@{pin}" in err.message
            ran = await agent.Call(request("runner"))
            assert ran.ok and ran.output == b"reviewed\n"   # the approved version, not the edit
    finally:
        await car.stop(0)


# ---------------------------------------------------------------- ListTools pages


async def test_list_tools_pages_walk_every_tool_exactly_once(start_sidecar, write_tool: WriteTool,
                                                             tmp_path: Path) -> None:
    for i in range(12):
        write_tool(f"paged-{i:02d}")
    write_tool("paged-broken", "name: paged-broken\ndisplay: x\nintent: [unclosed\n")
    car = await start_sidecar(f"unix:{tmp_path}/paged.sock")
    async with grpc.aio.insecure_channel(car.address) as channel:
        stub = pb_grpc.ToolAgentStub(channel)
        whole = await stub.ListTools(pb.ListToolsRequest())   # page_size 0: the default page holds them all
        assert not whole.next_page_token
        seen: list[str] = []
        errors: list[list[str]] = []
        token = ""
        while True:
            page = await stub.ListTools(pb.ListToolsRequest(page_size=5, page_token=token))
            assert len(page.tools) <= 5
            seen += [t.name for t in page.tools]
            errors.append([e.path for e in page.errors])
            token = page.next_page_token
            if not token:
                break
    assert seen == sorted(t.name for t in whole.tools) and len(seen) == len(set(seen)) > 12
    assert len(errors) == -(-len(seen) // 5)                      # no empty last page
    assert any(p.endswith("paged-broken/TOOL.hdlp") for p in errors[0])   # load errors: the first page only
    assert all(not e for e in errors[1:])


async def test_a_page_token_the_server_did_not_give_is_invalid_argument(stub) -> None:
    for token in ("garbage", "n1.%%%", "n1." + "gA=="):   # not ours; not base64; not UTF-8
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await stub.ListTools(pb.ListToolsRequest(page_token=token))
        assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "next_page_token" in refused.value.details()
    with pytest.raises(grpc.aio.AioRpcError) as negative:
        await stub.ListTools(pb.ListToolsRequest(page_size=-1))
    assert negative.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "page_size" in negative.value.details()
