"""``bitong mcp`` as a real subprocess, driven by the MCP SDK's own client over stdio and Streamable HTTP.

Every scenario runs against each transport and each protocol era the SDK
speaks: the 2025 handshake ("legacy", what most hosts use today) and
2026-07-28 ("auto" negotiates it with this server).
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import anyio
import pytest

mcp = pytest.importorskip("mcp")

import mcp_types as types  # noqa: E402
from mcp import Client, StdioServerParameters  # noqa: E402
from mcp.client.stdio import stdio_client  # noqa: E402

from tests.support import tool_text  # noqa: E402

BITONG = [sys.executable, "-m", "bitong"]
TRANSPORTS = ("stdio", "http")
MODES = ("legacy", "auto")
WAIT_S = 30.0


def _until(check: Callable[[], Any], what: str, timeout: float = WAIT_S) -> Any:
    """Wait for a condition another process makes true (a file written, a process gone); fail with ``what``."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        value = check()
        if value:
            return value
        time.sleep(0.01)
    raise AssertionError(f"timed out waiting for {what}")


async def _until_async(check: Callable[[], Any], what: str, timeout: float = WAIT_S) -> Any:
    with anyio.fail_after(timeout):
        while True:
            value = check()
            if value:
                return value
            await anyio.sleep(0.01)
    raise AssertionError(what)   # pragma: no cover - fail_after raises first


@contextlib.asynccontextmanager
async def bitong_mcp(tmp_path: Path, transport: str, mode: str, roots: list[Path], *options: str,
                     **client: Any) -> AsyncIterator[Client]:
    """A `bitong mcp` subprocess and an SDK client connected to it (stopped and closed after)."""
    args = ["mcp", "--no-semantic", "--log-level", "WARNING"]
    for root in roots:
        args += ["--tools", str(root)]
    args += list(options)
    errlog = tmp_path / f"bitong-mcp-{transport}-{mode}.err"
    client.setdefault("read_timeout_seconds", WAIT_S)
    if transport == "stdio":
        with errlog.open("w") as err:
            params = StdioServerParameters(command=BITONG[0], args=[*BITONG[1:], *args], cwd=os.getcwd())
            async with Client(stdio_client(params, errlog=err), mode=mode, **client) as session:
                yield session
        return
    with errlog.open("w") as err:
        server = subprocess.Popen([*BITONG, *args, "--http", "127.0.0.1:0"], stdin=subprocess.DEVNULL,
                                  stdout=subprocess.DEVNULL, stderr=err)
    try:
        url = _until(lambda: (m := re.search(r"MCP endpoint (http://\S+)", errlog.read_text())) and m.group(1)
                     or (server.poll() is not None and pytest.fail(errlog.read_text())),
                     "the HTTP endpoint line")
        async with Client(url, mode=mode, **client) as session:
            yield session
    finally:
        server.send_signal(signal.SIGTERM)
        try:
            assert server.wait(timeout=WAIT_S) == 0, errlog.read_text()
        finally:
            if server.poll() is None:
                server.kill()
                server.wait()


def _text(result: types.CallToolResult) -> str:
    return "\n".join(block.text for block in result.content if isinstance(block, types.TextContent))


@pytest.fixture
def confirm_root(tmp_path: Path) -> Path:
    """A root of one require_confirm tool (nothing sensitive: no approval needed)."""
    root = tmp_path / "confirm-tools"
    (root / "say-twice").mkdir(parents=True)
    (root / "say-twice" / "TOOL.hdlp").write_text(tool_text(
        "say-twice", command="echo said {word}", confirm=True,
        params='{ word: { type: string, required: true, pattern: "^[a-z]+$", description: "one word" } }'),
        encoding="utf-8")
    return root


