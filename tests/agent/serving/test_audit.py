"""The audit trail: one JSON line per Call, written before the reply, synced, rotated, readable.

End to end on a real sidecar (a real unix socket, real processes, a real
HTTP server on loopback); the file is read the moment each reply arrives,
with no waiting: the line must already be there.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import grpc
import pytest
from google.protobuf import struct_pb2

from bitong.agent.serving import audit
from bitong.agent.serving.audit import AuditLog, Redactor, Trail
from bitong.agent.config import Secret, from_dict
from bitong.agent.serving.identity import VIA_UNIX
from bitong.v1 import agent_pb2 as pb
from bitong.v1 import agent_pb2_grpc as pb_grpc
from tests.fakes.scene import TOKEN, TOKEN_VAR, config_for
from tests.fakes.server import FakeServer
from tests.support import WriteTool


def _request(tool: str, confirm_token: str = "", **params: object) -> pb.CallRequest:
    struct = struct_pb2.Struct()
    struct.update(params)
    return pb.CallRequest(tool=tool, params=struct, confirm_token=confirm_token)


def _lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


async def _until(predicate: Any, within: float = 10.0) -> bool:
    """Wait for the server's file watch to load a tool written by the test."""
    end = time.monotonic() + within
    while time.monotonic() < end:
        if await predicate():
            return True
        await asyncio.sleep(0.01)
    return bool(await predicate())


@pytest.fixture
async def audited(start_sidecar: Any, tmp_path: Path, server: FakeServer, token: str) -> Any:
    """A sidecar with --audit and the HTTP executors' config (its token is a configured secret)."""
    trail = tmp_path / "audit.jsonl"
    # http-request may reach the loopback fake server: loopback is reachable only when listed (sandbox rules)
    config = config_for(server.url, network_hosts={"http-request": ["127.0.0.1"]})
    car = await start_sidecar(f"unix:{tmp_path}/bitong.sock", config=config, audit_path=str(trail))
    async with grpc.aio.insecure_channel(car.address) as channel:
        yield pb_grpc.ToolAgentStub(channel), trail


def shell_exec_runtime(tmp_path: Path) -> Path:
    """The bundled shell-exec's runtime/ in the test's tools root: where a call may leave a file the test sees."""
    folder = tmp_path / "tools" / "shell-exec" / "runtime"
    folder.mkdir(parents=True, exist_ok=True)
    return folder


# ---------------------------------------------------------------- each outcome's line

async def test_a_successful_call_is_one_line_there_when_the_reply_arrives(audited: Any) -> None:
    stub, trail = audited
    result = await stub.Call(_request("shell-exec", cmd="echo audited", cwd="/tmp"))
    assert result.ok
    (line,) = _lines(trail)   # read at once: written before the reply went out
    assert line["tool"] == "shell-exec" and line["rpc"] == "Call" and line["outcome"] == "ok"
    assert line["caller"] == f"uid:{os.getuid()}" and line["caller_via"] == VIA_UNIX
    assert line["version"] and len(line["sha256"]) == 64 and line["executor"] == "shell"
    assert line["params"] == {"cmd": "echo audited", "cwd": "/tmp"}
    assert line["argv"] == list(result.argv) and line["argv"][-1] == "echo audited"
    assert line["confirmation"] == "not_required" and line["sandboxed"] is True
    assert line["exit_code"] == 0 and line["stdout_bytes"] == len(b"audited\n") and line["bytes_out"] == 8
    assert line["timed_out"] is False and line["truncated"] is False
    assert line["time"].endswith("Z") and isinstance(line["duration_ms"], int)


async def test_a_failed_call_keeps_its_exit_code_and_error(audited: Any) -> None:
    stub, trail = audited
    result = await stub.Call(_request("shell-exec", cmd="echo oops >&2; exit 3", cwd="/tmp"))
    assert not result.ok
    (line,) = _lines(trail)
    assert line["outcome"] == "failed" and line["exit_code"] == 3 and line["stderr_bytes"] == 5
    assert line["error"] == result.error


async def test_refused_calls_are_lines_too(audited: Any) -> None:
    stub, trail = audited
    assert not (await stub.Call(_request("no-such-tool"))).found
    bad = await stub.Call(_request("shell-exec", cwd="/tmp"))   # cmd is required
    assert bad.param_errors
    with pytest.raises(grpc.aio.AioRpcError) as too_many:
        await stub.Call(_request("shell-exec", **{f"p{i}": i for i in range(100)}))
    assert too_many.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    lines = _lines(trail)
    assert [(e["tool"], e["outcome"]) for e in lines] == [
        ("no-such-tool", "not_found"), ("shell-exec", "bad_params"), ("shell-exec", "refused")]
    assert lines[1]["param_errors"][0]["param"] == "cmd" and lines[1]["argv"] == []
    assert lines[2]["status"] == "INVALID_ARGUMENT" and "max_params" in lines[2]["error"]


