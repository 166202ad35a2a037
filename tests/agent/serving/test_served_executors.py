"""The configured executors behind the real gRPC sidecar, and the secret that must never show.

A sidecar started with a config (``Sidecar(config=...)``, ``bitong serve
--config``) calls real local servers; every log record (at DEBUG) and every
result is searched for the token's value, which the servers must still
have received.
"""

from __future__ import annotations

import logging
import os
import re
import signal
import socket
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any
from collections.abc import AsyncIterator, Iterator

import grpc
import pytest
from google.protobuf import struct_pb2

from bitong.agent.registry.approval import Policy, parse
from bitong.agent.serving.server import Sidecar
from bitong.v1 import agent_pb2 as pb
from bitong.v1 import agent_pb2_grpc as pb_grpc
from tests.fakes.forgejo import Forgejo
from tests.fakes.gatekeeper import Gatekeeper
from tests.fakes.scene import TOKEN, TOKEN_VAR, config_for, write_tool_folder
from tests.fakes.server import FakeServer

BITONG = [sys.executable, "-m", "bitong"]


def request(tool: str, **params: Any) -> pb.CallRequest:
    struct = struct_pb2.Struct()
    struct.update(params)
    return pb.CallRequest(tool=tool, params=struct)


@pytest.fixture
def services(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Gatekeeper, Forgejo, FakeServer]]:
    monkeypatch.setenv(TOKEN_VAR, TOKEN)
    with Gatekeeper("BS-GZ-006", TOKEN) as gk, Forgejo(TOKEN) as fj, FakeServer() as web:
        fj.add_repo("zhuyuan", "native-repo")
        fj.commit("zhuyuan", "native-repo", {"README.md": "hello"}, "init")
        yield gk, fj, web


def write_tools(root: Path, web: FakeServer) -> None:
    write_tool_folder(root, "gk-exec", executor="gatekeeper", method="exec", params="{ cmd: { type: string } }",
                      extra="endpoint: BS-GZ-006\n")
    write_tool_folder(root, "gk-flaky", executor="gatekeeper", method="exec", params="{ cmd: { type: string } }",
                      extra="endpoint: BS-SG-001\n", retry=2, timeout_ms=2000)
    write_tool_folder(root, "repo-file", executor="git-forgejo", method="get_file",
                      params="{ filepath: { type: string, required: true } }")
    write_tool_folder(root, "web-get", executor="http", method="GET", params="{ url: { type: string } }",
                      extra="permissions: { network: true, network_hosts: [127.0.0.1] }\n", timeout_ms=500)
    write_tool_folder(root, "boom", executor="python", method="run",
                      handler="def run():\n    raise RuntimeError('no')\n")


@pytest.fixture
async def served(services: tuple[Gatekeeper, Forgejo, FakeServer], tmp_path: Path
                 ) -> AsyncIterator[tuple[pb_grpc.ToolAgentStub, tuple[Gatekeeper, Forgejo, FakeServer]]]:
    gk, fj, web = services
    closed = socket.socket()
    closed.bind(("127.0.0.1", 0))
    dead = f"http://127.0.0.1:{closed.getsockname()[1]}"
    closed.close()
    config = config_for(fj.url, gatekeeper={"default": "BS-GZ-006", "endpoints": {
        "BS-GZ-006": {"url": gk.url, "token_env": TOKEN_VAR},
        "BS-SG-001": {"url": dead, "token_env": TOKEN_VAR}}})
    root = tmp_path / "tools"
    write_tools(root, web)
    approvals = Policy(parse(["web-get"]))   # the one tool here that declares a sensitive permission (network)
    car = Sidecar([str(root)], f"unix:{tmp_path}/b.sock", config=config, poll_s=0.1, grace_s=1, approvals=approvals)
    await car.start()
    try:
        async with grpc.aio.insecure_channel(car.address) as channel:
            yield pb_grpc.ToolAgentStub(channel), services
    finally:
        await car.stop(0)


