"""The unix socket: created 0600 (or --socket-mode), and the peer's uid (SO_PEERCRED) is the caller.

Another user is a real process running as uid 65534 (``setpriv``): it
connects to the sidecar's socket itself, and relays the test's gRPC client
through its own connection, so the server sees uid 65534 as the kernel
reports it.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import stat
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from google.protobuf import struct_pb2

from bitong.agent.config import from_dict
from bitong.agent.serving.listen import Security
from bitong.agent.serving.peercred import parse_mode
from bitong.v1 import agent_pb2 as pb
from bitong.v1 import agent_pb2_grpc as pb_grpc

NOBODY = 65534

# A relay that runs as another user: accept on RELAY, connect to TARGET as that user, copy both ways.
RELAY = r"""
import os, socket, sys, threading
relay, target = sys.argv[1], sys.argv[2]
srv = socket.socket(socket.AF_UNIX)
srv.bind(relay)
srv.listen(8)
def pipe(a, b):
    try:
        while data := a.recv(65536):
            b.sendall(data)
    except OSError:
        pass
    finally:
        for s in (a, b):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
print(f"ready uid={os.getuid()}", flush=True)
while True:
    client, _ = srv.accept()
    upstream = socket.socket(socket.AF_UNIX)
    try:
        upstream.connect(target)
    except OSError as exc:
        print(f"connect failed: {exc.strerror}", flush=True)
        client.close()
        continue
    threading.Thread(target=pipe, args=(client, upstream), daemon=True).start()
    threading.Thread(target=pipe, args=(upstream, client), daemon=True).start()
"""

PROBE = "import socket, sys\ns = socket.socket(socket.AF_UNIX)\ntry:\n    s.connect(sys.argv[1])\n" \
        "    print('connected')\nexcept OSError as exc:\n    print(exc.strerror)\n"


def _as_nobody() -> list[str]:
    if os.geteuid() != 0 or shutil.which("setpriv") is None:
        pytest.skip("needs root and setpriv to run a client as another user")
    return ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", sys.executable, "-c"]


@pytest.fixture
def open_dir() -> Iterator[Path]:
    """A folder another user can reach (pytest's tmp_path is 0700)."""
    path = Path(tempfile.mkdtemp(prefix="bitong-peer-"))
    path.chmod(0o777)
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def relay(open_dir: Path) -> Iterator[Any]:
    procs: list[subprocess.Popen[str]] = []

    def start(target: str) -> str:
        path = str(open_dir / f"relay{len(procs)}.sock")
        proc = subprocess.Popen([*_as_nobody(), RELAY, path, target], stdout=subprocess.PIPE, text=True)
        procs.append(proc)
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == f"ready uid={NOBODY}"   # waits for the listener
        return f"unix:{path}"

    yield start
    for proc in procs:
        proc.kill()
        proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()


def _echo(text: str) -> pb.CallRequest:
    params = struct_pb2.Struct()
    params.update({"cmd": f"echo {text}", "cwd": "/tmp"})
    return pb.CallRequest(tool="shell-exec", params=params)


def test_socket_modes_are_octal_and_leave_the_owner_in() -> None:
    assert parse_mode("0600") == 0o600 and parse_mode("660") == 0o660 and parse_mode("0o666") == 0o666
    with pytest.raises(ValueError, match="octal"):
        parse_mode("rw-------")
    with pytest.raises(ValueError, match="owner needs write"):
        parse_mode("0400")


async def test_the_socket_is_0600_and_another_user_cannot_connect(start_sidecar: Any, open_dir: Path) -> None:
    car = await start_sidecar(f"unix:{open_dir}/bitong.sock")
    path = open_dir / "bitong.sock"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    probe = subprocess.run([*_as_nobody(), PROBE, str(path)], capture_output=True, text=True, timeout=30)
    assert probe.stdout.strip() == "Permission denied"
    async with grpc.aio.insecure_channel(car.address) as channel:   # the owner (this test, as root) can
        assert (await pb_grpc.ToolAgentStub(channel).Call(_echo("owner"))).ok


async def test_the_peer_uid_is_the_caller_and_its_policy_applies(
        start_sidecar: Any, open_dir: Path, relay: Any) -> None:
    trail = open_dir / "audit.jsonl"
    config = from_dict({"callers": {f"uid:{os.getuid()}": {"tools": ["*"]},
                                    f"uid:{NOBODY}": {"tools": ["system-*"]}}})
    car = await start_sidecar(f"unix:{open_dir}/bitong.sock", config=config, audit_path=str(trail),
                              security=Security(socket_mode=0o666))
    assert stat.S_IMODE((open_dir / "bitong.sock").stat().st_mode) == 0o666
    async with grpc.aio.insecure_channel(car.address) as channel:
        assert (await pb_grpc.ToolAgentStub(channel).Call(_echo("mine"))).ok
    async with grpc.aio.insecure_channel(relay(str(open_dir / "bitong.sock"))) as channel:
        stub = pb_grpc.ToolAgentStub(channel)
        with pytest.raises(grpc.aio.AioRpcError) as denied:
            await stub.Call(_echo("nobody"))
        assert denied.value.code() == grpc.StatusCode.PERMISSION_DENIED
        assert f'[callers."uid:{NOBODY}"] allows system-*' in (denied.value.details() or "")
        listed = await stub.ListTools(pb.ListToolsRequest())
        assert [t.name for t in listed.tools] == []
    lines = [json.loads(line) for line in trail.read_text().splitlines()]
    assert [(e["caller"], e["caller_uid"], e["outcome"]) for e in lines] == [
        (f"uid:{os.getuid()}", os.getuid(), "ok"), (f"uid:{NOBODY}", NOBODY, "refused")]
    assert lines[1]["status"] == "PERMISSION_DENIED"


async def test_a_connection_that_bypasses_the_front_is_refused(start_sidecar: Any, tmp_path: Path) -> None:
    car = await start_sidecar(f"unix:{tmp_path}/bitong.sock")
    async with grpc.aio.insecure_channel(car.front.grpc_address) as channel:   # gRPC's own socket, directly
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await pb_grpc.ToolAgentStub(channel).Call(_echo("sneaky"))
    assert refused.value.code() == grpc.StatusCode.UNAUTHENTICATED


async def test_a_live_socket_is_not_taken_over_and_a_stale_one_is_replaced(
        start_sidecar: Any, tmp_path: Path) -> None:
    path = tmp_path / "bitong.sock"
    await start_sidecar(f"unix:{path}")
    with pytest.raises(OSError, match="another server is listening on it"):
        await start_sidecar(f"unix:{path}")
    stale_path = tmp_path / "stale.sock"
    stale = socket.socket(socket.AF_UNIX)
    stale.bind(str(stale_path))
    stale.close()   # bound, never listening: what a killed server leaves behind
    car = await start_sidecar(f"unix:{stale_path}")
    async with grpc.aio.insecure_channel(car.address) as channel:
        assert (await pb_grpc.ToolAgentStub(channel).Call(_echo("fresh"))).ok
    (tmp_path / "file").write_text("not a socket")
    with pytest.raises(OSError, match="not a socket"):
        await start_sidecar(f"unix:{tmp_path}/file")
