"""Python handlers (issue 13 §1): a bitong Call of a handler against the MCP SDK calling the same function.

    python benchmarks/bench_handler.py [--quick] [--json PATH]

* bitong: ``python -m bitong serve --listen unix:SOCK --tools DIR`` as its own
  process, with one ``executor: python`` tool whose ``handler.py`` returns
  ``{"ok": 1}``; Call p50 with one call in flight, and calls/s with 16 in
  flight, through a sync gRPC client and grpc.aio (the better of the two per
  row, as bench_sidecar.py does). Each call is forked from the tool's zygote
  (agent/executors/zygote.py), under the same sandbox as any handler call.
* Peer: the official MCP SDK 2.x (peer_mcp_server.py, over stdio, driven by
  the SDK's own client) calling a Python function returning ``{"ok": 1}``
  in its own process: the in-process call the issue sets the target against.
* For reference (no target): the same server with ``[python] zygote =
  false``, a fresh ``python -I -S -B`` per call (the path before zygotes,
  still used where a zygote cannot run).

Rounds are interleaved (each system a short block per round, order rotated),
so load from other work on the shared machine falls on all alike; the run
records how much CPU other work took. Ratios are bitong / peer.

``run(quick)`` returns ``{"rows": [...], ...}`` for run_all.py.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench_sidecar import (CONCURRENCY, REPO, Contention, LoopThread, McpPeer, ServerProcess, aio_latency,
                           aio_throughput, ms, proc_cpu, row, shut_down, sync_latency, sync_throughput, versions)
from machine import machine  # benchmarks/ is the script's folder, first on sys.path

TARGET_P50_RATIO = 3.0     # handler Call p50 within 3x of the MCP SDK's in-process call
TARGET_QPS_RATIO = 0.5     # and at least half its calls/s at 16 in flight
OK = b'{"ok": 1}'

OK_TOOL = """\
HLDP://bench/tool/bench-ok
name: bench-ok
display: 基准处理函数
intent: 一个只返回 ok 的 python 处理函数，用来测量一次处理函数调用的开销
method: run
executor: python
params_schema: {}
constraints: { timeout_ms: 30000, max_output_bytes: 65536, require_confirm: false }
permissions: {}
author: bench
created: 2026-12-03
why: 基准测试：一次最小的 python 处理函数调用。
"""

OK_HANDLER = '''\
def run():
    return {"ok": 1}
'''


def progress(msg: str) -> None:
    """One line on stderr, so a long run shows where it is."""
    print(f"bench_handler: {msg}", file=sys.stderr, flush=True)


class Bitong:
    """One bitong server process, measured with a sync gRPC client and grpc.aio."""

    def __init__(self, name: str, srv: ServerProcess, lt: LoopThread) -> None:
        import grpc

        from bitong.v1 import agent_pb2 as pb
        from bitong.v1 import agent_pb2_grpc as pb_grpc

        self.name = name
        self.lt = lt
        self.req = pb.CallRequest(tool="bench-ok")
        self.channel = grpc.insecure_channel(srv.address)
        self.stub = pb_grpc.ToolAgentStub(self.channel)
        reply = self.stub.Call(self.req, timeout=30)
        if not (reply.ok and reply.output == OK):
            raise RuntimeError(f"bench-ok did not answer {OK!r}: ok={reply.ok} error={reply.error!r}")
        self.achannel, self.astub = lt.run(self._open(srv.address))

    async def _open(self, address: str) -> tuple[Any, Any]:
        import grpc

        from bitong.v1 import agent_pb2_grpc as pb_grpc

        channel = grpc.aio.insecure_channel(address)
        return channel, pb_grpc.ToolAgentStub(channel)

    def lat(self, n: int) -> dict[str, list[float]]:
        return {"sync": sync_latency(lambda i: self.stub.Call(self.req, timeout=30), n),
                "aio": self.lt.run(aio_latency(lambda i: self.astub.Call(self.req, timeout=30), n))}

    def qps(self, seconds: float) -> dict[str, float]:
        return {"sync": sync_throughput(lambda: self.stub.Call.future(self.req, timeout=60), seconds, CONCURRENCY),
                "aio": self.lt.run(aio_throughput(lambda i: self.astub.Call(self.req, timeout=60), seconds,
                                                  CONCURRENCY))}

    def close(self) -> None:
        self.channel.close()
        self.lt.run(self.achannel.close())


class Mcp:
    """The MCP SDK peer's ``ok`` tool through the SDK's own client."""

    name = "MCP"

    def __init__(self, peer: McpPeer) -> None:
        self.peer = peer

        async def check(client: Any) -> Any:
            return await client.call_tool("ok", {})

        first = peer.do(check)
        if first.is_error:
            raise RuntimeError(f"MCP ok: {first}")

    def lat(self, n: int) -> dict[str, list[float]]:
        return {"aio": self.peer.do(lambda c: aio_latency(lambda i: c.call_tool("ok", {}), n))}

    def qps(self, seconds: float) -> dict[str, float]:
        async def go(client: Any) -> float:
            import anyio

            done = 0
            t0 = time.perf_counter()
            end = t0 + seconds

            async def worker() -> None:
                nonlocal done
                while time.perf_counter() < end:
                    await client.call_tool("ok", {})
                    done += 1

            async with anyio.create_task_group() as tg:
                for _ in range(CONCURRENCY):
                    tg.start_soon(worker)
            return done / (time.perf_counter() - t0)

        return {"aio": self.peer.do(go)}


def zygote_pid(server: int) -> int | None:
    """The zygote (zygote_main.py) among the server's descendants, by its command line."""
    todo = [server]
    while todo:
        pid = todo.pop()
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as fh:
                argv = fh.read().split(b"\0")
            if not argv[0].endswith(b"_reaper") and any(a.endswith(b"zygote_main.py") for a in argv):
                return pid   # the interpreter itself, not the _reaper processes above it
            for task in os.listdir(f"/proc/{pid}/task"):   # a child belongs to the thread that forked it
                with open(f"/proc/{pid}/task/{task}/children") as fh:
                    todo += [int(p) for p in fh.read().split()]
        except OSError:
            continue
    return None


