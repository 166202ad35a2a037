"""What seeing into the sidecar costs: the same `bitong serve` with and without metrics, traces and JSON logs.

    python benchmarks/bench_observe.py [--quick]

Two servers as their own processes on unix sockets, the same tools: the peer
is plain; the observed one runs ``--metrics 127.0.0.1:0 --log-format json``
with OpenTelemetry on (``OTEL_TRACES_EXPORTER=console``, spans written to a
file: the SDK's batch processor does the work an OTLP exporter would, minus
the network). Rounds interleave, order alternating, so other work on a shared
machine falls on both alike. Reported: Call p50 of ``echo hello`` and Match
p50, one request in flight; the ratio is observed / plain. The target is at
most 10% more on a Call (a span, a few counters, a request id and one more log
line's JSON) and on a Match. ``BENCH_OBSERVE_PARTS=metrics`` (or ``json``,
``otel``, comma-separated) turns on only those parts in the observed server,
to see which one costs what.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("GRPC_VERBOSITY", "ERROR")

import grpc

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bitong.v1 import agent_pb2 as pb  # noqa: E402
from bitong.v1 import agent_pb2_grpc as pb_grpc  # noqa: E402

TOOL = """\
name: bench-echo
display: bench echo
intent: print hello for the benchmark
method: run
executor: shell
command: echo hello
params_schema: {}
constraints: { timeout_ms: 60000, max_output_bytes: 65536, require_confirm: false }
author: bench
created: 2026-12-03
why: the observability benchmark
"""
TARGET = 1.10


def _serve(root: Path, sock: Path, log: Path, observed: bool, parts: str = "metrics,json,otel"
           ) -> tuple[subprocess.Popen[bytes], str]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH" and not k.startswith("OTEL_")}
    env["PYTHONPATH"] = str(REPO)
    argv = [sys.executable, "-m", "bitong", "serve", "--no-semantic", "--tools", str(root), "--listen", f"unix:{sock}",
            "--admin-socket", "off", "--log-level", "INFO"]
    if observed and "metrics" in parts:
        argv += ["--metrics", "127.0.0.1:0"]
    if observed and "json" in parts:
        argv += ["--log-format", "json"]
    if observed and "otel" in parts:
        env["OTEL_TRACES_EXPORTER"] = "console"
    out = open(log, "wb")   # spans (console exporter) and the serving line; stderr: the log lines
    proc = subprocess.Popen(argv, cwd=REPO, env=env, stdout=out, stderr=open(log.with_suffix(".err"), "wb"))
    deadline = time.monotonic() + 60
    while b"serving on" not in log.read_bytes():
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            raise SystemExit(f"bitong serve ({'observed' if observed else 'plain'}) did not start")
        time.sleep(0.05)
    return proc, f"unix:{sock}"


def run(quick: bool = False) -> dict[str, Any]:
    rounds, calls = (4, 50) if quick else (10, 150)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "tools"
        (root / "bench-echo").mkdir(parents=True)
        (root / "bench-echo" / "TOOL.hdlp").write_text(TOOL)
        parts = os.environ.get("BENCH_OBSERVE_PARTS", "metrics,json,otel")
        servers = {name: _serve(root, Path(tmp) / f"{name}.sock", Path(tmp) / f"{name}.out", name == "observed", parts)
                   for name in ("plain", "observed")}
        try:
            stubs = {k: pb_grpc.ToolAgentStub(grpc.insecure_channel(addr)) for k, (_, addr) in servers.items()}
            echo = pb.CallRequest(tool="bench-echo")
            ask = pb.MatchRequest(intent="print hello for the benchmark")
            call_ms: dict[str, list[float]] = {k: [] for k in stubs}
            match_ms: dict[str, list[float]] = {k: [] for k in stubs}
            for stub in stubs.values():
                for _ in range(30):
                    assert stub.Call(echo).ok and stub.Match(ask).found
            for rnd in range(rounds):
                order = list(stubs) if rnd % 2 == 0 else list(reversed(stubs))
                for k in order:
                    for _ in range(calls):
                        t = time.perf_counter()
                        stubs[k].Call(echo)
                        call_ms[k].append((time.perf_counter() - t) * 1000)
                    for _ in range(calls):
                        t = time.perf_counter()
                        stubs[k].Match(ask)
                        match_ms[k].append((time.perf_counter() - t) * 1000)
        finally:
            for proc, _ in servers.values():
                proc.terminate()
                proc.wait()
        spans = (Path(tmp) / "observed.out").read_bytes().count(b'"name": "bitong.v1.ToolAgent/Call"')
    rows = []
    for what, data in (("Call p50, echo hello", call_ms), ("Match p50", match_ms)):
        observed, plain = statistics.median(data["observed"]), statistics.median(data["plain"])
        ratio = observed / plain
        rows.append({"what": f"observability on: {what}", "bitong": round(observed, 3), "peer": round(plain, 3),
                     "peer_name": "the same server, no metrics/traces/JSON logs", "ratio": round(ratio, 3),
                     "unit": "ms", "target": f"<= {TARGET}", "met": ratio <= TARGET,
                     "note": f"{rounds} rounds x {calls}, interleaved; {spans} Call spans exported"})
    return {"rows": rows, "load_average": os.getloadavg()}


if __name__ == "__main__":
    import json

    print(json.dumps(run("--quick" in sys.argv), indent=2))
