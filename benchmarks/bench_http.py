"""The ``http`` executor against aiohttp's client with keep-alive, one local server, one run (issue 13 §4).

    python benchmarks/bench_http.py [--quick] [--json PATH]

What it measures:

* **bitong**: a ``Call`` of a tool on the ``http`` executor (``GET
  http://127.0.0.1:PORT/ping``) to a served sidecar (``python -m bitong
  serve`` in its own process, over a unix socket, the sync gRPC client):
  the path the issue measured (2.07 ms p50, 1,031 calls/s at 16 in
  flight). So bitong's figure includes a gRPC round trip the peer does not
  make; the floor row says what that hop costs alone.
* **peer**: aiohttp's ``ClientSession`` (keep-alive, its default
  connector) in this process on uvloop, hitting the same server.
* the **server**: aiohttp's web server on uvloop in its own process
  (peer_http_server.py), answering ``pong``.
* context rows: the same sidecar on loopback TCP (on a unix socket bitong
  accepts each connection itself to read the caller's uid, and relays its
  bytes to gRPC's private socket: agent/peercred.py; TCP has no relay),
  the executor in process (no gRPC hop) with and without
  keep-alive (``[defaults] http_idle_ms = 0`` is the connection per
  request bitong made before), a served sidecar with keep-alive off, and
  the gRPC floor's round trip (peer_grpc_floor.py's constant Match).

p50 with one request in flight, requests/s with 16 in flight; each system
a short block per round, rounds interleaved with the order rotated, so
load from other work on a shared machine falls on all alike.
``run(quick)`` returns ``{"rows": [...]}`` for run_all.py.
Needs aiohttp (benchmarks/requirements.txt).
"""

from __future__ import annotations

import abc
import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from bench_sidecar import (Contention, LoopThread, ServerProcess, aio_latency, aio_throughput, approving_config, ms,
                           proc_cpu, row, start_floor, start_server, start_tcp, shut_down, sync_latency, sync_throughput)
from machine import machine  # benchmarks/ is the script's folder, first on sys.path

os.environ.setdefault("GRPC_VERBOSITY", "ERROR")

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
RESULTS = HERE / "results"
PEER_HTTP = HERE / "peer_http_server.py"
CONCURRENCY = 16
TARGET_P50_RATIO = 2.0     # issue 13 §4: within 2x of the keep-alive client at 1 in flight
TARGET_QPS_RATIO = 0.5     # and at least half its throughput at 16

HTTP_TOOL = """\
HLDP://bench/tool/bench-http
name: bench-http
display: 基准HTTP
intent: 向本机的测试服务发一个 GET，用来测量 http 执行器的开销
method: GET
executor: http
params_schema:
  url: { type: string, required: true, description: "the URL" }
constraints: { timeout_ms: 30000, max_output_bytes: 65536, require_confirm: false }
permissions: { network: true, network_hosts: [127.0.0.1] }
author: bench
created: 2026-12-03
why: 基准测试：http 执行器与 aiohttp 保持连接的客户端比较。
"""


class HttpTarget:
    """peer_http_server.py in its own process; ``url`` once it listens."""

    def __init__(self) -> None:
        self.proc = subprocess.Popen([sys.executable, str(PEER_HTTP)], stdout=subprocess.PIPE, stdin=subprocess.DEVNULL,
                                     start_new_session=True, text=True)
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline().split()
        if len(line) != 2 or line[0] != "port":
            self.stop()
            raise RuntimeError(f"peer_http_server.py did not start (said {line!r})")
        self.url = f"http://127.0.0.1:{line[1]}/ping"

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()   # only this process, which we started
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=5)
        if self.proc.stdout is not None:
            self.proc.stdout.close()