def cpu_per_call(srv: ServerProcess, system: Bitong, n: int) -> dict[str, float]:
    """Where a call's CPU goes (ms a call, one call in flight): the server, the zygote (its fork and loop),
    the call's own process (reaped by the zygote, so counted in its children's time)."""
    zygote = zygote_pid(srv.pid)
    if zygote is None:
        return {}
    s0, z0 = proc_cpu(srv.pid), proc_cpu(zygote)
    sync_latency(lambda i: system.stub.Call(system.req, timeout=30), n)
    s1, z1 = proc_cpu(srv.pid), proc_cpu(zygote)
    return {"server_ms": (s1[0] - s0[0]) * 1e3 / n, "zygote_ms": (z1[0] - z0[0]) * 1e3 / n,
            "call_process_ms": (z1[1] - z0[1]) * 1e3 / n, "n": n}


def start(tmp: Path, name: str, root: Path, config: Path | None) -> ServerProcess:
    sock = tmp / f"{name}.sock"
    argv = [sys.executable, "-m", "bitong", "serve", "--listen", f"unix:{sock}", "--tools", str(root)]
    if config is not None:
        argv += ["--config", str(config)]
    srv = ServerProcess([root], sock, tmp / f"{name}.log", dict(os.environ), REPO, argv=argv)
    srv.health = True
    if not srv.wait_ready():
        tail = srv.log_tail()
        srv.stop()
        raise RuntimeError(f"bitong serve ({name}) did not start:\n{tail}")
    return srv


def best(lat: dict[str, list[float]], qps: dict[str, list[float]]) -> dict[str, Any]:
    """Each product with its best client: the lower p50, the higher median calls/s."""
    lats = {client: ms(xs) for client, xs in lat.items()}
    client = min(lats, key=lambda c: lats[c]["p50_ms"])
    rates = {c: statistics.median(xs) for c, xs in qps.items()}
    qclient = max(rates, key=lambda c: rates[c])
    return {"call": lats[client], "call_client": client, "qps_16": rates[qclient], "qps_client": qclient,
            "clients": {"lat": lats, "qps": {c: [round(x) for x in xs] for c, xs in qps.items()}}}


