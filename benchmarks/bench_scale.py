"""A 10,000-tool sidecar: exec to SERVING, peak memory, a new tool seen by Match, ListTools pages.

    python benchmarks/bench_scale.py [--quick] [--tools 10000]

Issue 13 §3, each figure beside its peer or target in one run:

* ``bitong serve`` exec to SERVING (health), 10,000 tools, with ``--state``
  (a restart, nothing changed) and without; the peer is the interpreter
  importing ``bitong.agent.serving.server`` and exiting (what any start pays before it reads
  a tool). Targets: 0.5 s and 2 s.
* Whether that restart wrote the state file (it must not: nothing changed).
* Peak RSS (VmHWM) with ``--state`` against without, sampled at SERVING and
  again once the background work after it is done (folder watches, catch-up
  rescan, the matcher's calibration: the log says "matching ready").
  Target: with / without <= 1.
* A new tool in the root seen by Match (a tool folder written, then Match over
  gRPC every 5 ms until it is the first candidate), at 10,000 tools against the
  same at 40 tools, the median of several. Target: <= 2x.
* ``bitong tools --server`` at 10,000 tools lists every tool (pages).

Matching is lexical here (``--no-semantic``): the model loads after SERVING
in any case, and computing 10,000 tools' vectors would take the run's budget.
Ratios, not absolute times, travel between machines.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("GRPC_VERBOSITY", "ERROR")

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(REPO))

from bench_scan import write_registry  # noqa: E402
from synthetic import synthetic_tools  # noqa: E402

RESULTS = HERE / "results"
SETTLED = "matching ready"   # the log line of the background work after SERVING (watches, calibration)


class Server:
    """``python -m bitong serve`` on a unix socket, in its own session (stopped by its own pid only)."""

    def __init__(self, work: Path, root: Path, name: str, state: Path | None = None) -> None:
        self.sock = work / f"{name}.sock"
        self.log = work / f"{name}.log"
        argv = [sys.executable, "-m", "bitong", "serve", "--listen", f"unix:{self.sock}", "--tools", str(root),
                "--no-semantic", "--admin-socket", "off", "--log-level", "INFO"]
        if state is not None:
            argv += ["--state", str(state)]
        self._logf = open(self.log, "wb")
        self.started = time.perf_counter()
        self.proc = subprocess.Popen(argv, cwd=REPO, stdin=subprocess.DEVNULL, stdout=self._logf,
                                     stderr=subprocess.STDOUT, start_new_session=True)
        self.address = f"unix:{self.sock}"

    def wait_serving(self, timeout_s: float = 60.0) -> float:
        """Seconds from exec to the health service saying SERVING."""
        import grpc
        from grpc_health.v1 import health_pb2, health_pb2_grpc

        end = time.perf_counter() + timeout_s
        while time.perf_counter() < end:
            if self.proc.poll() is not None:
                raise RuntimeError(f"bitong serve exited {self.proc.returncode}: {self.tail()}")
            if self.sock.exists():
                with grpc.insecure_channel(self.address) as ch:
                    try:
                        reply = health_pb2_grpc.HealthStub(ch).Check(health_pb2.HealthCheckRequest(), timeout=1.0)
                        if reply.status == health_pb2.HealthCheckResponse.SERVING:
                            return time.perf_counter() - self.started
                    except grpc.RpcError:
                        pass
            time.sleep(0.002)
        raise RuntimeError(f"not SERVING within {timeout_s} s: {self.tail()}")

    def wait_log(self, text: str, timeout_s: float = 90.0) -> None:
        """Until the server's log says ``text`` (its background work after SERVING is done)."""
        end = time.perf_counter() + timeout_s
        while time.perf_counter() < end:
            if text in self.log.read_text(errors="replace"):
                return
            if self.proc.poll() is not None:
                break
            time.sleep(0.05)
        raise RuntimeError(f"the server never logged {text!r}: {self.tail()}")

    def peak_rss_mib(self) -> float:
        with open(f"/proc/{self.proc.pid}/status") as fh:
            for line in fh:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
        return float("nan")

    def tail(self, n: int = 8) -> str:
        try:
            return " | ".join(self.log.read_text(errors="replace").splitlines()[-n:])
        except OSError:
            return ""

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        self._logf.close()


def import_floor() -> float:
    """Exec to exit of an interpreter that imports the server's module: the start every serve pays."""
    t = time.perf_counter()
    subprocess.run([sys.executable, "-c", "import bitong.agent.serving.server, bitong.agent.cli.commands"], cwd=REPO, check=True)
    return time.perf_counter() - t