async def test_a_confirmation_is_requested_then_confirmed(audited: Any, write_tool: WriteTool) -> None:
    stub, trail = audited
    write_tool("careful", command="echo done", confirm=True)

    async def loaded() -> bool:
        return any(t.name == "careful" for t in (await stub.ListTools(pb.ListToolsRequest())).tools)

    assert await _until(loaded)
    first = await stub.Call(_request("careful"))
    assert first.needs_confirmation
    assert (await stub.Call(_request("careful", confirm_token=first.confirm_token))).ok
    assert not (await stub.Call(_request("careful", confirm_token=first.confirm_token))).ok   # spent
    assert [(e["confirmation"], e["outcome"]) for e in _lines(trail)] == [
        ("requested", "needs_confirmation"), ("confirmed", "ok"), ("refused", "failed")]


async def test_a_timeout_and_a_cut_are_in_the_line(audited: Any, write_tool: WriteTool) -> None:
    stub, trail = audited
    result = await stub.Call(_request("shell-exec", cmd="head -c 200000 /dev/zero", cwd="/tmp"))
    assert result.truncated
    line = _lines(trail)[0]
    assert line["truncated"] is True and line["stdout_bytes"] == len(result.output)
    write_tool("slow", command="sleep 5", timeout_ms=100)

    async def loaded() -> bool:
        return any(t.name == "slow" for t in (await stub.ListTools(pb.ListToolsRequest())).tools)

    assert await _until(loaded)
    assert (await stub.Call(_request("slow"))).timed_out
    line = _lines(trail)[1]
    assert line["outcome"] == "timed_out" and line["timed_out"] is True and line["argv"] == ["sleep", "5"]


async def test_an_http_call_logs_its_request_line_without_the_secret(audited: Any, server: FakeServer) -> None:
    stub, trail = audited
    server.route("GET", r"/hello", lambda ex: ex.send(200, "hi"))
    url = f"{server.url}/hello?key={TOKEN}"   # a caller pasting the configured token into a URL
    result = await stub.Call(_request("http-request", url=url))
    assert result.ok and result.http_status == 200
    assert result.http_request.startswith(f"GET {server.url}/hello?key=")
    line = _lines(trail)[0]
    assert line["http_request"] == f"GET {server.url}/hello?key=[redacted: environment variable {TOKEN_VAR}]"
    assert line["params"]["url"] == f"{server.url}/hello?key=[redacted: environment variable {TOKEN_VAR}]"
    assert line["http_status"] == 200 and line["argv"] == []
    assert TOKEN not in trail.read_text()


async def test_a_stream_call_is_audited_with_the_bytes_it_streamed(audited: Any) -> None:
    stub, trail = audited
    events = [e async for e in stub.StreamCall(_request("shell-exec", cmd="echo streamed", cwd="/tmp"))]
    assert events[-1].result.ok
    line = _lines(trail)[0]
    assert line["rpc"] == "StreamCall" and line["stdout_bytes"] == len(b"streamed\n")


# ---------------------------------------------------------------- the file