def run(quick: bool = False) -> dict[str, Any]:
    """The comparison in interleaved rounds (about a minute; ``quick`` about half)."""
    n = 200 if quick else 600
    seconds = 2.0 if quick else 4.0
    rounds = 3 if quick else 6
    started = time.perf_counter()
    result: dict[str, Any] = {"name": "handler", "machine": machine(), "versions": versions(), "quick": quick}
    tmp = Path(tempfile.mkdtemp(prefix="bitong-bench-handler-"))
    lt = LoopThread()
    servers: list[ServerProcess] = []
    closers: list[Callable[[], None]] = []
    try:
        root = tmp / "tools"
        (root / "bench-ok").mkdir(parents=True)
        (root / "bench-ok" / "TOOL.hdlp").write_text(OK_TOOL, encoding="utf-8")
        (root / "bench-ok" / "handler.py").write_text(OK_HANDLER, encoding="utf-8")
        fresh_config = tmp / "fresh.toml"
        fresh_config.write_text("[python]\nzygote = false\n", encoding="utf-8")
        progress("starting bitong (zygote), bitong (fresh interpreter) and the MCP peer")
        zsrv = start(tmp, "zygote", root, None)
        servers.append(zsrv)
        fsrv = start(tmp, "fresh", root, fresh_config)
        servers.append(fsrv)
        peer = McpPeer(lt)
        peer.start()
        closers.append(peer.stop)
        zyg = Bitong("bitong", zsrv, lt)
        closers.append(zyg.close)
        fresh = Bitong("bitong fresh interpreter", fsrv, lt)
        closers.append(fresh.close)
        mcp = Mcp(peer)
        zyg.lat(20)
        mcp.lat(20)
        lat: dict[str, dict[str, list[float]]] = {"bitong": {}, "MCP": {}, "fresh": {}}
        qps: dict[str, dict[str, list[float]]] = {"bitong": {}, "MCP": {}, "fresh": {}}
        systems: list[tuple[str, Any, int, float]] = [("bitong", zyg, n // rounds, seconds / rounds),
                                                      ("MCP", mcp, n // rounds, seconds / rounds),
                                                      ("fresh", fresh, max(5, n // rounds // 10), seconds / rounds)]
        progress(f"Call p50 and calls/s at {CONCURRENCY} in flight, {rounds} interleaved rounds")
        with Contention() as c:
            for r in range(rounds):
                order = systems[r % len(systems):] + systems[:r % len(systems)]
                for name, system, count, _ in order:
                    for client, xs in system.lat(count).items():
                        lat[name].setdefault(client, []).extend(xs)
                for name, system, _, secs in order:
                    for client, x in system.qps(secs).items():
                        qps[name].setdefault(client, []).append(x)
        result["contention_pct"] = c.foreign_pct
        result["systems"] = {name: best(lat[name], qps[name]) for name in lat}
        progress("where a call's CPU goes")
        result["cpu_per_call"] = cpu_per_call(zsrv, zyg, n)
    finally:
        shut_down(closers, lt, servers)
        shutil.rmtree(tmp, ignore_errors=True)
    result["rows"] = build_rows(result)
    result["seconds"] = time.perf_counter() - started
    return result


def build_rows(r: dict[str, Any]) -> list[dict[str, Any]]:
    b, m, f = (r["systems"][k] for k in ("bitong", "MCP", "fresh"))
    busy = f"other work took {r['contention_pct']:.0f}% of a core meanwhile"
    p50, mp50 = b["call"]["p50_ms"], m["call"]["p50_ms"]
    q, mq = b["qps_16"], m["qps_16"]
    cpu = r.get("cpu_per_call") or {}
    split = (f"CPU a call: server {cpu['server_ms']:.2f} ms, zygote {cpu['zygote_ms']:.2f} ms, call's process "
             f"{cpu['call_process_ms']:.2f} ms; " if cpu else "")
    return [
        row("Python handler Call, 1 in flight, p50", "ms", p50, mp50, "MCP SDK in-process function",
            f"<= {TARGET_P50_RATIO:g}x peer", p50 <= TARGET_P50_RATIO * mp50,
            note=f"zygote fork per call, sandboxed; {b['call_client']} client; {busy}"),
        row(f"Python handler Call, {CONCURRENCY} in flight", "calls/s", q, mq, "MCP SDK in-process function",
            f">= {TARGET_QPS_RATIO:g}x peer", q >= TARGET_QPS_RATIO * mq, higher_is_better=True,
            note=f"{split}{b['qps_client']} client"),
        row("Python handler Call, fresh interpreter, p50", "ms", f["call"]["p50_ms"], mp50,
            "MCP SDK in-process function", "", None, note="[python] zygote = false: the one-shot path"),
        row(f"Python handler Call, fresh interpreter, {CONCURRENCY} in flight", "calls/s", f["qps_16"], mq,
            "MCP SDK in-process function", "", None, higher_is_better=True,
            note="[python] zygote = false: the one-shot path"),
    ]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--json", type=Path, help="write the whole result here")
    args = ap.parse_args()
    result = run(args.quick)
    for r in result["rows"]:
        ratio = f"{r['ratio']:.2f}x" if r["ratio"] is not None else "-"
        print(f"{r['what']:<52} {r['bitong']:>9.2f} {r['unit']:<8} {r['peer_name']} {r['peer']:.2f}  "
              f"{ratio:>7}  target {r['target'] or '-':<14} met {r['met']}")
    if args.json:
        args.json.write_text(json.dumps(result, indent=2, default=str), encoding="utf-8")


if __name__ == "__main__":
    main()