@pytest.mark.parametrize("transport", TRANSPORTS)
@pytest.mark.parametrize("mode", MODES)
async def test_list_and_call_ok_failing_unknown_and_bad_params(tools_root: Path, tmp_path: Path,
                                                               transport: str, mode: str) -> None:
    async with bitong_mcp(tmp_path, transport, mode, [tools_root]) as client:
        listed = await client.list_tools()
        tools = {tool.name: tool for tool in listed.tools}
        assert set(tools) == {p.parent.name for p in tools_root.glob("*/TOOL.hdlp")}
        shell = tools["shell-exec"]
        assert shell.input_schema["required"] == ["cmd"]
        assert shell.input_schema["properties"]["cwd"]["default"] == "."
        assert shell.annotations is not None and shell.annotations.read_only_hint is False
        assert shell.annotations.destructive_hint is True
        assert tools["file-read"].annotations is not None and tools["file-read"].annotations.read_only_hint is True
        assert tools["file-read"].input_schema["properties"]["limit"]["maximum"] == 5000
        assert "Why:" in (shell.description or "")
        assert listed.next_cursor is None   # 7 tools: one page
        with pytest.raises(mcp.MCPError, match="page_token"):
            await client.list_tools(cursor="not-one-we-gave")

        ok = await client.call_tool("shell-exec", {"cmd": "printf 'hello\\nworld\\n'"})
        assert not ok.is_error and _text(ok) == "hello\nworld\n"

        failed = await client.call_tool("shell-exec", {"cmd": "echo partial; echo boom >&2; exit 7"})
        assert failed.is_error
        blocks = [b.text for b in failed.content if isinstance(b, types.TextContent)]
        assert blocks[0] == "partial\n" and blocks[1] == "boom\n"
        assert "exit code 7" in blocks[2]

        unknown = await client.call_tool("shell-exe", {})
        assert unknown.is_error and "no tool named 'shell-exe'" in _text(unknown)
        assert "did you mean 'shell-exec'" in _text(unknown)

        bad = await client.call_tool("file-read", {"path": 5, "colour": "red"})
        assert bad.is_error
        assert "parameter path:" in _text(bad) and "parameter colour: unknown parameter" in _text(bad)


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_bytes_that_are_not_utf8_come_back_unchanged_as_a_resource(tools_root: Path, tmp_path: Path,
                                                                         transport: str) -> None:
    async with bitong_mcp(tmp_path, transport, "legacy", [tools_root]) as client:
        result = await client.call_tool("shell-exec", {"cmd": "printf '\\377\\376ok'"})
    assert not result.is_error
    (block,) = result.content
    assert isinstance(block, types.EmbeddedResource)
    assert isinstance(block.resource, types.BlobResourceContents)
    import base64

    assert base64.b64decode(block.resource.blob) == b"\xff\xfeok"


@pytest.mark.parametrize("transport", TRANSPORTS)
@pytest.mark.parametrize("mode", MODES)
async def test_ten_megabytes_of_output_come_back_cut_at_the_cap(tools_root: Path, tmp_path: Path,
                                                                transport: str, mode: str) -> None:
    seen: list[float] = []

    async def progress(done: float, total: float | None, message: str | None) -> None:
        seen.append(done)

    async with bitong_mcp(tmp_path, transport, mode, [tools_root]) as client:
        cmd = "head -c 10485760 /dev/zero | tr '\\0' a"
        plain = await client.call_tool("shell-exec", {"cmd": cmd})
        streamed = await client.call_tool("shell-exec", {"cmd": cmd}, progress_callback=progress)
    for result in (plain, streamed):
        assert not result.is_error
        out, note = (b.text for b in result.content if isinstance(b, types.TextContent))
        assert out == "a" * 65536   # shell-exec's max_output_bytes
        assert "truncated at max_output_bytes" in note
    assert seen and seen == sorted(seen) and seen[-1] <= 10485760


