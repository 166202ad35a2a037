"""Scanning at 10,000 tools: cold scan + index, idle rescan, one change, restart from state.

Issue 5's targets: a cold scan and index of 10,000 tools under 2 s; a rescan
that only stats unchanged files; a restart from the persisted snapshot ready
to serve 10,000 tools in under 0.3 s. Each figure is shown beside the floor
measured in the same run (listing, stat-ing and reading the same files), since
ratios, not absolute times, travel between machines.

    python benchmarks/bench_scan.py [--tools 10000]
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
from collections.abc import Callable

sys.path.insert(0, str(Path(__file__).resolve().parent))

from synthetic import synthetic_tools

from bitong.agent.registry.snapshot import Registry
from bitong.v1.agent_pb2 import ToolDef

RESULTS = Path(__file__).resolve().parent / "results"
OLD_NS = 1_000_000_000  # files older than the registry's racy window, as on a real server


def _q(text: str) -> str:
    return json.dumps(text, ensure_ascii=False)  # a JSON string is a valid TOOL.hdlp quoted string


def render(tool: ToolDef) -> str:
    """A TOOL.hdlp for a synthetic ToolDef (the benchmark's own files, not the agent's)."""
    lines = [f"name: {tool.name}", f"display: {_q(tool.display)}", f"intent: {_q(tool.intent)}",
             f"method: {tool.method or 'run'}", "executor: shell",
             "command: " + _q("echo " + " ".join("{" + p + "}" for p in tool.params_schema)),
             "params_schema:"]
    if not tool.params_schema:
        lines[-1] += " {}"
    for pname, spec in tool.params_schema.items():
        lines.append(f"  {pname}: {{ type: {spec.type or 'string'}, required: {str(spec.required).lower()}, "
                     f"description: {_q(spec.description)} }}")
    lines.append("constraints: { timeout_ms: 30000, max_output_bytes: 65536, require_confirm: false }")
    if tool.trigger_keywords:
        lines.append("trigger_keywords: [" + ", ".join(_q(k) for k in tool.trigger_keywords) + "]")
    if tool.non_goals:
        lines.append("non_goals: [" + ", ".join(_q(g) for g in tool.non_goals) + "]")
    lines += ["author: bench", "created: 2026-11-30", f"why: {_q(tool.why or 'benchmark')}"]
    return "\n".join(lines) + "\n"


def write_registry(root: Path, n: int) -> None:
    for tool in synthetic_tools(n):
        folder = root / tool.name
        folder.mkdir()
        path = folder / "TOOL.hdlp"
        path.write_text(render(tool), encoding="utf-8")
        os.utime(path, ns=(OLD_NS, OLD_NS))


def timed(fn: Callable[[], Any], repeats: int) -> tuple[float, Any]:
    """Median seconds of ``repeats`` runs, and the last result."""
    times = []
    result = None
    for _ in range(repeats):
        t = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times), result


def floor(root: Path) -> int:
    """List, stat and read every TOOL.hdlp: what any scanner pays."""
    total = 0
    for name in os.listdir(root):
        path = os.path.join(root, name, "TOOL.hdlp")
        os.stat(path)
        with open(path, "rb") as fh:
            total += len(fh.read())
    return total


def stat_floor(root: Path) -> None:
    for name in os.listdir(root):
        os.stat(os.path.join(root, name, "TOOL.hdlp"))


def run(n: int = 10_000, repeats: int = 3) -> dict:
    work = Path(tempfile.mkdtemp(prefix="bitong-bench-scan-"))
    try:
        root = work / "tools"
        root.mkdir()
        write_registry(root, n)
        state = str(work / "state.pb")

        floor_s, _ = timed(lambda: floor(root), repeats)
        stat_s, _ = timed(lambda: stat_floor(root), repeats)

        def cold() -> Registry:
            reg = Registry([str(root)])
            reg.rescan()
            return reg

        cold_s, reg = timed(cold, repeats)
        assert len(reg.snapshot.tools) == n, reg.snapshot.errors[:3]
        idle_s, _ = timed(reg.rescan, repeats)

        victim = root / sorted(os.listdir(root))[n // 2] / "TOOL.hdlp"
        original = victim.read_text(encoding="utf-8")

        def one_change() -> None:
            text = victim.read_text(encoding="utf-8")
            victim.write_text(text.replace("author: bench", "author: bench2") if "bench\n" in text
                              else text.replace("author: bench2", "author: bench"), encoding="utf-8")
            reg.rescan()

        change_s, _ = timed(one_change, repeats)
        victim.write_text(original, encoding="utf-8")
        os.utime(victim, ns=(OLD_NS, OLD_NS))
        reg.rescan()
        save_s, _ = timed(lambda: reg.save_state(state), 1)

        def restart() -> Registry:
            fresh = Registry([str(root)])
            assert fresh.load_state(state)  # validated against every file's stat
            return fresh

        restart_s, again = timed(restart, repeats)
        assert len(again.snapshot.tools) == n
        probe = "查看 billing 服务的日志"
        assert again.snapshot.index.match(probe).hits == reg.snapshot.index.match(probe).hits
        rows = [
            ("floor: list+stat+read every file", floor_s, None, None),
            ("cold scan + parse + index", cold_s, cold_s / floor_s, 2.0),
            ("floor: stat every file", stat_s, None, None),
            ("idle rescan (nothing changed)", idle_s, idle_s / stat_s, None),
            ("rescan after one file changed", change_s, change_s / stat_s, None),
            ("restart from saved state, ready", restart_s, restart_s / floor_s, 0.3),
            ("save state", save_s, None, None),
        ]
        return {
            "tools": n,
            "state_bytes": os.path.getsize(state),
            "rows": [{"what": w, "seconds": s, "ratio_to_floor": r, "target_s": t,
                      "met": None if t is None else s < t} for w, s, r, t in rows],
        }
    finally:
        shutil.rmtree(work, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tools", type=int, default=10_000)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args(argv)
    result = run(args.tools, args.repeats)
    print(f"scanning {result['tools']} tools (state file {result['state_bytes'] / 1e6:.1f} MB), medians of "
          f"{args.repeats}")
    print(f"{'what':<36} {'ms':>9} {'x floor':>8} {'target':>8}")
    for row in result["rows"]:
        ratio = "" if row["ratio_to_floor"] is None else f"{row['ratio_to_floor']:.1f}"
        target = "" if row["target_s"] is None else f"<{row['target_s'] * 1000:.0f}ms " + ("ok" if row["met"] else "MISS")
        print(f"{row['what']:<36} {row['seconds'] * 1000:>9.1f} {ratio:>8} {target:>8}")
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "scan.json").write_text(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