async def test_configured_executors_through_the_sidecar_never_show_the_secret(
        served: tuple[pb_grpc.ToolAgentStub, tuple[Gatekeeper, Forgejo, FakeServer]],
        caplog: pytest.LogCaptureFixture) -> None:
    stub, (gk, fj, web) = served
    caplog.set_level(logging.DEBUG)
    web.route("GET", r"/slow", lambda ex: web.release.wait(30) and None)
    web.route("GET", r"/stream", lambda ex: ex.send_chunked([b"a" * 70000, b"b" * 70000]))
    results: list[bytes] = []

    ran = await stub.Call(request("gk-exec", cmd="uptime"))
    assert ran.ok and b'"node": "BS-GZ-006"' in ran.output and ran.executor == "gatekeeper"
    refused = await stub.Call(request("gk-flaky", cmd="uptime"))
    assert not refused.ok and refused.attempts == 3 and "connection refused by 127.0.0.1:" in refused.error
    file = await stub.Call(request("repo-file", filepath="README.md"))
    assert file.ok and file.output == b"hello"
    missing = await stub.Call(request("repo-file", filepath="nope"))
    assert not missing.ok and missing.http_status == 404 and missing.exit_code == 0
    slow = await stub.Call(request("web-get", url=web.url + "/slow"))
    assert slow.timed_out and re.search(r"timed out after (49\d|500) ms while waiting", slow.error)
    boom = await stub.Call(request("boom"))
    assert not boom.ok and boom.error == "handler raised RuntimeError: no"
    events = [e async for e in stub.StreamCall(request("web-get", url=web.url + "/stream"))]
    *chunks, last = events
    body = b"".join(e.chunk.data for e in chunks if e.chunk.stream == pb.OutputChunk.STDOUT)
    assert body == b"a" * 70000 + b"b" * 70000 and last.result.ok
    assert last.result.streamed_stdout_bytes == 140000 and last.result.output == b""
    results += [r.SerializeToString() for r in (ran, refused, file, missing, slow, boom)]
    results += [e.SerializeToString() for e in events]

    # The servers got the token; nothing that came back or was logged holds it.
    assert gk.requests[-1].headers["authorization"] == f"Bearer {TOKEN}"
    assert fj.requests[-1].headers["authorization"] == f"token {TOKEN}"
    secret = TOKEN.encode()
    assert all(secret not in blob for blob in results)
    assert any("call gk-exec" in r.getMessage() for r in caplog.records), "the sidecar logs its calls"
    assert all(TOKEN not in r.getMessage() for r in caplog.records) and TOKEN not in caplog.text


def test_bitong_serve_with_config_logs_no_secret(services: tuple[Gatekeeper, Forgejo, FakeServer],
                                                 tmp_path: Path) -> None:
    gk, fj, web = services
    root = tmp_path / "tools"
    write_tools(root, web)
    cfg = tmp_path / "bitong.toml"
    cfg.write_text(textwrap.dedent(f"""
        [gatekeeper]
        default = "BS-GZ-006"
        [gatekeeper.endpoints.BS-GZ-006]
        url = "{gk.url}"
        token_env = "{TOKEN_VAR}"
        [gatekeeper.endpoints.BS-SG-001]
        url = "{gk.url}"
        token_env = "{TOKEN_VAR}"

        [git-forgejo]
        url = "{fj.url}"
        token_env = "{TOKEN_VAR}"
        owner = "zhuyuan"
        repo = "native-repo"
        """))
    sock = tmp_path / "b.sock"
    server = subprocess.Popen([*BITONG, "--log-level", "DEBUG", "serve", "--config", str(cfg), "--tools", str(root),
                               "--listen", f"unix:{sock}"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert server.stdout is not None
        assert server.stdout.readline().startswith("bitong: serving on unix:")
        via = subprocess.run([*BITONG, "call", "--server", f"unix:{sock}", "gk-exec", "cmd=hostname"],
                             capture_output=True, text=True, timeout=60)
        assert via.returncode == 0 and '"method": "exec"' in via.stdout
        fetched = subprocess.run([*BITONG, "call", "--server", f"unix:{sock}", "repo-file", "filepath=nope", "--json"],
                                 capture_output=True, text=True, timeout=60)
        assert fetched.returncode == 1 and '"http_status": 404' in fetched.stdout
        server.send_signal(signal.SIGTERM)
        out, err = server.communicate(timeout=30)
    finally:
        if server.poll() is None:
            server.kill()
            server.communicate()
    assert server.returncode == 0
    assert "call gk-exec" in err                   # DEBUG logging was on and the calls were logged
    for text in (out, err, via.stdout, via.stderr, fetched.stdout, fetched.stderr):
        assert TOKEN not in text
    assert gk.requests[-1].headers["authorization"] == f"Bearer {TOKEN}"


def test_in_process_call_takes_the_config_too(services: tuple[Gatekeeper, Forgejo, FakeServer],
                                              tmp_path: Path) -> None:
    gk, fj, web = services
    root = tmp_path / "tools"
    write_tools(root, web)
    cfg = tmp_path / "bitong.toml"
    cfg.write_text(f'[gatekeeper]\n[gatekeeper.endpoints.BS-GZ-006]\nurl = "{gk.url}"\ntoken_env = "{TOKEN_VAR}"\n')
    done = subprocess.run([*BITONG, "call", "--config", str(cfg), "--tools", str(root), "gk-exec", "cmd=id"],
                          capture_output=True, text=True, timeout=60, env=dict(os.environ))
    assert done.returncode == 0 and '"params": {"cmd": "id"}' in done.stdout


def test_a_literal_token_stops_serve_with_the_reason_and_without_the_value(tmp_path: Path) -> None:
    cfg = tmp_path / "bitong.toml"
    cfg.write_text(f'[git-forgejo]\nurl = "https://git.example.org"\ntoken = "{TOKEN}"\n')
    done = subprocess.run([*BITONG, "serve", "--config", str(cfg), "--listen", f"unix:{tmp_path}/s.sock"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert "[git-forgejo] token: a secret is never written in the config file" in done.stderr
    assert TOKEN not in done.stderr and TOKEN not in done.stdout