@pytest.mark.parametrize("transport", TRANSPORTS)
@pytest.mark.parametrize("mode", MODES)
async def test_progress_reports_bytes_and_lines_while_the_tool_runs(tools_root: Path, tmp_path: Path,
                                                                    transport: str, mode: str) -> None:
    runtime = tools_root / "shell-exec" / "runtime"   # the one folder the sandbox lets it write
    runtime.mkdir(exist_ok=True)
    go = runtime / "go"
    messages: list[str] = []

    async def progress(done: float, total: float | None, message: str | None) -> None:
        messages.append(message or "")
        go.touch()   # the tool finishes only once a progress report reached us

    async with bitong_mcp(tmp_path, transport, mode, [tools_root]) as client:
        result = await client.call_tool(
            "shell-exec", {"cmd": f"echo first; while [ ! -e {go} ]; do sleep 0.01; done; echo last"},
            progress_callback=progress)
    assert not result.is_error and _text(result) == "first\nlast\n"
    assert messages[0] == "6 bytes, 1 lines so far"


def _sleepers(arg: str) -> list[int]:
    """Host pids of ``sleep ARG``: ARG is unique to one test, so these are the processes its call started."""
    want = b"sleep\x00" + arg.encode() + b"\x00"
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if (entry / "cmdline").read_bytes() == want:
                    found.append(int(entry.name))
            except OSError:   # gone meanwhile
                pass
    return found


@pytest.mark.parametrize("transport", TRANSPORTS)
@pytest.mark.parametrize("mode", MODES)
async def test_cancelling_a_call_kills_the_tools_process(tools_root: Path, tmp_path: Path,
                                                         transport: str, mode: str) -> None:
    # Inside its PID namespace the tool cannot name its host pid; its command line, unique to this test,
    # finds it in the host's /proc.
    arg = f"299.{uuid.uuid4().int % 10**6:06d}"
    async with bitong_mcp(tmp_path, transport, mode, [tools_root]) as client:
        async with anyio.create_task_group() as tg:
            async def call() -> None:
                await client.call_tool("shell-exec", {"cmd": f"exec sleep {arg}"})

            tg.start_soon(call)
            (pid,) = await _until_async(lambda: _sleepers(arg), "the tool's process")
            tg.cancel_scope.cancel()
        # the server stops the call: the process is gone (killed and reaped, not a zombie)
        await _until_async(lambda: not Path(f"/proc/{pid}").exists() or pid not in _sleepers(arg),
                           f"pid {pid} to be gone")
        still = await client.call_tool("shell-exec", {"cmd": "echo still serving"})
        assert _text(still) == "still serving\n"


@pytest.mark.parametrize("transport", TRANSPORTS)
@pytest.mark.parametrize("mode", MODES)
async def test_confirmation_without_elicitation_is_the_two_step_token(confirm_root: Path, tmp_path: Path,
                                                                      transport: str, mode: str) -> None:
    async with bitong_mcp(tmp_path, transport, mode, [confirm_root]) as client:
        (tool,) = (await client.list_tools()).tools
        assert "_confirm" in tool.input_schema["properties"]
        first = await client.call_tool("say-twice", {"word": "hello"})
        assert first.is_error and "requires confirmation" in _text(first) and "Nothing ran" in _text(first)
        token = re.search(r'"_confirm": "([^"]+)"', _text(first))
        assert token is not None
        other = await client.call_tool("say-twice", {"word": "other", "_confirm": token.group(1)})
        assert other.is_error and "said" not in _text(other)   # the token is for the parameters shown
        again = await client.call_tool("say-twice", {"word": "hello"})
        token = re.search(r'"_confirm": "([^"]+)"', _text(again))
        assert token is not None
        ran = await client.call_tool("say-twice", {"word": "hello", "_confirm": token.group(1)})
        assert not ran.is_error and _text(ran) == "said hello\n"
        reused = await client.call_tool("say-twice", {"word": "hello", "_confirm": token.group(1)})
        assert reused.is_error and "said" not in _text(reused)