def first_match(server: Server, probe: tuple[str, str]) -> bool:
    """Whether Match, asked for a tool's display right after SERVING, names that tool among its candidates."""
    import grpc

    from bitong.v1 import agent_pb2 as pb
    from bitong.v1 import agent_pb2_grpc as pb_grpc

    text, name = probe
    with grpc.insecure_channel(server.address) as ch:
        reply = pb_grpc.ToolAgentStub(ch).Match(pb.MatchRequest(intent=text, top_k=5), timeout=30)
    return name in [c.name for c in reply.candidates]


def reload_latency(server: Server, root: Path, rounds: int, tag: str) -> list[float]:
    """Seconds from a new TOOL.hdlp written to Match naming it first (Match every 5 ms)."""
    import grpc

    from bitong.v1 import agent_pb2 as pb
    from bitong.v1 import agent_pb2_grpc as pb_grpc

    times = []
    with grpc.insecure_channel(server.address) as ch:
        stub = pb_grpc.ToolAgentStub(ch)
        for i in range(rounds):
            name = f"zq-{tag}-probe-{i}"
            words = f"zorblax quuxifier {tag} number{i} widget"
            folder = root / name
            text = (f"name: {name}\ndisplay: {json.dumps(words)}\nintent: {json.dumps('calibrate the ' + words)}\n"
                    "method: run\nexecutor: shell\ncommand: \"echo ok\"\nparams_schema: {}\n"
                    "constraints: { timeout_ms: 30000, max_output_bytes: 65536, require_confirm: false }\n"
                    "author: bench\ncreated: 2026-12-02\nwhy: \"benchmark\"\n")
            tmp = root / f".{name}.tmp"   # the folder appears whole, its file in it (an editor's rename)
            tmp.mkdir()
            (tmp / "TOOL.hdlp").write_text(text, encoding="utf-8")
            t = time.perf_counter()
            os.rename(tmp, folder)
            end = t + 10
            while time.perf_counter() < end:
                reply = stub.Match(pb.MatchRequest(intent=f"calibrate the {words}", top_k=1))
                if reply.candidates and reply.candidates[0].name == name:
                    times.append(time.perf_counter() - t)
                    break
                time.sleep(0.005)
            else:
                raise RuntimeError(f"{name} not seen by Match within 10 s")
            time.sleep(0.2)   # the next round starts from a quiet server
    return times


