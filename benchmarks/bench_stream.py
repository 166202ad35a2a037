"""StreamCall against a bare grpc.aio server-streaming floor, same client, one run (issue 13 §5).

    python benchmarks/bench_stream.py [--quick] [--json PATH]

* **bitong**: a served sidecar (``python -m bitong serve``, its own process,
  unix socket) answering a StreamCall of a shell tool running ``head -c N
  /dev/zero``: a real process, its stdout pipe, the executor's reads, one
  ``CallEvent`` per read.
* **floor**: peer_grpc_floor.py, a bare grpc.aio server on the same proto
  that writes N zero bytes from memory in 64 KiB ``CallEvent`` chunks: gRPC
  streaming alone, nothing else.
* context: the same sidecar listening on loopback TCP. On a unix socket
  bitong accepts the connection itself (to read the caller's uid with
  SO_PEERCRED) and relays every byte to gRPC's private socket through its
  event loop (agent/peercred.py); over TCP there is no relay, so the two
  rows say what the relay costs a stream.
* the **same client** reads them all: a sync gRPC channel iterating the stream
  in this process, counting bytes.

Per system: MB/s (10^6 bytes) of one stream, and the server process's own
CPU seconds per GB streamed (utime + stime from /proc, the tool's process
not included: it is the kernel's and ``head``'s work, not the server's).
Streams alternate (bitong, floor, bitong, ...) so load from other work on a
shared machine falls on both alike; the median of each is reported.
``run(quick)`` returns ``{"rows": [...]}`` for run_all.py.
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
from pathlib import Path
from typing import Any

from bench_sidecar import (MB, MiB, STREAM_TOOL, Contention, ServerProcess, proc_cpu, row, start_floor,
                           start_server, start_tcp)
from machine import machine  # benchmarks/ is the script's folder, first on sys.path

os.environ.setdefault("GRPC_VERBOSITY", "ERROR")

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
RESULTS = HERE / "results"
TARGET_RATIO = 0.8     # issue 13 §5: at least 0.8x the floor's MB/s


def one_stream(address: str, pid: int, nbytes: int) -> dict[str, Any]:
    """One StreamCall of ``nbytes`` zeros: MB/s, messages, and the server's CPU seconds meanwhile."""
    import grpc

    from bitong.v1 import agent_pb2 as pb
    from bitong.v1 import agent_pb2_grpc as pb_grpc

    req = pb.CallRequest(tool="bench-stream")
    req.params.update({"bytes": nbytes})
    with grpc.insecure_channel(address) as ch:
        stub = pb_grpc.ToolAgentStub(ch)
        warm = pb.CallRequest(tool="bench-stream")
        warm.params.update({"bytes": 4 * MiB})
        for _ in stub.StreamCall(warm, timeout=30):
            pass
        got = messages = 0
        final = None
        cpu0 = proc_cpu(pid)[0]
        t0 = time.perf_counter()
        for ev in stub.StreamCall(req, timeout=300):
            if ev.HasField("chunk"):
                got += len(ev.chunk.data)
                messages += 1
            else:
                final = ev.result
        elapsed = time.perf_counter() - t0
        cpu = proc_cpu(pid)[0] - cpu0
    if final is None or not final.ok or got != nbytes:
        raise RuntimeError(f"StreamCall at {address}: {got} of {nbytes} bytes, result {final}")
    return {"mb_s": nbytes / elapsed / MB, "seconds": elapsed, "messages": messages,
            "mean_chunk_kib": nbytes / max(1, messages) / 1024, "cpu_s_per_gb": cpu / (nbytes / 1e9)}


def progress(msg: str) -> None:
    print(f"bench_stream: {msg}", file=sys.stderr, flush=True)