@pytest.mark.parametrize("transport", TRANSPORTS)
@pytest.mark.parametrize("mode", MODES)
async def test_confirmation_asks_the_user_when_the_client_can_elicit(confirm_root: Path, tmp_path: Path,
                                                                     transport: str, mode: str) -> None:
    asked: list[str] = []
    answer = {"value": True}

    async def elicit(context: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
        asked.append(params.message)
        return types.ElicitResult(action="accept", content={"confirm": answer["value"]})

    async with bitong_mcp(tmp_path, transport, mode, [confirm_root], elicitation_callback=elicit) as client:
        ran = await client.call_tool("say-twice", {"word": "yes"})
        assert not ran.is_error and _text(ran) == "said yes\n"
        assert len(asked) == 1 and "say-twice" in asked[0] and '"word": "yes"' in asked[0]
        answer["value"] = False
        declined = await client.call_tool("say-twice", {"word": "no"})
        assert declined.is_error and "declined" in _text(declined) and "said" not in _text(declined)


@pytest.mark.parametrize("transport", TRANSPORTS)
@pytest.mark.parametrize("mode", MODES)
async def test_a_tool_file_edit_sends_list_changed(tools_root: Path, tmp_path: Path, transport: str,
                                                   mode: str) -> None:
    changed = anyio.Event()

    async def on_message(message: Any) -> None:
        if isinstance(message, types.ToolListChangedNotification):
            changed.set()

    async with bitong_mcp(tmp_path, transport, mode, [tools_root], message_handler=on_message) as client:
        before = {t.name for t in (await client.list_tools()).tools}
        assert "fresh-tool" not in before
        async with contextlib.AsyncExitStack() as stack:
            if client.protocol_version.startswith("2026"):
                sub = await stack.enter_async_context(client.listen(tools_list_changed=True))
            (tools_root / "fresh-tool").mkdir()
            (tools_root / "fresh-tool" / "TOOL.hdlp").write_text(tool_text("fresh-tool"), encoding="utf-8")
            with anyio.fail_after(WAIT_S):
                if client.protocol_version.startswith("2026"):
                    await sub.__anext__()
                else:
                    await changed.wait()
        after = {t.name for t in (await client.list_tools()).tools}
        assert after == before | {"fresh-tool"}
        fresh = await client.call_tool("fresh-tool", {})
        assert _text(fresh) == "hello\n"


@pytest.mark.parametrize("mode", MODES)
async def test_search_mode_lists_two_meta_tools_that_find_and_call(tools_root: Path, confirm_root: Path,
                                                                   tmp_path: Path, mode: str) -> None:
    async with bitong_mcp(tmp_path, "stdio", mode, [tools_root, confirm_root], "--search") as client:
        names = [t.name for t in (await client.list_tools()).tools]
        assert names == ["find_tools", "call_tool"]
        found = await client.call_tool("find_tools", {"intent": "run the shell command uname -a"})
        assert not found.is_error and found.structured_content is not None
        assert found.structured_content["found"] is True
        best = found.structured_content["tools"][0]
        assert best["name"] == "shell-exec" and best["inputSchema"]["required"] == ["cmd"]
        none = await client.call_tool("find_tools", {"intent": "订一张明天去北京的高铁票"})
        assert none.structured_content == {"found": False, "suggestion": none.structured_content["suggestion"]}
        assert none.structured_content["suggestion"]
        ran = await client.call_tool("call_tool", {"name": "shell-exec", "params": {"cmd": "echo via search"}})
        assert _text(ran) == "via search\n"
        bad = await client.call_tool("call_tool", {"params": {}})
        assert bad.is_error and "parameter name" in _text(bad)
        direct = await client.call_tool("shell-exec", {"cmd": "echo no"})
        assert direct.is_error and "find_tools" in _text(direct)
        asked = await client.call_tool("call_tool", {"name": "say-twice", "params": {"word": "hi"}})
        assert asked.is_error and asked.structured_content is not None
        token = asked.structured_content["confirm_token"]
        ran = await client.call_tool("call_tool", {"name": "say-twice", "params": {"word": "hi"}, "confirm": token})
        assert not ran.is_error and _text(ran) == "said hi\n"


async def test_a_tool_only_a_person_may_approve_is_refused_over_mcp(confirm_root: Path, tmp_path: Path) -> None:
    """confirm_by: human needs bitong serve's admin socket; an MCP client's own answer must not stand in for it."""
    config = tmp_path / "human.toml"
    config.write_text('[confirm]\nby = "human"\n', encoding="utf-8")

    async def elicit(context: Any, params: types.ElicitRequestParams) -> types.ElicitResult:
        raise AssertionError("a human-confirmed tool must not be confirmed by the client")

    async with bitong_mcp(tmp_path, "stdio", "legacy", [confirm_root], "--config", str(config),
                          elicitation_callback=elicit) as client:
        refused = await client.call_tool("say-twice", {"word": "hi"})
    assert refused.is_error and "needs a person's approval" in _text(refused) and "said" not in _text(refused)


def test_http_address_errors_are_one_line(tmp_path: Path) -> None:
    import socket

    for bad in ("8765", "127.0.0.1:http", "127.0.0.1:70000"):
        done = subprocess.run([*BITONG, "mcp", "--no-semantic", "--http", bad], capture_output=True, text=True,
                              timeout=WAIT_S)
        assert done.returncode == 2 and done.stderr.count("\n") == 1 and "--http" in done.stderr, done.stderr
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        done = subprocess.run([*BITONG, "mcp", "--no-semantic", "--log-level", "WARNING", "--http",
                               f"127.0.0.1:{port}"], capture_output=True, text=True, timeout=WAIT_S)
    assert done.returncode == 2 and done.stderr == (f"bitong: cannot listen on 127.0.0.1:{port} for MCP over HTTP: "
                                                    "Address already in use\n")


def test_sigterm_over_stdio_stops_the_call_in_flight_and_exits_cleanly(tools_root: Path, tmp_path: Path) -> None:
    """The client never closes stdin here: the signal alone ends the server, and the call's process with it."""
    import json

    arg = f"298.{uuid.uuid4().int % 10**6:06d}"
    server = subprocess.Popen([*BITONG, "mcp", "--no-semantic", "--tools", str(tools_root), "--log-level", "WARNING"],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    assert server.stdin is not None and server.stdout is not None

    def send(message: dict[str, Any]) -> None:
        assert server.stdin is not None
        server.stdin.write(json.dumps({"jsonrpc": "2.0", **message}).encode() + b"\n")
        server.stdin.flush()

    try:
        send({"id": 1, "method": "initialize", "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                                                           "clientInfo": {"name": "test", "version": "0"}}})
        assert json.loads(server.stdout.readline())["id"] == 1
        send({"method": "notifications/initialized"})
        send({"id": 2, "method": "tools/call", "params": {"name": "shell-exec", "arguments": {"cmd": f"exec sleep {arg}"}}})
        (pid,) = _until(lambda: _sleepers(arg), "the tool's process")
        server.send_signal(signal.SIGTERM)
        assert server.wait(timeout=WAIT_S) == 0
        assert not Path(f"/proc/{pid}").exists() or pid not in _sleepers(arg)
    finally:
        if server.poll() is None:
            server.kill()
        server.wait()
        server.stdin.close()
        server.stdout.close()


async def test_callers_mcp_limits_what_hosts_may_use_and_the_audit_names_the_caller(tools_root: Path,
                                                                                   tmp_path: Path) -> None:
    import json

    config = tmp_path / "mcp.toml"
    config.write_text('[approve]\ntools = ["shell-exec"]\n\n[callers.mcp]\ntools = ["file-*"]\n', encoding="utf-8")
    audit = tmp_path / "audit.jsonl"
    async with bitong_mcp(tmp_path, "stdio", "legacy", [tools_root], "--config", str(config),
                          "--audit", str(audit)) as client:
        names = {t.name for t in (await client.list_tools()).tools}
        assert names == {"file-read", "file-stats"}   # file-write is not approved by this config
        refused = await client.call_tool("shell-exec", {"cmd": "echo no"})
        assert refused.is_error and "may not use tool 'shell-exec'" in _text(refused)
        missing = await client.call_tool("file-read", {"path": str(tmp_path / "none")})
        assert missing.is_error
    lines = [json.loads(line) for line in audit.read_text().splitlines()]
    assert [(e["caller"], e["caller_via"], e["tool"], e["outcome"]) for e in lines] == [
        ("mcp", "mcp-stdio", "shell-exec", "refused"), ("mcp", "mcp-stdio", "file-read", "failed")]
