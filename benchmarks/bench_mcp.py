"""What ``bitong mcp`` costs an MCP host: a tool call through bitong's bridge against the SDK's own server.

    python benchmarks/bench_mcp.py [--quick] [--json PATH]

Both servers are separate processes driven by the official SDK's stdio
client (``mcp.Client``, protocol negotiated as the client does by default),
one call in flight, rounds interleaved (order alternating) so load from
other work on a shared machine falls on both alike:

* bitong: ``bitong mcp`` serving ``bench-echo`` (``echo hello`` through the
  shell executor: validation, the reaper's PID namespace, the OS sandbox
  where the kernel allows it, the audit-free default);
* peer: ``peer_mcp_server.py``, the SDK's ``MCPServer`` with an ``echo`` tool
  that runs ``echo hello`` with ``subprocess.run``: the least an MCP server
  can do to run a program.

A third row is ``find_tools`` in ``--search`` mode (Match over the bundled
tools, lexical: ``--no-semantic``, so the run loads no model) against the
peer's ``const`` tool (one MCP round trip, no work): what a host pays to
pick a tool instead of reading every schema. Ratios are bitong / peer.
Needs ``mcp`` (``pip install -e '.[mcp]'``).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
PEER_SCRIPT = HERE / "peer_mcp_server.py"

ECHO_TOOL = """\
name: bench-echo
display: 基准回声
intent: 打印 hello，用来测量一次调用的开销
method: exec
executor: shell
command: echo hello
params_schema: {}
constraints: { timeout_ms: 30000, max_output_bytes: 65536, require_confirm: false }
permissions: { exec: true }
author: bench
created: 2026-06-01
why: 基准测试：一次最小的进程调用。
"""

# The bridge's own cost on top of a process spawn should stay within this factor of the SDK's own server.
TARGET_CALL_RATIO = 2.0


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


@contextlib.asynccontextmanager
async def _client(args: list[str], errlog: Any) -> AsyncIterator[Any]:
    from mcp import Client, StdioServerParameters
    from mcp.client.stdio import stdio_client

    params = StdioServerParameters(command=sys.executable, args=args, cwd=str(REPO))
    async with Client(stdio_client(params, errlog=errlog), read_timeout_seconds=60) as client:
        yield client


async def _timed(call: Callable[[], Awaitable[Any]], n: int, into: list[float]) -> None:
    for _ in range(n):
        start = time.perf_counter()
        result = await call()
        into.append((time.perf_counter() - start) * 1000)
        if getattr(result, "is_error", False):
            raise RuntimeError(f"the call failed: {result}")


async def _measure(quick: bool) -> dict[str, Any]:
    rounds, n = (3, 20) if quick else (8, 60)
    with tempfile.TemporaryDirectory(prefix="bitong-bench-mcp-") as tmp, open(os.devnull, "w") as errlog:
        root = Path(tmp) / "tools"
        (root / "bench-echo").mkdir(parents=True)
        (root / "bench-echo" / "TOOL.hdlp").write_text(ECHO_TOOL, encoding="utf-8")
        config = Path(tmp) / "bench.toml"
        config.write_text('[approve]\ntools = ["bench-echo"]\n', encoding="utf-8")
        bitong_args = ["-m", "bitong", "mcp", "--no-semantic", "--log-level", "WARNING"]
        times: dict[str, list[float]] = {"bitong_call": [], "bitong_call_nobox": [], "peer_call": [],
                                         "bitong_find": [], "peer_const": []}
        served = [*bitong_args, "--tools", str(root), "--config", str(config)]
        async with _client(served, errlog) as bitong, \
                _client([*served, "--sandbox", "off"], errlog) as nobox, \
                _client([*bitong_args, "--search"], errlog) as search, \
                _client([str(PEER_SCRIPT)], errlog) as peer:
            check = await bitong.call_tool("bench-echo", {})
            text = check.content[0].text if check.content else ""
            if check.is_error or text != "hello\n":
                raise RuntimeError(f"bench-echo did not answer hello: {check}")
            calls: list[tuple[str, Callable[[], Awaitable[Any]]]] = [
                ("bitong_call", lambda: bitong.call_tool("bench-echo", {})),
                ("bitong_call_nobox", lambda: nobox.call_tool("bench-echo", {})),
                ("peer_call", lambda: peer.call_tool("echo", {})),
                ("bitong_find", lambda: search.call_tool("find_tools", {"intent": "在服务器上执行一条shell命令"})),
                ("peer_const", lambda: peer.call_tool("const", {})),
            ]
            for _name, call in calls:   # warm-up: imports, first spawns, caches
                await _timed(call, 3, [])
            for r in range(rounds):
                for name, call in (calls if r % 2 == 0 else calls[::-1]):
                    await _timed(call, n, times[name])
            protocol = bitong.protocol_version
    return {"protocol": protocol, "rounds": rounds, "calls_per_round": n,
            **{k: {"p50_ms": statistics.median(v), "p99_ms": _pct(v, 0.99), "n": len(v)} for k, v in times.items()}}


def _in_process(quick: bool) -> dict[str, float]:
    """ToolAgent.call of bench-echo in this process (no MCP, no gRPC) against subprocess.run of the same
    echo: how much of a call is bitong's executor (reaper, PID namespace, sandbox) rather than the bridge."""
    import asyncio
    import subprocess

    sys.path.insert(0, str(REPO))
    from bitong.agent.registry.approval import Grant, Policy
    from bitong.agent.calling.executors import Executors, sandbox
    from bitong.agent.registry.snapshot import Registry
    from bitong.agent.serving.service import ToolAgent

    n = 30 if quick else 120
    with tempfile.TemporaryDirectory(prefix="bitong-bench-mcp-") as tmp:
        (Path(tmp) / "bench-echo").mkdir()
        (Path(tmp) / "bench-echo" / "TOOL.hdlp").write_text(ECHO_TOOL, encoding="utf-8")
        sandbox.configure("auto", hidden=[])
        registry = Registry([tmp], approval=Policy((Grant("bench-echo"),), "bench"))
        registry.rescan()
        agent = ToolAgent(registry, executors=Executors(None))

        async def calls() -> list[float]:
            out = []
            for _ in range(n):
                start = time.perf_counter()
                result = await agent.call("bench-echo", {})
                out.append((time.perf_counter() - start) * 1000)
                if not result.ok:
                    raise RuntimeError(f"bench-echo failed in process: {result.error}")
            return out

        agent_ms = asyncio.run(calls())
    spawn_ms = []
    for _ in range(n):
        start = time.perf_counter()
        subprocess.run(["echo", "hello"], capture_output=True, check=True)
        spawn_ms.append((time.perf_counter() - start) * 1000)
    return {"agent_call_p50_ms": statistics.median(agent_ms), "subprocess_run_p50_ms": statistics.median(spawn_ms)}