class System(abc.ABC):
    """One contestant: ``lat(n)`` seconds per request one at a time, ``qps(s)`` requests/s at 16 in flight.

    ``cpu_ms`` adds up, over the ``qps`` blocks, the CPU of the process doing the HTTP work (the
    sidecar; this process for the in-process ones), and ``calls`` the requests made, so CPU per
    request is a figure that moves less than time with other work on the machine.
    """

    name: str
    cpu_ms = 0.0
    calls = 0

    @abc.abstractmethod
    def lat(self, n: int) -> list[float]: ...

    @abc.abstractmethod
    def qps(self, seconds: float) -> float: ...


class ServedCall(System):
    """Call of bench-http through a served sidecar, sync gRPC client (futures for the 16 in flight)."""

    def __init__(self, name: str, address: str, url: str, pid: int) -> None:
        import grpc

        from bitong.v1 import agent_pb2 as pb
        from bitong.v1 import agent_pb2_grpc as pb_grpc

        self.name = name
        self.pid = pid
        self.channel = grpc.insecure_channel(address)
        self.stub = pb_grpc.ToolAgentStub(self.channel)
        self.req = pb.CallRequest(tool="bench-http")
        self.req.params.update({"url": url})
        first = self.stub.Call(self.req, timeout=10)
        if not (first.ok and first.output == b"pong"):
            raise RuntimeError(f"{name}: bench-http did not answer pong: ok={first.ok} error={first.error!r}")
        self.lat(20)

    def lat(self, n: int) -> list[float]:
        return sync_latency(lambda i: self.stub.Call(self.req, timeout=10), n)

    def qps(self, seconds: float) -> float:
        cpu0, t0 = proc_cpu(self.pid)[0], time.perf_counter()
        rate = sync_throughput(lambda: self.stub.Call.future(self.req, timeout=10), seconds, CONCURRENCY)
        self.cpu_ms += (proc_cpu(self.pid)[0] - cpu0) * 1000
        self.calls += round(rate * (time.perf_counter() - t0))
        return rate

    def close(self) -> None:
        self.channel.close()


class OnLoop(System):
    """Something async on the loop thread: aiohttp's client, or the executor in process."""

    def __init__(self, name: str, lt: LoopThread, one: Callable[[], Awaitable[None]]) -> None:
        self.name = name
        self.lt = lt
        self.one = one
        self.lat(20)

    def lat(self, n: int) -> list[float]:
        out: list[float] = self.lt.run(aio_latency(lambda i: self.one(), n))
        return out

    def qps(self, seconds: float) -> float:
        cpu0, t0 = _self_cpu(), time.perf_counter()
        out: float = self.lt.run(aio_throughput(lambda i: self.one(), seconds, CONCURRENCY))
        self.cpu_ms += (_self_cpu() - cpu0) * 1000
        self.calls += round(out * (time.perf_counter() - t0))
        return out


def _self_cpu() -> float:
    use = resource.getrusage(resource.RUSAGE_SELF)
    return use.ru_utime + use.ru_stime


def aiohttp_client(lt: LoopThread, url: str) -> tuple[OnLoop, Callable[[], None]]:
    import aiohttp

    async def open_() -> aiohttp.ClientSession:
        return aiohttp.ClientSession()   # TCPConnector: keep-alive, 100 connections

    session = lt.run(open_())

    async def one() -> None:
        async with session.get(url) as resp:
            body = await resp.read()
        if resp.status != 200 or body != b"pong":
            raise RuntimeError(f"aiohttp: {resp.status} {body!r}")

    return OnLoop("aiohttp keep-alive", lt, one), lambda: lt.run(session.close())


def executor_in_process(lt: LoopThread, url: str, tool_dir: Path, keep_alive: bool) -> OnLoop:
    from bitong.agent.config import from_dict
    from bitong.agent.calling.executors import Executors
    from bitong.parser import parse_file

    tool = parse_file(str(tool_dir / "TOOL.hdlp"))
    runners = Executors(from_dict({"defaults": {} if keep_alive else {"http_idle_ms": 0}}))

    async def one() -> None:
        out = await runners.run(tool, {"url": url}, deadline=time.monotonic() + 10)
        if not (out.ok and out.stdout == b"pong"):
            raise RuntimeError(f"executor: {out.error}")

    return OnLoop("executor in process" + ("" if keep_alive else ", keep-alive off"), lt, one)