def test_the_file_is_0600_rotates_by_size_and_keeps_n(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    log = AuditLog(str(path), max_bytes=1024, keep=2)
    for n in range(40):
        log.write({"n": n, "pad": "x" * 100})
    log.close()
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    files = sorted(p.name for p in tmp_path.iterdir())
    assert files == ["audit.jsonl", "audit.jsonl.1", "audit.jsonl.2"]   # older ones dropped
    assert all(p.stat().st_size <= 1024 for p in tmp_path.iterdir())
    kept = [json.loads(line)["n"] for p in ("audit.jsonl.2", "audit.jsonl.1", "audit.jsonl")
            for line in (tmp_path / p).read_text().splitlines()]
    assert kept == list(range(40 - len(kept), 40))   # the newest, in order, none missing in between
    read = [entry["n"] for _, _, entry in audit.read(str(path)) if isinstance(entry, dict)]
    assert read == kept


def test_secrets_are_redacted_wherever_they_appear(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("API_TOKEN", "hunter2-long-secret")
    file_secret = tmp_path / "secret"
    file_secret.write_text("file-held-secret\n")
    redactor = Redactor([Secret("env", "API_TOKEN"), Secret("file", str(file_secret))])
    shown = redactor.value({"cmd": "curl -H 'X: hunter2-long-secret' u", "nested": ["a file-held-secret b"],
                            "password": "typed-by-hand", "long": "y" * 5000})
    assert shown["cmd"] == "curl -H 'X: [redacted: environment variable API_TOKEN]' u"
    assert shown["nested"] == [f"a [redacted: file {file_secret}] b"]
    assert shown["password"] == "[redacted: parameter name]"
    assert shown["long"].endswith("…(5000 chars)") and len(shown["long"]) < 1100
    straddling = redactor.value("z" * 1010 + "hunter2-long-secret")   # the cut would fall inside the secret
    assert "hunter2" not in straddling and "hunter" not in straddling


def test_a_line_for_the_cli_reader(tmp_path: Path) -> None:
    path = tmp_path / "a.jsonl"
    log = AuditLog(str(path))
    trail = Trail(started=time.time() - 7200)
    result = pb.CallResult(ok=True, found=True, tool="t", exit_code=0, duration_ms=3)
    result.argv.extend(["echo", "hi"])
    log.write(audit.record(trail, "old-tool", {}, result, Redactor()))
    log.write(audit.record(Trail(), "new-tool", {}, result, Redactor()))
    log.close()
    out = subprocess.run([sys.executable, "-m", "bitong", "audit-log", str(path), "--since", "1h"],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0
    assert "new-tool" in out.stdout and "old-tool" not in out.stdout and "ran: echo hi" in out.stdout
    out = subprocess.run([sys.executable, "-m", "bitong", "audit-log", str(path), "--tool", "old-*", "--json",
                          "--caller", "local"], capture_output=True, text=True, timeout=60)
    assert [json.loads(line)["tool"] for line in out.stdout.splitlines()] == ["old-tool"]
    bad = subprocess.run([sys.executable, "-m", "bitong", "audit-log", str(path), "--since", "yesterday"],
                         capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and "expected a time" in bad.stderr


# ---------------------------------------------------------------- a clean shutdown

def test_sigterm_drains_and_every_line_is_in_the_file(tools_root: Path, tmp_path: Path) -> None:
    """A call in flight when SIGTERM arrives finishes, and its line is written and synced before exit."""
    trail = tmp_path / "audit.jsonl"
    sock = tmp_path / "b.sock"
    started = shell_exec_runtime(tmp_path) / "started"   # its one writable host folder (sandbox)
    proc = subprocess.Popen([sys.executable, "-m", "bitong", "serve", "--tools", str(tools_root), "--no-semantic",
                             "--listen", f"unix:{sock}", "--audit", str(trail)],
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().startswith("bitong: serving on")
        with grpc.insecure_channel(f"unix:{sock}") as channel:
            stub = pb_grpc.ToolAgentStub(channel)
            future = stub.Call.future(_request("shell-exec", cmd=f"touch {started}; sleep 0.5; echo drained",
                                               cwd="/tmp"))
            deadline = time.monotonic() + 20
            while not started.exists():   # the call is running: now stop the server under it
                assert time.monotonic() < deadline, "the call never started"
                time.sleep(0.01)
            proc.send_signal(signal.SIGTERM)
            result = future.result(timeout=20)
        assert result.ok and result.output == b"drained\n"
        assert proc.wait(timeout=30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()
    (line,) = _lines(trail)
    assert line["outcome"] == "ok" and line["argv"][-1].endswith("echo drained")


def test_an_audit_file_that_cannot_be_opened_stops_serve(tools_root: Path, tmp_path: Path) -> None:
    out = subprocess.run([sys.executable, "-m", "bitong", "serve", "--tools", str(tools_root), "--no-semantic",
                          "--listen", f"unix:{tmp_path}/b.sock", "--audit", str(tmp_path / "no" / "dir" / "a")],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 2 and "No such file or directory" in out.stderr


def test_configured_caller_tokens_are_redacted_too(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CALLER_T", "caller-token-value")
    config = from_dict({"auth": {"tokens": {"a": {"token_env": "CALLER_T"}}}})
    assert Redactor(config.secrets()).text("x caller-token-value y") == \
        "x [redacted: environment variable CALLER_T] y"


async def test_a_call_cut_off_by_the_end_of_the_grace_period_is_still_a_line(
        start_sidecar: Any, tmp_path: Path) -> None:
    trail = tmp_path / "audit.jsonl"
    started = shell_exec_runtime(tmp_path) / "started"   # its one writable host folder (sandbox)
    car = await start_sidecar(f"unix:{tmp_path}/b.sock", audit_path=str(trail))
    async with grpc.aio.insecure_channel(car.address) as channel:
        call = pb_grpc.ToolAgentStub(channel).Call(_request("shell-exec", cmd=f"touch {started}; sleep 30",
                                                            cwd="/tmp"))
        assert await _until(lambda: _exists(started))
        await car.stop(0.1)   # the grace ends long before the sleep: the call is cancelled
        with pytest.raises(grpc.aio.AioRpcError):
            await call
    (line,) = _lines(trail)
    assert line["outcome"] == "refused" and line["status"] == "CANCELLED"


async def _exists(path: Path) -> bool:
    return path.exists()