def run(quick: bool = False) -> dict[str, Any]:
    """Start the sidecar and the floor; alternate streams; the rows."""
    nbytes = (256 if quick else 512) * MiB
    rounds = 3
    started = time.perf_counter()
    result: dict[str, Any] = {"name": "stream", "machine": machine(), "quick": quick, "bytes": nbytes}
    tmp = Path(tempfile.mkdtemp(prefix="bitong-bench-stream-"))
    servers: list[ServerProcess] = []
    try:
        root = tmp / "tools"
        (root / "bench-stream").mkdir(parents=True)
        (root / "bench-stream" / "TOOL.hdlp").write_text(STREAM_TOOL, encoding="utf-8")
        progress("starting the sidecar and the gRPC floor")
        srv, notes = start_server(tmp, [root])
        servers.append(srv)
        floor = start_floor(tmp, REPO)
        servers.append(floor)
        tcp = start_tcp(tmp, root)
        servers.append(tcp)
        result["server"] = {"pid": srv.pid, **notes}
        runs: dict[str, list[dict[str, Any]]] = {"bitong": [], "floor": [], "tcp": []}
        progress(f"{rounds} rounds of one {nbytes >> 20} MiB stream each, alternating")
        with Contention() as c:
            for r in range(rounds):
                order = [("bitong", srv), ("floor", floor), ("tcp", tcp)]
                for name, server in order if r % 2 == 0 else reversed(order):
                    runs[name].append(one_stream(server.address, server.pid, nbytes))
        result["contention_pct"] = c.foreign_pct
        result["runs"] = runs
    finally:
        for server in servers:
            server.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    result["rows"] = build_rows(result)
    result["seconds"] = time.perf_counter() - started
    return result


def _median(runs: list[dict[str, Any]], key: str) -> float:
    return statistics.median(x[key] for x in runs)


def build_rows(r: dict[str, Any]) -> list[dict[str, Any]]:
    b, f, t = r["runs"]["bitong"], r["runs"]["floor"], r["runs"]["tcp"]
    size = f"{r['bytes'] >> 20} MiB"
    v, p = _median(b, "mb_s"), _median(f, "mb_s")
    chunk = _median(b, "mean_chunk_kib")
    return [
        row(f"StreamCall of {size} (head -c N /dev/zero, served sidecar on a unix socket)", "MB/s", v, p,
            "grpc.aio floor, 64 KiB chunks from memory", f"ratio >= {TARGET_RATIO}", v / p >= TARGET_RATIO,
            higher_is_better=True, note=f"mean chunk {chunk:.0f} KiB; runs {[round(x['mb_s']) for x in b]} vs "
                                        f"{[round(x['mb_s']) for x in f]}"),
        row("StreamCall server CPU per GB", "CPU s/GB", _median(b, "cpu_s_per_gb"), _median(f, "cpu_s_per_gb"),
            "grpc.aio floor", "", None, note="the server process's own CPU; the tool's process not counted"),
        row(f"StreamCall of {size}, sidecar on loopback TCP (the default --listen; no unix relay)", "MB/s",
            _median(t, "mb_s"), p, "grpc.aio floor (unix socket)", f"ratio >= {TARGET_RATIO}",
            _median(t, "mb_s") / p >= TARGET_RATIO, higher_is_better=True,
            note=f"server CPU {_median(t, 'cpu_s_per_gb'):.2f} s/GB"),
    ]


def report(result: dict[str, Any]) -> str:
    m = result["machine"]
    lines = [f"bench_stream — {m['date']} — {m['nproc']} CPUs ({m['cpu']}), Python {m['python']}", ""]
    for r in result["rows"]:
        met = {True: "yes", False: "NO", None: ""}[r["met"]]
        lines.append(f"{r['what']}: {r['bitong']:.2f} {r['unit']} | peer {r['peer']:.2f} ({r['peer_name']}) | "
                     f"{r['ratio']:.2f} | {r['target']} {met} | {r['note']}")
    lines.append(f"other work on the machine meanwhile: {result['contention_pct']:.0f}% of one core")
    lines.append(f"({result['seconds']:.0f} s)")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="256 MiB streams instead of 512 MiB")
    ap.add_argument("--json", type=Path, default=RESULTS / "stream.json", help="where the JSON copy goes")
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
