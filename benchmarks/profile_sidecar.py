"""Where a sidecar call's time goes: one workload against a served bitong, profiled from outside.

    python benchmarks/profile_sidecar.py call|call16|http|http16|match|stream|floor|floor16 [--seconds S]
        [--pyspy [--native]] [--perf] [--tcp] [--repo DIR]

Starts ``python -m bitong serve`` exactly as bench_sidecar.py does, drives one
workload with the sync client for a bounded time, and reports CPU per call
split by process (server, its children, this client) from /proc/<pid>/stat,
so a missed throughput target can be read as a CPU budget on this machine.
``http``/``http16`` Call bench_http.py's tool (GET of peer_http_server.py, keep-alive): no child
process, so the server's CPU per call is bitong's own (gRPC, params, executor, observe, log).
``floor``/``floor16`` drive the bare grpc.aio server (peer_grpc_floor.py) with its constant Match
instead: the CPU a unary RPC costs any Python gRPC server here, the part bitong cannot cut.
``--tcp``: the sidecar (or the floor) on loopback TCP, without the unix socket's relay (peercred.py).
With ``--pyspy`` it samples the server with py-spy (``pip install py-spy``;
not a benchmark requirement) and prints the functions with the most time,
inclusive and self, in microseconds per call; with ``--perf``, ``perf record
-e cpu-clock`` on the server split by shared object and symbol (the C side:
grpc core, libpython, the kernel). Not run by run_all.py: it has
no ``run()``, on purpose, since profiling slows what it measures.
"""

from __future__ import annotations

import argparse
import collections
import os
import resource
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_http as bh
import bench_sidecar as bs


def workload(kind: str, address: str, seconds: float, url: str = "") -> Callable[[], tuple[int, int]]:
    """A bounded loop of one kind of call; returns how many calls (stream: messages) and bytes it got."""
    import grpc

    from bitong.v1 import agent_pb2 as pb
    from bitong.v1 import agent_pb2_grpc as pb_grpc

    queries = bs.eval_queries()

    def go() -> tuple[int, int]:
        with grpc.insecure_channel(address) as ch:
            stub = pb_grpc.ToolAgentStub(ch)
            end = time.perf_counter() + seconds
            n = got = 0
            if kind in ("call", "http"):
                req = pb.CallRequest(tool="bench-echo" if kind == "call" else "bench-http")
                if kind == "http":
                    req.params.update({"url": url})
                while time.perf_counter() < end:
                    stub.Call(req, timeout=10)
                    n += 1
            elif kind == "floor":
                req_floor = pb.MatchRequest(intent="x")
                while time.perf_counter() < end:
                    stub.Match(req_floor, timeout=10)
                    n += 1
            elif kind == "floor16":
                req_floor = pb.MatchRequest(intent="x")
                qps = bs.sync_throughput(lambda: stub.Match.future(req_floor, timeout=30), seconds, bs.CONCURRENCY)
                n = round(qps * seconds)
            elif kind == "match":
                reqs = [pb.MatchRequest(intent=q) for q in queries]
                while time.perf_counter() < end:
                    stub.Match(reqs[n % len(reqs)], timeout=10)
                    n += 1
            elif kind in ("call16", "http16"):
                req = pb.CallRequest(tool="bench-echo" if kind == "call16" else "bench-http")
                if kind == "http16":
                    req.params.update({"url": url})
                qps = bs.sync_throughput(lambda: stub.Call.future(req, timeout=30), seconds, bs.CONCURRENCY)
                n = round(qps * seconds)
            elif kind == "stream":
                req = pb.CallRequest(tool="bench-stream")
                req.params.update({"bytes": 1 << 40})  # cut by the deadline below
                try:
                    for ev in stub.StreamCall(req, timeout=seconds):
                        if ev.HasField("chunk"):
                            n += 1
                            got += len(ev.chunk.data)
                except grpc.RpcError as exc:
                    if exc.code() != grpc.StatusCode.DEADLINE_EXCEEDED:
                        raise
            return n, got

    return go


def floor_tcp(tmp: Path) -> bs.ServerProcess:
    """The bare grpc.aio server (peer_grpc_floor.py) on 127.0.0.1 (a port free a moment ago)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    srv = bs.ServerProcess([], tmp / "unused.sock", tmp / "floor.log", dict(os.environ), bs.REPO,
                           argv=[sys.executable, str(bs.PEER_FLOOR), f"127.0.0.1:{port}"], listen=f"127.0.0.1:{port}")
    if not srv.wait_ready():
        tail = srv.log_tail()
        srv.stop()
        raise RuntimeError(f"the gRPC floor on 127.0.0.1:{port} did not start:\n{tail}")
    return srv


def pyspy_table(raw: Path, rate: int, calls: int, top: int = 25) -> str:
    """Aggregate py-spy's collapsed stacks: inclusive and self microseconds per call."""
    incl: collections.Counter[str] = collections.Counter()
    self_: collections.Counter[str] = collections.Counter()
    total = 0
    for line in raw.read_text(errors="replace").splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack:
            continue
        c = int(count)
        frames = stack.split(";")
        total += c
        for fr in set(frames):
            incl[fr] += c
        self_[frames[-1]] += c
    per = 1e6 / rate / max(1, calls)
    out = [f"py-spy: {total} samples at {rate}/s over {calls} calls = {total * per:.0f} us of sampled time per call"]
    for title, counter in (("inclusive", incl), ("self", self_)):
        out.append(f"-- top {top} {title} (us per call, % of samples)")
        for fr, c in counter.most_common(top):
            out.append(f"{c * per:9.1f} us  {100 * c / max(1, total):5.1f}%  {fr[:150]}")
    return "\n".join(out)