def run(quick: bool = False, tools: int = 10_000) -> dict[str, Any]:
    repeats = 1 if quick else 2
    rounds = 5 if quick else 7
    work = Path(tempfile.mkdtemp(prefix="bitong-bench-scale-"))
    servers: list[Server] = []

    def serve(root: Path, name: str, state: Path | None = None) -> tuple[Server, float]:
        srv = Server(work, root, name, state)
        servers.append(srv)
        return srv, srv.wait_serving()

    try:
        big, small = work / "big", work / "small"
        big.mkdir()
        small.mkdir()
        write_registry(big, tools)
        write_registry(small, 40)
        state = work / "state.pb"
        floor_s = statistics.median(import_floor() for _ in range(repeats))
        probe_tool = next(iter(synthetic_tools(tools)))
        probe = (probe_tool.display, probe_tool.name)

        cold, rss_cold, rss_cold_serving, cold_ready, cold_answers = [], [], [], [], []
        for i in range(repeats):
            srv, took = serve(big, f"cold{i}")
            cold.append(took)
            rss_cold_serving.append(srv.peak_rss_mib())
            cold_answers.append(first_match(srv, probe))   # on the rough index, while the full one is built
            srv.wait_log(SETTLED)
            cold_ready.append(time.perf_counter() - srv.started)
            rss_cold.append(srv.peak_rss_mib())
            srv.stop()

        first, _ = serve(big, "first", state)   # writes the state after serving; stop writes what is left
        first.wait_log(SETTLED)                 # calibrated: the state holds the calibration too
        first.stop()
        if not state.exists():
            raise RuntimeError(f"no state written: {first.tail()}")
        warm, rss_warm, rss_warm_serving, rewritten = [], [], [], []
        for i in range(repeats):
            before = state.stat()
            srv, took = serve(big, f"warm{i}", state)
            warm.append(took)
            rss_warm_serving.append(srv.peak_rss_mib())
            srv.wait_log(SETTLED)
            rss_warm.append(srv.peak_rss_mib())
            after = state.stat()
            rewritten.append((after.st_ino, after.st_mtime_ns) != (before.st_ino, before.st_mtime_ns))
            if i < repeats - 1:
                srv.stop()
        big_srv = srv   # the last restart keeps serving for the reload and ListTools figures

        listed = subprocess.run([sys.executable, "-m", "bitong", "tools", "--server", big_srv.address, "--json"],
                                cwd=REPO, capture_output=True, text=True, timeout=120)
        listed_n = len(json.loads(listed.stdout)) if listed.returncode == 0 else 0

        small_srv, _ = serve(small, "small", work / "small.pb")   # a state too: its writes cost the same way
        small_srv.wait_log(SETTLED)
        at_small = reload_latency(small_srv, small, rounds, "s")
        small_srv.stop()
        at_big = reload_latency(big_srv, big, rounds, "b")
        big_srv.stop()

        cold_s, warm_s = statistics.median(cold), statistics.median(warm)
        ready_s = statistics.median(cold_ready)
        rss_c, rss_w = max(rss_cold), max(rss_warm)
        rss_cs, rss_ws = max(rss_cold_serving), max(rss_warm_serving)
        small_ms, big_ms = statistics.median(at_small) * 1000, statistics.median(at_big) * 1000
        n = f"{tools:,}"
        rows = [
            {"what": f"serve exec to SERVING, {n} tools, --state (restart)", "bitong": warm_s, "unit": "s",
             "peer": floor_s, "peer_name": "exec+import bitong.agent.serving.server", "target": "<= 0.5 s", "met": warm_s <= 0.5},
            {"what": f"serve exec to SERVING, {n} tools, no state", "bitong": cold_s, "unit": "s",
             "peer": floor_s, "peer_name": "exec+import bitong.agent.serving.server", "target": "<= 2 s", "met": cold_s <= 2.0},
            {"what": "no state: Match at SERVING names the tool whose display it is given (rough index)",
             "bitong": "yes" if all(cold_answers) else "no", "target": "yes", "met": all(cold_answers)},
            {"what": f"no state: exec to the full index, calibrated ('{SETTLED}'), {n} tools", "bitong": ready_s,
             "unit": "s", "peer": cold_s, "peer_name": "exec to SERVING", "ratio": ready_s / cold_s,
             "note": "the analysis of every tool after SERVING; Match serves on the rough index meanwhile"},
            {"what": "restart with nothing changed rewrote the state", "bitong": "yes" if any(rewritten) else "no",
             "target": "no", "met": not any(rewritten)},
            {"what": f"peak RSS at SERVING, {n} tools, --state vs none", "bitong": rss_ws, "unit": "MiB",
             "peer": rss_cs, "peer_name": "no state", "ratio": rss_ws / rss_cs, "target": "<= 1.0",
             "met": rss_ws <= rss_cs},
            {"what": f"peak RSS once calibrated, {n} tools, --state vs none", "bitong": rss_w, "unit": "MiB",
             "peer": rss_c, "peer_name": "no state", "ratio": rss_w / rss_c, "target": "<= 1.0",
             "met": rss_w <= rss_c},
            {"what": f"new tool seen by Match, {n} tools vs 40", "bitong": big_ms, "unit": "ms", "peer": small_ms,
             "peer_name": "40 tools", "ratio": big_ms / small_ms, "target": "<= 2.0",
             "met": big_ms <= 2 * small_ms},
            {"what": f"bitong tools --server lists {n} tools (pages)", "bitong": listed_n, "peer": tools,
             "peer_name": "tools served", "target": "all", "met": listed_n == tools},
        ]
        return {"tools": tools, "repeats": repeats, "rows": rows,
                "seconds_to_serving": {"state": warm, "cold": cold, "import_floor": floor_s,
                                       "cold_to_matching_ready": cold_ready},
                "peak_rss_mib": {"state": rss_warm, "cold": rss_cold, "state_at_serving": rss_warm_serving,
                                 "cold_at_serving": rss_cold_serving},
                "reload_ms": {"40": [x * 1000 for x in at_small], str(tools): [x * 1000 for x in at_big]},
                "state_bytes": state.stat().st_size, "state_rewritten": rewritten}
    finally:
        for srv in servers:
            srv.stop()
        shutil.rmtree(work, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--tools", type=int, default=10_000)
    args = ap.parse_args(argv)
    result = run(args.quick, args.tools)
    for row in result["rows"]:
        print(json.dumps(row, ensure_ascii=False))
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "scale.json").write_text(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
