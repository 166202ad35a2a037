"""A Node.js client that knows only the .proto files, against a real `bitong serve`.

Users hold out "clients in other languages that know only the proto": this runs
clients/node/client.mjs (grpc-js + proto-loader, no generated code) over a unix
socket and over TCP, and requires every check of its script to pass.
"""

from __future__ import annotations

import json
import selectors
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
CLIENT_DIR = REPO / "clients" / "node"
CLIENT = CLIENT_DIR / "client.mjs"
NODE = shutil.which("node")

# Every check the script runs: a check that silently disappeared is a failure too.
CHECKS = {"health", "list_tools", "match", "match_none", "call_ok", "call_failing", "call_unknown_tool",
          "call_param_errors", "call_struct_types", "stream_call", "call_deadline", "watch_tools"}

pytestmark = [
    pytest.mark.skipif(NODE is None, reason="node is not on PATH (the Node.js client check needs Node 20)"),
    pytest.mark.skipif(not (CLIENT_DIR / "node_modules").is_dir(),
                       reason="clients/node/node_modules is missing: run `npm ci --prefix clients/node`"),
]


def _first_line(proc: subprocess.Popen[str], timeout_s: float) -> str:
    """The server's first stdout line, without hanging the suite if it never comes."""
    assert proc.stdout is not None
    with selectors.DefaultSelector() as sel:
        sel.register(proc.stdout, selectors.EVENT_READ)
        if not sel.select(timeout_s):
            raise AssertionError(f"bitong serve printed nothing in {timeout_s} s")
    return proc.stdout.readline()


@pytest.fixture(params=["unix", "tcp"])
def server_address(request: pytest.FixtureRequest, tools_root: Path, tmp_path: Path) -> Iterator[str]:
    """A `bitong serve` of the bundled tools; yields the address it says it serves on.

    Both transports: grpc-js resolves `unix:` targets itself, and port 0 proves a
    client can take the bound address from the "bitong: serving on" line.
    """
    listen = f"unix:{tmp_path / 'bitong.sock'}" if request.param == "unix" else "127.0.0.1:0"
    server = subprocess.Popen([sys.executable, "-m", "bitong", "serve", "--tools", str(tools_root),
                               "--listen", listen],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        line = _first_line(server, 15)
        assert line.startswith("bitong: serving on "), (line, server.poll())
        address = line.removeprefix("bitong: serving on ").strip()
        if request.param == "unix":
            assert address == listen
        yield address
    finally:
        server.send_signal(signal.SIGTERM)
        try:
            server.communicate(timeout=10)
        except subprocess.TimeoutExpired:
            server.kill()
            server.communicate()


def test_the_node_client_passes_every_check(server_address: str, tools_root: Path) -> None:
    """tools_root: the folder the server serves; the watch_tools check writes a tool there and deletes it."""
    assert NODE is not None
    started = time.monotonic()
    run = subprocess.run([NODE, str(CLIENT), server_address, str(tools_root)], capture_output=True, text=True,
                         timeout=30,
                         cwd=CLIENT_DIR, check=False)
    lines = [json.loads(line) for line in run.stdout.splitlines() if line.strip()]
    failed = [line for line in lines if not line["ok"]]
    assert not failed and run.returncode == 0, (
        f"node client exit {run.returncode}; failed checks:\n"
        + "\n".join(json.dumps(f, ensure_ascii=False) for f in failed) + f"\nstderr:\n{run.stderr}")
    assert {line["check"] for line in lines} == CHECKS
    assert len(lines) == len(CHECKS)
    assert time.monotonic() - started < 10


def test_the_node_client_fails_loudly_without_a_server(tmp_path: Path) -> None:
    """A client that cannot reach the server must not pass: every check fails and the exit is 1."""
    assert NODE is not None
    run = subprocess.run([NODE, str(CLIENT), f"unix:{tmp_path / 'nobody.sock'}"], capture_output=True,
                         text=True, timeout=30, cwd=CLIENT_DIR, check=False)
    lines = [json.loads(line) for line in run.stdout.splitlines()]
    assert run.returncode == 1
    assert {line["check"] for line in lines} == CHECKS
    assert not any(line["ok"] for line in lines)
    assert "UNAVAILABLE" in lines[0]["detail"]