def perf_table(data: Path, calls: int, top: int = 30) -> str:
    """``perf report`` by shared object, then by symbol, as a share of the server's samples."""
    out = []
    for keys in ("dso", "dso,sym"):
        rep = subprocess.run(["perf", "report", "-i", str(data), "--stdio", "--sort", keys, "--percent-limit", "0.7"],
                             check=False, capture_output=True, text=True, timeout=120)
        rows = [ln for ln in rep.stdout.splitlines() if ln.strip() and not ln.startswith("#")]
        out.append(f"-- perf, by {keys} (% of the server's CPU samples)")
        out += rows[:top]
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("kind", choices=("call", "call16", "http", "http16", "match", "stream", "floor", "floor16"))
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--pyspy", action="store_true", help="sample the server with py-spy")
    ap.add_argument("--native", action="store_true", help="py-spy --native (C frames too)")
    ap.add_argument("--perf", action="store_true",
                    help="perf record -e cpu-clock on the server: the split by shared object and symbol (C side)")
    ap.add_argument("--tcp", action="store_true", help="serve on loopback TCP: no unix relay")
    ap.add_argument("--rate", type=int, default=1000)
    ap.add_argument("--repo", type=Path, default=None, help="serve bitong from this checkout (see bench_sidecar.py)")
    args = ap.parse_args(argv)
    seconds = min(args.seconds, 60.0)

    tmp = Path(tempfile.mkdtemp(prefix="bitong-prof-"))
    target = bh.HttpTarget() if args.kind.startswith("http") else None
    url = target.url if target is not None else ""
    try:
        root = tmp / "tools"
        for name, text in (("bench-echo", bs.ECHO_TOOL), ("bench-stream", bs.STREAM_TOOL),
                           ("bench-http", bh.HTTP_TOOL)):
            (root / name).mkdir(parents=True)
            (root / name / "TOOL.hdlp").write_text(text, encoding="utf-8")
        roots = [root] + ([bs.EVAL_REGISTRY] if bs.EVAL_REGISTRY.is_dir() else [])
        repo = bs.REPO if args.repo is None else args.repo.resolve()
        if args.kind.startswith("floor"):
            srv = floor_tcp(tmp) if args.tcp else bs.start_floor(tmp, repo)
            notes = {"parser_fallback": "n/a (the floor)"}
        elif args.tcp:
            srv, notes = bs.start_tcp(tmp, root), {"parser_fallback": "not checked (TCP)"}
        else:
            srv, notes = bs.start_server(tmp, roots, repo)
        try:
            workload(args.kind, srv.address, min(1.0, seconds), url)()  # warm
            spy = None
            raw = tmp / "pyspy.txt"
            if args.pyspy:
                cmd = ["py-spy", "record", "-p", str(srv.pid), "-r", str(args.rate), "-d", str(int(seconds) + 1),
                       "--format", "raw", "-o", str(raw)]
                # --native must pause the process to unwind C frames; without it, sample without pausing.
                cmd.append("--native" if args.native else "--nonblocking")
                spy = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
                time.sleep(0.5)
            perf = None
            perf_data = tmp / "perf.data"
            if args.perf:
                perf = subprocess.Popen(["perf", "record", "-q", "-e", "cpu-clock", "-F", str(args.rate), "-p",
                                         str(srv.pid), "-o", str(perf_data), "--", "sleep", str(seconds)],
                                        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
                time.sleep(0.3)
            s0, c0 = bs.proc_cpu(srv.pid)
            b0 = bs.system_busy()
            r0 = resource.getrusage(resource.RUSAGE_SELF)
            t0 = time.perf_counter()
            calls, got = workload(args.kind, srv.address, seconds, url)()
            wall = time.perf_counter() - t0
            r1 = resource.getrusage(resource.RUSAGE_SELF)
            s1, c1 = bs.proc_cpu(srv.pid)
            b1 = bs.system_busy()
            client = (r1.ru_utime + r1.ru_stime) - (r0.ru_utime + r0.ru_stime)
            unit = "message" if args.kind == "stream" else "call"
            print(f"{args.kind}: {calls} {unit}s in {wall:.2f} s = {calls / wall:,.0f}/s "
                  f"(parser fallback: {notes['parser_fallback']})"
                  + (f"; {got / wall / 1e6:,.0f} MB/s, mean chunk {got / max(1, calls) / 1024:.0f} KiB" if got else ""))
            print(f"CPU per {unit}: server {1e6 * (s1 - s0) / calls:.0f} us, its children "
                  f"{1e6 * (c1 - c0) / calls:.0f} us, client {1e6 * client / calls:.0f} us; "
                  f"server busy {100 * (s1 - s0) / wall:.0f}% of one core, client {100 * client / wall:.0f}%")
            ours = (s1 - s0) + (c1 - c0) + client
            print(f"machine: {100 * (b1 - b0) / wall:.0f}% of one core busy in all ({os.cpu_count()} cores), "
                  f"{100 * max(0.0, (b1 - b0) - ours) / wall:.0f}% of it neither the server, its children nor "
                  f"this client (py-spy, other work on the machine, the kernel)")
            if perf is not None:
                perf.communicate(timeout=seconds + 30)
                print(perf_table(perf_data, calls))
            if spy is not None:
                _, err = spy.communicate(timeout=seconds + 30)
                if raw.exists():
                    print(pyspy_table(raw, args.rate, calls))
                else:
                    print(f"py-spy wrote nothing: {err.decode(errors='replace')[-500:]}")
        finally:
            srv.stop()
    finally:
        if target is not None:
            target.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