def _row(what: str, bitong: float, peer: float, peer_name: str, target: str, met: bool | None,
         note: str = "") -> dict[str, Any]:
    return {"what": what, "unit": "ms", "bitong": bitong, "peer": peer, "peer_name": peer_name,
            "ratio": bitong / peer if peer else None, "target": target, "met": met, "note": note}


def run(quick: bool = False) -> dict[str, Any]:
    import anyio

    measured = anyio.run(_measure, quick)
    local = _in_process(quick)
    measured["in_process"] = local
    call_b, call_p = measured["bitong_call"], measured["peer_call"]
    ratio = call_b["p50_ms"] / call_p["p50_ms"]
    sdk = "MCP SDK MCPServer echo (subprocess.run)"
    rows = [
        _row("MCP tools/call echo, stdio, 1 in flight, p50", call_b["p50_ms"], call_p["p50_ms"], sdk,
             f"<= {TARGET_CALL_RATIO}x peer", ratio <= TARGET_CALL_RATIO,
             "bitong: validation, reaper PID namespace, sandbox where the kernel allows"),
        _row("MCP tools/call echo, stdio, 1 in flight, p99", call_b["p99_ms"], call_p["p99_ms"], sdk, "", None),
        _row("MCP tools/call echo, stdio, --sandbox off, p50", measured["bitong_call_nobox"]["p50_ms"],
             call_p["p50_ms"], sdk, "", None, "the bridge and the reaper without the OS sandbox's set-up"),
        _row("ToolAgent.call echo in process (no MCP), p50", local["agent_call_p50_ms"],
             local["subprocess_run_p50_ms"], "subprocess.run echo", "", None,
             "the executor's own cost (what the MCP rows include on bitong's side)"),
        _row("MCP find_tools (--search, 7 tools, lexical), p50", measured["bitong_find"]["p50_ms"],
             measured["peer_const"]["p50_ms"], "MCP SDK MCPServer const (no work)", "", None,
             "the price of picking a tool instead of listing every schema"),
    ]
    return {"rows": rows, "measured": measured}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--json", metavar="PATH")
    args = parser.parse_args()
    result = run(quick=args.quick)
    for r in result["rows"]:
        ratio = f"{r['ratio']:.2f}x" if r["ratio"] is not None else "-"
        print(f"{r['what']:<52} bitong {r['bitong']:7.2f} ms  peer {r['peer']:7.2f} ms  {ratio:>6}  "
              f"target {r['target'] or '-':<14} met {r['met']}")
    print(f"protocol {result['measured']['protocol']}, {result['measured']['rounds']} rounds x "
          f"{result['measured']['calls_per_round']} calls")
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2), encoding="utf-8")


if __name__ == "__main__":
    main()