def interleave(systems: list[System], n: int, seconds: float, rounds: int) -> dict[str, dict[str, Any]]:
    lat: dict[str, list[float]] = {s.name: [] for s in systems}
    qps: dict[str, list[float]] = {s.name: [] for s in systems}
    for r in range(rounds):
        order = systems[r % len(systems):] + systems[:r % len(systems)]
        for s in order:
            lat[s.name] += s.lat(n // rounds)
        for s in order:
            qps[s.name].append(s.qps(seconds / rounds))
    cpu = {s.name: s.cpu_ms / max(1, s.calls) for s in systems}
    return {name: {"one": ms(lat[name]), "qps_16": statistics.median(qps[name]), "cpu_ms_per_request": cpu[name],
                   "qps_16_blocks": [round(x) for x in qps[name]]} for name in lat}


def progress(msg: str) -> None:
    print(f"bench_http: {msg}", file=sys.stderr, flush=True)


def run(quick: bool = False) -> dict[str, Any]:
    """Start the HTTP server, two sidecars (keep-alive on and off) and the floor; measure; the rows."""
    n = 600 if quick else 1200
    seconds = 3.0 if quick else 6.0
    rounds = 3 if quick else 6
    started = time.perf_counter()
    result: dict[str, Any] = {"name": "http", "machine": machine(), "quick": quick}
    tmp = Path(tempfile.mkdtemp(prefix="bitong-bench-http-"))
    lt = LoopThread()
    servers: list[ServerProcess] = []
    closers: list[Callable[[], None]] = []
    target: HttpTarget | None = None
    try:
        root = tmp / "tools"
        (root / "bench-http").mkdir(parents=True)
        (root / "bench-http" / "TOOL.hdlp").write_text(HTTP_TOOL, encoding="utf-8")
        progress("starting the HTTP server, two sidecars (keep-alive on, off) and the gRPC floor")
        target = HttpTarget()
        on_dir, off_dir = tmp / "on", tmp / "off"
        on_dir.mkdir()
        off_dir.mkdir()
        srv, notes = start_server(on_dir, [root], config=approving_config(on_dir, [root]))
        servers.append(srv)
        off, _ = start_server(off_dir, [root], config=approving_config(off_dir, [root],
                                                                        "[defaults]\nhttp_idle_ms = 0\n"))
        servers.append(off)
        floor_srv = start_floor(tmp, REPO)
        servers.append(floor_srv)
        tcp = start_tcp(tmp, root)
        servers.append(tcp)
        result["server"] = {"pid": srv.pid, **notes}
        served = ServedCall("served Call", srv.address, target.url, srv.pid)
        closers.append(served.close)
        served_off = ServedCall("served Call, keep-alive off", off.address, target.url, off.pid)
        closers.append(served_off.close)
        served_tcp = ServedCall("served Call, loopback TCP", tcp.address, target.url, tcp.pid)
        closers.append(served_tcp.close)
        peer, close_peer = aiohttp_client(lt, target.url)
        closers.append(close_peer)
        inproc = executor_in_process(lt, target.url, root / "bench-http", keep_alive=True)
        inproc_off = executor_in_process(lt, target.url, root / "bench-http", keep_alive=False)
        floor_rtt = floor_round_trip(floor_srv.address, n // 2)
        floor_cpu = floor_cpu_per_rpc(floor_srv.address, floor_srv.pid, seconds / rounds)
        progress(f"1 and {CONCURRENCY} in flight, {rounds} interleaved rounds")
        with Contention() as c:
            result["systems"] = interleave([served, peer, served_tcp, inproc, served_off, inproc_off], n, seconds,
                                           rounds)
        result["contention_pct"] = c.foreign_pct
        result["floor_match_p50_ms"] = floor_rtt
        result["floor_cpu_ms_per_rpc"] = floor_cpu
    finally:
        shut_down(closers, lt, servers)
        if target is not None:
            target.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    result["rows"] = build_rows(result)
    result["seconds"] = time.perf_counter() - started
    return result


def floor_round_trip(address: str, n: int) -> float:
    """p50 ms of the floor's constant Match: a gRPC round trip over the same kind of socket, nothing else."""
    import grpc

    from bitong.v1 import agent_pb2 as pb
    from bitong.v1 import agent_pb2_grpc as pb_grpc

    with grpc.insecure_channel(address) as ch:
        stub = pb_grpc.ToolAgentStub(ch)
        req = pb.MatchRequest(intent="x")
        return ms(sync_latency(lambda i: stub.Match(req, timeout=10), n, warm=50))["p50_ms"]


def floor_cpu_per_rpc(address: str, pid: int, seconds: float) -> float:
    """ms of the floor server's CPU per constant Match at 16 in flight: what any Python gRPC server
    spends on a unary RPC here, beside the sidecar's CPU per Call at the same load."""
    import grpc

    from bitong.v1 import agent_pb2 as pb
    from bitong.v1 import agent_pb2_grpc as pb_grpc

    with grpc.insecure_channel(address) as ch:
        stub = pb_grpc.ToolAgentStub(ch)
        req = pb.MatchRequest(intent="x")
        stub.Match(req, timeout=10)
        cpu0, t0 = proc_cpu(pid)[0], time.perf_counter()
        rate = sync_throughput(lambda: stub.Match.future(req, timeout=10), seconds, CONCURRENCY)
        calls = rate * (time.perf_counter() - t0)
        return (proc_cpu(pid)[0] - cpu0) * 1000 / max(1.0, calls)


def build_rows(r: dict[str, Any]) -> list[dict[str, Any]]:
    s = r["systems"]
    b, p, e = s["served Call"], s["aiohttp keep-alive"], s["executor in process"]
    boff, eoff = s["served Call, keep-alive off"], s["executor in process, keep-alive off"]
    peer = "aiohttp ClientSession, keep-alive"
    rows = []
    v, q = b["one"]["p50_ms"], p["one"]["p50_ms"]
    rows.append(row("http Call (served sidecar on a unix socket, sync gRPC client), 1 in flight, p50", "ms", v, q, peer,
                    f"ratio <= {TARGET_P50_RATIO:.1f}", v / q <= TARGET_P50_RATIO,
                    note=f"includes a gRPC round trip (floor {r['floor_match_p50_ms']:.3f} ms)"))
    v, q = b["qps_16"], p["qps_16"]
    rows.append(row(f"http Call (served sidecar on a unix socket), {CONCURRENCY} in flight", "calls/s", v, q, peer,
                    f"ratio >= {TARGET_QPS_RATIO:.1f}", v / q >= TARGET_QPS_RATIO, higher_is_better=True))
    t = s["served Call, loopback TCP"]
    v, q = t["one"]["p50_ms"], p["one"]["p50_ms"]
    rows.append(row("http Call, sidecar on loopback TCP (the default --listen; no unix relay), 1 in flight, p50", "ms",
                    v, q, peer, f"ratio <= {TARGET_P50_RATIO:.1f}", v / q <= TARGET_P50_RATIO))
    v, q = t["qps_16"], p["qps_16"]
    rows.append(row(f"http Call, sidecar on loopback TCP, {CONCURRENCY} in flight", "calls/s", v, q, peer,
                    f"ratio >= {TARGET_QPS_RATIO:.1f}", v / q >= TARGET_QPS_RATIO, higher_is_better=True))
    rows.append(row("http executor in process, 1 in flight, p50", "ms", e["one"]["p50_ms"], p["one"]["p50_ms"], peer,
                    "", None, note="no gRPC hop"))
    rows.append(row(f"http executor in process, {CONCURRENCY} in flight", "calls/s", e["qps_16"], p["qps_16"], peer,
                    "", None, higher_is_better=True))
    rows.append(row("http Call, keep-alive off (a connection per request, as before), p50", "ms",
                    boff["one"]["p50_ms"], p["one"]["p50_ms"], peer, "", None))
    rows.append(row(f"http Call, keep-alive off, {CONCURRENCY} in flight", "calls/s", boff["qps_16"], p["qps_16"],
                    peer, "", None, higher_is_better=True))
    rows.append(row("http executor in process, keep-alive off, p50", "ms", eoff["one"]["p50_ms"],
                    p["one"]["p50_ms"], peer, "", None))
    rows.append(row(f"CPU per request at {CONCURRENCY} in flight: the sidecar (unix) / aiohttp's client process",
                    "ms", b["cpu_ms_per_request"], p["cpu_ms_per_request"], "aiohttp client process", "", None,
                    note=f"TCP sidecar {t['cpu_ms_per_request']:.3f} ms, keep-alive off {boff['cpu_ms_per_request']:.3f} ms,"
                         f" executor in process {e['cpu_ms_per_request']:.3f} ms"))
    rows.append(row("gRPC round trip alone (the floor's constant Match), p50", "ms", r["floor_match_p50_ms"], None,
                    "", "", None))
    above = b["one"]["p50_ms"] - r["floor_match_p50_ms"]
    rows.append(row("http Call above the gRPC floor (served p50 minus the floor's round trip), 1 in flight", "ms",
                    above, p["one"]["p50_ms"], peer, "", None,
                    note="what bitong adds to any Python gRPC server's round trip: executor, params, observe, log"))
    fc = r["floor_cpu_ms_per_rpc"]
    rows.append(row(f"CPU per request at {CONCURRENCY} in flight: the sidecar (unix) / the gRPC floor's constant Match",
                    "ms", b["cpu_ms_per_request"], fc, "grpc.aio floor server", "", None,
                    note=f"above the floor {b['cpu_ms_per_request'] - fc:.3f} ms a Call (TCP sidecar "
                         f"{t['cpu_ms_per_request'] - fc:.3f} ms), of which the executor in process "
                         f"{e['cpu_ms_per_request']:.3f} ms; measured before the interleaved rounds"))
    return rows


def report(result: dict[str, Any]) -> str:
    m = result["machine"]
    lines = [f"bench_http — {m['date']} — {m['nproc']} CPUs ({m['cpu']}), Python {m['python']}", ""]
    for r in result["rows"]:
        ratio = f"{r['ratio']:.2f}" if r["ratio"] is not None else "-"
        peer = f"{r['peer']:.3f}" if r["peer"] is not None else "-"
        met = {True: "yes", False: "NO", None: ""}[r["met"]]
        lines.append(f"{r['what']}: {r['bitong']:.3f} {r['unit']} | peer {peer} ({r['peer_name']}) | {ratio} "
                     f"| {r['target']} {met} {r['note']}")
    blocks = {k: v["qps_16_blocks"] for k, v in result["systems"].items()}
    lines.append(f"16-in-flight blocks: {blocks}")
    lines.append(f"other work on the machine meanwhile: {result['contention_pct']:.0f}% of one core")
    lines.append(f"({result['seconds']:.0f} s)")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="fewer samples, shorter blocks")
    ap.add_argument("--json", type=Path, default=RESULTS / "http.json", help="where the JSON copy goes")
    args = ap.parse_args(argv)
    result = run(quick=args.quick)
    print(report(result))
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(result, indent=2, ensure_ascii=False), encoding="utf-8")
    print(f"JSON: {args.json}")
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(REPO))
    sys.exit(main())
