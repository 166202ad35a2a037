"""What the unix socket's SO_PEERCRED front costs: the same sidecar over its unix socket and over loopback TCP.

    python benchmarks/bench_unix_front.py [--rounds N] [--calls N] [--stream-mib N] [--json PATH]
                                          [--direct-repo DIR]

gRPC Python cannot say which uid is on a unix socket, so ``bitong serve
--listen unix:PATH`` accepts on the socket itself and relays each connection
to gRPC's own socket (agent/peercred.py). The peer here is the same server
code on 127.0.0.1 (anonymous: no relay, no TLS), which a client would
otherwise use. Two servers run as their own processes; rounds interleave
(order alternating) so load from other work on a shared machine falls on
both alike. Reports Call p50/p99 of ``echo hello`` with one call in flight,
and StreamCall MB/s (10^6 bytes) of ``head -c N /dev/zero``; ratios are
unix / tcp. ``--direct-repo DIR`` adds a third server: a checkout from
before the front (gRPC listening on the unix socket itself), the floor the
relay is measured against (``unix / unix-direct``).
"""

from __future__ import annotations

import argparse
import json
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
from google.protobuf import struct_pb2

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bitong.v1 import agent_pb2 as pb  # noqa: E402
from bitong.v1 import agent_pb2_grpc as pb_grpc  # noqa: E402

TOOL = """\
name: {name}
display: {name}
intent: benchmark {name}
method: run
executor: shell
command: {command}
params_schema: {params}
constraints: {{ timeout_ms: 60000, max_output_bytes: 65536, require_confirm: false }}
author: bench
created: 2026-12-02
why: the unix front benchmark
"""


def _tools(root: Path) -> None:
    for name, command, params in (("bench-echo", "echo hello", "{}"),
                                  ("bench-zero", "head -c {n} /dev/zero", "{ n: { type: integer, required: true } }")):
        (root / name).mkdir(parents=True)
        (root / name / "TOOL.hdlp").write_text(TOOL.format(name=name, command=command, params=params))


def _serve(root: Path, listen: str, repo: Path = REPO) -> tuple[subprocess.Popen[str], str]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    proc = subprocess.Popen([sys.executable, "-m", "bitong", "serve", "--no-semantic", "--no-vocabulary",
                             "--tools", str(root), "--listen", listen, "--log-level", "WARNING"],
                            cwd=repo, env={**env, "PYTHONPATH": str(repo)}, stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, text=True)
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if "serving on" not in line:
        proc.kill()
        raise SystemExit(f"bitong serve {listen} did not start")
    return proc, line.split("serving on ", 1)[1].strip()


def _pct(xs: list[float], p: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(p * len(xs)))]


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--calls", type=int, default=200)
    ap.add_argument("--stream-mib", type=int, default=128)
    ap.add_argument("--json", metavar="PATH")
    ap.add_argument("--direct-repo", metavar="DIR", help="a checkout whose unix listener is gRPC's own")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "tools"
        _tools(root)
        servers = {"unix": _serve(root, f"unix:{tmp}/b.sock"), "tcp": _serve(root, "127.0.0.1:0")}
        if args.direct_repo:
            servers["unix-direct"] = _serve(root, f"unix:{tmp}/direct.sock", Path(args.direct_repo))
        try:
            stubs = {k: pb_grpc.ToolAgentStub(grpc.insecure_channel(addr)) for k, (_, addr) in servers.items()}
            echo = pb.CallRequest(tool="bench-echo")
            params = struct_pb2.Struct()
            params.update({"n": args.stream_mib * 1024 * 1024})
            zero = pb.CallRequest(tool="bench-zero", params=params)
            lat: dict[str, list[float]] = {k: [] for k in stubs}
            mbps: dict[str, list[float]] = {k: [] for k in stubs}
            for stub in stubs.values():
                for _ in range(50):
                    assert stub.Call(echo).ok
            for rnd in range(args.rounds):
                order = list(stubs)[rnd % len(stubs):] + list(stubs)[:rnd % len(stubs)]
                for k in order:
                    for _ in range(args.calls):
                        t = time.perf_counter()
                        stubs[k].Call(echo)
                        lat[k].append((time.perf_counter() - t) * 1000)
                for k in order:
                    t = time.perf_counter()
                    got = sum(len(e.chunk.data) for e in stubs[k].StreamCall(zero) if e.HasField("chunk"))
                    mbps[k].append(got / (time.perf_counter() - t) / 1e6)
        finally:
            for proc, _ in servers.values():
                proc.terminate()
                proc.wait()
                if proc.stdout is not None:
                    proc.stdout.close()
    out: dict[str, Any] = {k: {"call_p50_ms": round(statistics.median(lat[k]), 3),
                               "call_p99_ms": round(_pct(lat[k], 0.99), 3),
                               "stream_mbps": round(statistics.median(mbps[k]), 1)} for k in lat}
    out["ratio_call_p50"] = round(out["unix"]["call_p50_ms"] / out["tcp"]["call_p50_ms"], 3)
    out["ratio_stream"] = round(out["unix"]["stream_mbps"] / out["tcp"]["stream_mbps"], 3)
    out["added_call_p50_ms"] = round(out["unix"]["call_p50_ms"] - out["tcp"]["call_p50_ms"], 3)
    if "unix-direct" in out:
        direct = out["unix-direct"]
        out["ratio_call_p50_vs_direct"] = round(out["unix"]["call_p50_ms"] / direct["call_p50_ms"], 3)
        out["ratio_stream_vs_direct"] = round(out["unix"]["stream_mbps"] / direct["stream_mbps"], 3)
        out["added_call_p50_ms_vs_direct"] = round(out["unix"]["call_p50_ms"] - direct["call_p50_ms"], 3)
    out["load_average"] = os.getloadavg()
    print(json.dumps(out, indent=2))
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
