"""How fast the ``bitong`` command starts, against the interpreter's own floors.

    python benchmarks/bench_cli.py [--quick]

Issue 13 §2. Each command is a fresh process (``python -m bitong ...``, as the
``bitong`` script runs it), with ``PYTHONDONTWRITEBYTECODE=1`` (an installed
package must not depend on writing ``.pyc`` files at run time). Rounds are
interleaved (every command once per round, order rotated) so load from other
work falls on all alike; the figure is the median wall time.

Floors and targets (bitong / floor):

* ``--version`` and ``--help`` against ``python -c pass``: within 2x;
* ``match`` and ``call`` with ``--server`` (a sidecar on a unix socket)
  against ``python -c "import grpc"``: within 1.5x;
* in-process ``match`` on the bundled tools against the same grpc import:
  within 2x (the multilingual model is loaded unless ``--no-semantic``, and
  both are measured). A run keeps the analysed registry in bitong's cache
  folder (a temporary one here), so the rounds measure what a tool author's
  second and later runs cost; ``--no-cache`` rows show a first run (the
  seven tools parsed, analysed and calibrated).
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

from machine import machine  # benchmarks/ is the script's folder, first on sys.path

REPO = Path(__file__).resolve().parent.parent


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    env.setdefault("GRPC_VERBOSITY", "ERROR")
    return env


def _time(argv: list[str], env: dict[str, str]) -> float:
    started = time.perf_counter()
    done = subprocess.run(argv, cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    took = time.perf_counter() - started
    if done.returncode not in (0, 1):  # match exits 1 for found=false: still a measured answer
        raise RuntimeError(f"{' '.join(argv)} exited {done.returncode}: {done.stderr.decode()[-500:]}")
    return took


def _serve(sock: Path, env: dict[str, str]) -> subprocess.Popen[bytes]:
    proc = subprocess.Popen([sys.executable, "-m", "bitong", "serve", "--listen", f"unix:{sock}",
                             "--admin-socket", "off"], cwd=REPO, env=env, stdin=subprocess.DEVNULL,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    import grpc
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    end = time.monotonic() + 60
    while time.monotonic() < end and proc.poll() is None:
        if sock.exists():
            try:
                with grpc.insecure_channel(f"unix:{sock}") as ch:
                    reply = health_pb2_grpc.HealthStub(ch).Check(health_pb2.HealthCheckRequest(), timeout=1)
                    if reply.status == health_pb2.HealthCheckResponse.SERVING:
                        return proc
            except grpc.RpcError:
                pass
        time.sleep(0.05)
    proc.kill()
    raise RuntimeError("the sidecar did not start")


def run(quick: bool = False) -> dict[str, Any]:
    env = _env()
    py = sys.executable
    bitong = [py, "-m", "bitong"]
    with tempfile.TemporaryDirectory(prefix="bench-cli-") as tmp:
        env["BITONG_CACHE_DIR"] = str(Path(tmp) / "cache")   # the model unpacks there in the warm-up rounds
        sock = Path(tmp) / "s.sock"
        server = _serve(sock, env)
        try:
            commands: dict[str, list[str]] = {
                "python -c pass": [py, "-c", "pass"],
                "python -c 'import grpc'": [py, "-c", "import grpc"],
                "bitong --version": [*bitong, "--version"],
                "bitong --help": [*bitong, "--help"],
                "bitong match --server": [*bitong, "match", "show disk usage", "--server", f"unix:{sock}"],
                "bitong call --server": [*bitong, "call", "shell-exec", "cmd=echo hi", "--server", f"unix:{sock}"],
                "bitong match (in process)": [*bitong, "match", "show disk usage"],
                "bitong match --no-semantic (in process)": [*bitong, "match", "show disk usage", "--no-semantic"],
                "bitong match --no-cache (in process)": [*bitong, "match", "show disk usage", "--no-cache"],
                "bitong match --no-semantic --no-cache (in process)": [*bitong, "match", "show disk usage",
                                                                       "--no-semantic", "--no-cache"],
                # most requests are Chinese: their words are cut by rjieba, whose dictionary loads on first use
                "bitong match, a Chinese request (in process)": [*bitong, "match", "看看磁盘空间"],
                "bitong match --no-semantic, a Chinese request (in process)": [*bitong, "match", "看看磁盘空间",
                                                                                "--no-semantic"],
            }
            rounds = 5 if quick else 15
            times: dict[str, list[float]] = {k: [] for k in commands}
            names = list(commands)
            for _ in range(2):  # warm the page cache
                for name in names:
                    _time(commands[name], env)
            for r in range(rounds):
                for name in names[r % len(names):] + names[:r % len(names)]:
                    times[name].append(_time(commands[name], env))
        finally:
            server.terminate()
            server.wait(timeout=30)
    ms = {k: statistics.median(v) * 1000 for k, v in times.items()}
    bare, grpc_ms = ms["python -c pass"], ms["python -c 'import grpc'"]
    rows = []
    for what, peer_name, peer, target in (
            ("bitong --version", "python -c pass", bare, 2.0),
            ("bitong --help", "python -c pass", bare, 2.0),
            ("bitong match --server", "import grpc", grpc_ms, 1.5),
            ("bitong call --server", "import grpc", grpc_ms, 1.5),
            ("bitong match (in process)", "import grpc", grpc_ms, 2.0),
            ("bitong match --no-semantic (in process)", "import grpc", grpc_ms, 2.0),
            ("bitong match --no-cache (in process)", "import grpc", grpc_ms, 2.0),
            ("bitong match --no-semantic --no-cache (in process)", "import grpc", grpc_ms, 2.0),
            ("bitong match, a Chinese request (in process)", "import grpc", grpc_ms, 2.0),
            ("bitong match --no-semantic, a Chinese request (in process)", "import grpc", grpc_ms, 2.0)):
        ratio = ms[what] / peer
        rows.append({"what": f"CLI start: {what}", "bitong": round(ms[what], 1), "peer": round(peer, 1),
                     "peer_name": peer_name, "ratio": round(ratio, 2), "unit": "ms",
                     "target": f"<= {target}x", "met": ratio <= target})
    return {"rows": rows, "median_ms": ms, "rounds": rounds, "machine": machine()}


if __name__ == "__main__":
    result = run(quick="--quick" in sys.argv)
    for row in result["rows"]:
        print(f"{row['what']:<62} {row['bitong']:>8.1f} ms  vs {row['peer_name']:<16} {row['peer']:>7.1f} ms  "
              f"{row['ratio']:>5.2f}x  target {row['target']}  {'met' if row['met'] else 'NOT met'}")
