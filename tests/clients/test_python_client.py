"""bitong.Client and bitong.AsyncClient against a real served sidecar (a real socket, real tools).

The blocking client runs in a worker thread: the sidecar under test serves
from this test's event loop, which a blocking call made on it would stall.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import bitong
from bitong import AsyncClient, BitongError, Client
from bitong.v1 import agent_pb2 as pb
from tests.support import WriteTool

SUGGESTION = "此工具尚不在仓库中，需铸渊新建"


def test_import_bitong_is_cheap_and_exports_the_client() -> None:
    """`import bitong` loads no grpc (the CLI imports it for --version); the names come at first use."""
    code = ("import sys, bitong; assert 'grpc' not in sys.modules, 'grpc loaded'; "
            "from bitong import Client, AsyncClient, BitongError, ConnectionError; "
            "assert issubclass(ConnectionError, BitongError) and issubclass(ConnectionError, OSError); print('ok')")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False)
    assert run.returncode == 0 and run.stdout.strip() == "ok", run.stderr
    assert set(bitong.__all__) >= {"Client", "AsyncClient", "BitongError", "ConnectionError"}
    with pytest.raises(AttributeError):
        bitong.NoSuchThing  # noqa: B018


async def test_the_blocking_client_matches_calls_streams_and_lists(start_sidecar: Any, tmp_path: Path) -> None:
    car = await start_sidecar(f"unix:{tmp_path}/bt.sock")

    def use() -> dict[str, Any]:
        with Client(car.address) as bt:
            return {
                "match": bt.match("执行一条shell命令 uname -a"),
                "none": bt.match("给我讲个关于程序员的笑话"),
                "ok": bt.call("shell-exec", {"cmd": "echo hello"}),
                "failing": bt.call("shell-exec", {"cmd": "echo out; echo boom >&2; exit 7"}),
                "unknown": bt.call("no-such-tool"),
                "bad": bt.call("shell-exec", {}),
                "stream": list(bt.stream("shell-exec", {"cmd": "printf 'a\\n'; printf 'b\\n' >&2; printf 'c\\n'"})),
                "tools": bt.tools(),
                "watch": _first_and_close(bt.watch()),
            }

    got = await asyncio.to_thread(use)
    match: pb.MatchResponse = got["match"]
    assert match.found and match.candidates[0].name == "shell-exec"
    assert not got["none"].found and got["none"].suggestion == SUGGESTION
    ok: pb.CallResult = got["ok"]
    assert ok.ok and ok.output == b"hello\n" and ok.exit_code == 0
    failing: pb.CallResult = got["failing"]
    assert (failing.ok, failing.exit_code, failing.output, failing.stderr) == (False, 7, b"out\n", b"boom\n")
    assert not got["unknown"].found and got["unknown"].suggestion == SUGGESTION
    assert [e.param for e in got["bad"].param_errors] == ["cmd"]
    events: list[pb.CallEvent] = got["stream"]
    assert events[-1].WhichOneof("event") == "result" and events[-1].result.ok
    out = b"".join(e.chunk.data for e in events[:-1] if e.chunk.stream == pb.OutputChunk.STDOUT)
    err = b"".join(e.chunk.data for e in events[:-1] if e.chunk.stream == pb.OutputChunk.STDERR)
    assert (out, err) == (b"a\nc\n", b"b\n")
    names = [t.name for t in got["tools"].tools]
    assert names == sorted(names) and "shell-exec" in names and "file-read" in names
    watched: pb.ToolsChanged = got["watch"]
    assert watched.initial and list(watched.added) == names and watched.tool_count == len(names)


def _first_and_close(watch: Any) -> pb.ToolsChanged:
    """The first message of a blocking watch; closing the generator cancels the stream."""
    first: pb.ToolsChanged = next(watch)
    watch.close()
    return first


async def test_timeout_stops_the_tool_and_the_result_says_so(start_sidecar: Any, tmp_path: Path) -> None:
    car = await start_sidecar(f"unix:{tmp_path}/bt.sock")
    async with AsyncClient(car.address) as bt:
        result = await bt.call("shell-exec", {"cmd": "echo started; sleep 20"}, timeout=1.0)
    assert result.timed_out and not result.ok and result.output == b"started\n"


async def test_confirmation_is_a_keyword(start_sidecar: Any, write_tool: WriteTool, tmp_path: Path) -> None:
    write_tool("careful", command="echo done {what}", params="{ what: { type: string, required: true } }",
               confirm=True)
    car = await start_sidecar(f"unix:{tmp_path}/bt.sock")
    async with AsyncClient(car.address) as bt:
        asked = await bt.call("careful", {"what": "x"})
        assert asked.needs_confirmation and asked.confirm_token and not asked.output
        done = await bt.call("careful", {"what": "x"}, confirm=asked.confirm_token)
        assert done.ok and done.output == b"done x\n"
        again = await bt.call("careful", {"what": "x"}, confirm=asked.confirm_token)
        assert not again.ok and "already used" in again.error   # a token is spent once
        at_once = await bt.call("careful", {"what": "y"}, confirm=True)
        assert at_once.ok and at_once.output == b"done y\n"


async def test_the_async_client_streams_and_watches(start_sidecar: Any, write_tool: WriteTool,
                                                    tools_root: Path, tmp_path: Path) -> None:
    car = await start_sidecar(f"unix:{tmp_path}/bt.sock")
    async with AsyncClient(car.address) as bt:
        events = [e async for e in bt.stream("shell-exec", {"cmd": "echo streamed"})]
        assert events[-1].result.ok and events[0].chunk.data == b"streamed\n"
        watch = bt.watch()
        first = await asyncio.wait_for(anext(watch), 30)
        assert first.initial and "shell-exec" in first.added and first.tool_count == len(first.added)
        write_tool("fresh")
        change = await asyncio.wait_for(anext(watch), 30)
        assert list(change.added) == ["fresh"] and not change.initial and change.generation > first.generation
        await watch.aclose()


async def test_a_missing_server_is_one_connection_error_that_says_where_and_what_to_try(tmp_path: Path) -> None:
    path = tmp_path / "nobody.sock"

    def blocking() -> BitongError:
        with Client(f"unix:{path}") as bt, pytest.raises(bitong.ConnectionError) as caught:
            bt.call("shell-exec", {"cmd": "true"})
        return caught.value

    exc = await asyncio.to_thread(blocking)
    assert isinstance(exc, ConnectionError) and exc.code == "UNAVAILABLE"   # the built-in one too
    assert f"cannot reach bitong at unix:{path}" in str(exc) and "bitong serve --listen" in str(exc)
    assert "no socket file" in str(exc)
    async with AsyncClient("127.0.0.1:1") as bt:   # nothing listens on port 1
        with pytest.raises(bitong.ConnectionError, match="cannot reach bitong at 127.0.0.1:1"):
            await bt.match("anything")
        with pytest.raises(bitong.ConnectionError):
            [c async for c in bt.watch()]


async def test_a_relative_unix_path_works_as_the_cli_takes_it(start_sidecar: Any, tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    car = await start_sidecar(f"unix:{tmp_path}/bt.sock")
    monkeypatch.chdir(tmp_path)
    async with AsyncClient("unix:bt.sock") as bt:
        assert (await bt.call("shell-exec", {"cmd": "echo rel"})).output == b"rel\n"
    assert car.address.endswith("bt.sock")


async def test_a_token_is_sent_and_a_refusal_is_a_bitong_error(start_sidecar: Any, tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    from bitong.agent.config import from_dict

    monkeypatch.setenv("T_CLIENT", "token-of-the-client-0123456789")
    car = await start_sidecar("127.0.0.1:0", config=from_dict({"auth": {"tokens": {"me": {"token_env": "T_CLIENT"}}}}))
    async with AsyncClient(car.address, token="token-of-the-client-0123456789") as bt:
        assert (await bt.call("shell-exec", {"cmd": "echo in"})).output == b"in\n"
    monkeypatch.delenv("BITONG_TOKEN", raising=False)
    async with AsyncClient(car.address) as bt:
        with pytest.raises(BitongError) as refused:
            await bt.call("shell-exec", {"cmd": "echo in"})
    assert refused.value.code == "UNAUTHENTICATED" and not isinstance(refused.value, bitong.ConnectionError)
    assert f"bitong at {car.address} answered UNAUTHENTICATED" in str(refused.value)
    monkeypatch.setenv("BITONG_TOKEN", "token-of-the-client-0123456789")   # as the CLI reads it
    async with AsyncClient(car.address) as bt:
        assert (await bt.call("shell-exec", {"cmd": "echo env"})).output == b"env\n"


def test_bad_params_and_half_a_client_certificate_are_refused_before_sending() -> None:
    with pytest.raises(BitongError, match="tls_cert and tls_key go together"):
        Client("127.0.0.1:1", tls_cert="/nonexistent.pem")
    with pytest.raises(BitongError, match="tls_ca /nonexistent.pem"):
        Client("127.0.0.1:1", tls_ca="/nonexistent.pem")
    with Client("127.0.0.1:1") as bt, pytest.raises(BitongError, match="params must be JSON-like"):
        bt.call("shell-exec", {"cmd": object()})


async def test_mtls_with_the_clients_certificate_and_a_connection_error_without_one(
        start_sidecar: Any, tmp_path: Path) -> None:
    from bitong.agent.serving.listen import Security
    from tests.agent.certs import CA

    ca = CA(tmp_path)
    server = ca.issue("localhost", server=True)
    client = ca.issue("agent-a")
    car = await start_sidecar("127.0.0.1:0", security=Security(tls_cert=str(server.cert), tls_key=str(server.key),
                                                               tls_client_ca=str(ca.path)))
    target = f"localhost:{car.port}"
    async with AsyncClient(target, tls_ca=str(ca.path), tls_cert=str(client.cert), tls_key=str(client.key)) as bt:
        assert (await bt.call("shell-exec", {"cmd": "echo mtls"})).output == b"mtls\n"
    async with AsyncClient(target, tls_ca=str(ca.path), tls_cert="", tls_key="") as bt:   # no certificate
        with pytest.raises(bitong.ConnectionError, match=f"cannot reach bitong at {target}"):
            await bt.call("shell-exec", {"cmd": "echo no"}, timeout=10)
