"""Every benchmark in benchmarks/ in one command, one combined table.

    python benchmarks/run_all.py [--quick] [--only NAME ...]

Runs each ``benchmarks/bench_*.py`` that exposes ``run()`` in its own Python
process (one that crashes or hangs cannot take the others with it; each is
cut at its share of the run's budget, 15 minutes), then prints one table —
what, bitong, peer, bitong/peer, target, met — with the date and the machine
(CPU count and model, Python version), and writes
``benchmarks/results/latest.json`` (everything each benchmark returned) and
``benchmarks/results/latest.md`` (the table, ready for the README).

**Ratios, not absolute times, travel between machines.** A millisecond here
is not a millisecond on a laptop or in CI; bitong / peer measured in the same
run on the same machine is what to compare across machines and over time.
The run also records how busy the machine was with other work, because on a
shared machine that moves every absolute figure.

The contract a benchmark keeps to appear here (all of it optional but ``run``):

* ``run()`` or ``run(quick: bool = False)``, returning a dict;
* ``"rows"``: a list of dicts with ``what`` and any of ``bitong``, ``peer``,
  ``peer_name``, ``ratio`` (bitong / peer), ``unit``, ``target``, ``met``
  (True, False or None), ``note``. A result without rows is still kept whole
  in latest.json, and the table says so.

Needs ``pip install -r benchmarks/requirements.txt`` for the peers.
"""

from __future__ import annotations

import argparse
import importlib
import inspect
import json
import os
import resource
import signal
import subprocess
import sys
import time
import traceback
from pathlib import Path
from typing import Any

from machine import machine  # benchmarks/ is the script's folder, first on sys.path

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results"
BUDGET_S = 890.0          # the whole run, under 15 minutes (13 benchmarks, each against its peer)
MIN_SLICE_S = 20.0        # never start a benchmark with less than this left
TICK = os.sysconf("SC_CLK_TCK")


# ---------------------------------------------------------------- one benchmark, in a child process


def run_one(name: str, quick: bool, out: Path) -> int:
    """Import ``benchmarks/<name>.py``, call its ``run`` as its signature allows, write the dict as JSON."""
    # SIGTERM (the budget ran out) unwinds through the benchmark's finally blocks, which stop its servers.
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    sys.path.insert(0, str(HERE))
    sys.path.insert(0, str(HERE.parent))
    started = time.perf_counter()
    result: dict[str, Any]
    try:
        module = importlib.import_module(name)
        fn = getattr(module, "run", None)
        if not callable(fn):
            result = {"status": "skipped", "why": "no run() (a main() alone is not called)"}
        else:
            params = inspect.signature(fn).parameters
            kwargs: dict[str, Any] = {}
            if "quick" in params:
                kwargs["quick"] = quick
            missing = [p for p, spec in params.items() if p not in kwargs and spec.default is inspect.Parameter.empty
                       and spec.kind in (spec.POSITIONAL_ONLY, spec.POSITIONAL_OR_KEYWORD, spec.KEYWORD_ONLY)]
            if missing:
                result = {"status": "skipped", "why": f"run() needs arguments: {', '.join(missing)}"}
            else:
                got = fn(**kwargs)
                result = got if isinstance(got, dict) else {"value": got}
                result.setdefault("status", "ok")
    except BaseException as exc:  # SystemExit too: report, never hide; the table says why
        result = {"status": "failed", "why": f"{type(exc).__name__}: {exc}", "traceback": traceback.format_exc()}
    result["seconds"] = round(time.perf_counter() - started, 1)
    out.write_text(json.dumps(result, indent=2, ensure_ascii=False, default=str), encoding="utf-8")
    return 0


def spawn_one(name: str, quick: bool, timeout_s: float) -> dict[str, Any]:
    """Run one benchmark in a child process, bounded in time; its stdout goes through as it prints."""
    out = RESULTS / f".{name}.partial.json"
    out.unlink(missing_ok=True)
    argv = [sys.executable, str(Path(__file__).resolve()), "--one", name, "--out", str(out)]
    if quick:
        argv.append("--quick")
    started = time.perf_counter()
    proc = subprocess.Popen(argv, cwd=HERE.parent, start_new_session=True)
    try:
        proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        # Its own session only. SIGTERM first: the benchmark's finally blocks stop the
        # servers it started in sessions of their own; SIGKILL if it does not go.
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        return {"status": "timed out", "why": f"cut after {timeout_s:.0f} s", "seconds": round(timeout_s, 1)}
    if not out.exists():
        return {"status": "failed", "why": f"exited {proc.returncode} without a result",
                "seconds": round(time.perf_counter() - started, 1)}
    result = json.loads(out.read_text(encoding="utf-8"))
    out.unlink(missing_ok=True)
    return result


# ---------------------------------------------------------------- the table


def fmt(v: Any, unit: str = "") -> str:
    """A figure with its unit, as many digits as it deserves."""
    if v is None or v == "":
        return "-"
    if not isinstance(v, (int, float)) or isinstance(v, bool):
        return str(v)
    unit = f" {unit}" if unit else ""
    if abs(v) >= 100:
        return f"{v:,.0f}{unit}"
    if abs(v) >= 10:
        return f"{v:.1f}{unit}"
    return f"{v:.3f}{unit}"


def normalized(r: dict[str, Any]) -> dict[str, Any]:
    """Other spellings seen in benchmarks' rows, mapped onto the contract's keys.

    ``seconds``/``target_s`` (a time with its limit) and ``ratio_to_floor``
    (the floor is then the peer) are bench_scan's; anything else passes as is.
    """
    r = dict(r)
    if r.get("bitong") is None and isinstance(r.get("seconds"), (int, float)):
        r["bitong"], r["unit"] = r["seconds"], r.get("unit") or "s"
    if r.get("ratio") is None and isinstance(r.get("ratio_to_floor"), (int, float)):
        r["ratio"], r["peer_name"] = r["ratio_to_floor"], r.get("peer_name") or "floor"
    if not r.get("target") and isinstance(r.get("target_s"), (int, float)):
        r["target"] = f"<= {r['target_s']} s"
    return r


def cells(bench: str, r: dict[str, Any]) -> list[str]:
    """One row as table cells: what, bitong, peer, ratio, target, met."""
    r = normalized(r)
    unit = r.get("unit", "")
    peer = fmt(r.get("peer"), unit)
    if peer != "-" and r.get("peer_name"):
        peer += f" ({r['peer_name']})"
    ratio = r.get("ratio")
    if ratio is None and isinstance(r.get("bitong"), (int, float)) and isinstance(r.get("peer"), (int, float)) \
            and r.get("peer"):
        ratio = r["bitong"] / r["peer"]
    met = {True: "yes", False: "**NO**", None: ""}.get(r.get("met"), str(r.get("met", "")))
    what = f"{bench}: {r.get('what', '?')}"
    if r.get("note"):
        what += f" ({r['note']})"
    return [what, fmt(r.get("bitong"), unit), peer, f"{ratio:.2f}" if isinstance(ratio, (int, float)) else "-",
            str(r.get("target", "") or ""), met]


HEAD = ["what", "bitong", "peer", "bitong/peer", "target", "met"]


def derived_rows(res: dict[str, Any]) -> list[dict[str, Any]] | None:
    """Rows for a result that has none but says ``ratios: {"a_over_b": x}`` (bench_parser's shape).

    Figures come from the first ``us_per_*`` dict holding ``a`` and ``b``; the target
    and whether it is met from ``targets: {"a_over_b_at_most" | "_at_least": t, "a_over_b_met": bool}``.
    """
    ratios, targets = res.get("ratios"), res.get("targets") or {}
    if not isinstance(ratios, dict) or not ratios:
        return None
    figures, unit = {}, ""
    for key, value in res.items():
        if key.startswith("us_per_") and isinstance(value, dict):
            figures, unit = value, "us/" + key[len("us_per_"):]
            break
    def figure(name: str) -> tuple[str, Any]:
        """``yaml`` finds ``yaml_csafe`` when it is the only key that starts so."""
        if name in figures:
            return name, figures[name]
        near = [k for k in figures if k.startswith(name)]
        return (near[0], figures[near[0]]) if len(near) == 1 else (name, None)

    rows = []
    for key, ratio in ratios.items():
        a, _, b = key.partition("_over_")
        (a, fa), (b, fb) = figure(a), figure(b)
        target = ""
        if f"{key}_at_most" in targets:
            target = f"<= {targets[f'{key}_at_most']}"
        elif f"{key}_at_least" in targets:
            target = f">= {targets[f'{key}_at_least']}"
        rows.append({"what": f"{a} / {b}", "bitong": fa, "peer": fb, "peer_name": b,
                     "unit": unit, "ratio": ratio, "target": target, "met": targets.get(f"{key}_met")})
    return rows


def table_rows(results: dict[str, dict[str, Any]]) -> list[list[str]]:
    out = []
    for bench, res in results.items():
        rows = res.get("rows")
        if rows is None:
            rows = derived_rows(res)
        if res.get("status") != "ok" or not isinstance(rows, list):
            why = res.get("why") or "returned no rows; see latest.json"
            out.append([f"{bench}: {res.get('status', '?')}: {why}", "-", "-", "-", "", ""])
            continue
        out += [cells(bench, r) for r in rows if isinstance(r, dict)]
    return out


def text_table(rows: list[list[str]]) -> str:
    widths = [max(len(x[i].replace("**", "")) for x in [HEAD, *rows]) for i in range(len(HEAD))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(HEAD, widths)), "  ".join("-" * w for w in widths)]
    lines += ["  ".join(c.replace("**", "").ljust(w) for c, w in zip(r, widths)) for r in rows]
    return "\n".join(lines)


def md_table(rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(HEAD) + " |", "|" + "---|" * len(HEAD)]
    lines += ["| " + " | ".join(c.replace("|", "\\|") for c in r) + " |" for r in rows]
    return "\n".join(lines)




def busy_s() -> float:
    """Busy CPU seconds of the whole machine so far (/proc/stat)."""
    try:
        with open("/proc/stat") as f:
            c = [int(x) for x in f.readline().split()[1:]]
        return (sum(c) - c[3] - c[4]) / TICK
    except OSError:
        return 0.0


def ours_s() -> float:
    """CPU seconds of this process and every child it reaped (the benchmarks and their servers)."""
    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


def discover() -> list[str]:
    return sorted(p.stem for p in HERE.glob("bench_*.py"))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="pass quick=True to benchmarks that take it")
    ap.add_argument("--only", nargs="+", metavar="NAME", help="only these benchmarks (bench_sidecar ...)")
    ap.add_argument("--one", help=argparse.SUPPRESS)
    ap.add_argument("--out", type=Path, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    RESULTS.mkdir(parents=True, exist_ok=True)
    if args.one:
        return run_one(args.one, args.quick, args.out)

    names = [n if n.startswith("bench_") else f"bench_{n}" for n in args.only] if args.only else discover()
    m = machine()
    print(f"run_all: {', '.join(names)} — {m['date']} — {m['nproc']} CPUs ({m['cpu']}), Python {m['python']}",
          flush=True)
    started = time.perf_counter()
    b0, o0 = busy_s(), ours_s()
    results: dict[str, dict[str, Any]] = {}
    for i, name in enumerate(names):
        left = BUDGET_S - (time.perf_counter() - started)
        if left < MIN_SLICE_S:
            results[name] = {"status": "not run", "why": "the run's budget was spent"}
            continue
        # An even share of what is left, but a benchmark may use what the ones before it did not.
        slice_s = max(MIN_SLICE_S, left - MIN_SLICE_S * (len(names) - i - 1))
        print(f"\n== {name} (up to {slice_s:.0f} s)", flush=True)
        results[name] = spawn_one(name, args.quick, slice_s)
        print(f"== {name}: {results[name].get('status')} in {results[name].get('seconds', '?')} s", flush=True)
    wall = time.perf_counter() - started
    other = 100 * max(0.0, (busy_s() - b0) - (ours_s() - o0)) / max(wall, 1e-9)

    rows = table_rows(results)
    command = "python benchmarks/run_all.py" + (" --quick" if args.quick else "")
    header = (f"`{command}` — {m['date']} — {m['nproc']} CPUs ({m['cpu']}), Python {m['python']}, "
              f"{wall:.0f} s; other work on the machine meanwhile: {other:.0f}% of one core")
    footer = ("Ratios are bitong / peer in the same run on the same machine; they, not the absolute times, "
              "are what travel between machines.")
    if other > 15:
        footer += " The machine was shared during this run, so absolute figures are pessimistic."
    print("\n" + header + "\n\n" + text_table(rows) + "\n\n" + footer)

    summary = {"machine": m, "command": command, "seconds": round(wall, 1), "other_work_pct_of_one_core": other,
               "rows": [dict(zip(HEAD, r)) for r in rows], "results": results}
    (RESULTS / "latest.json").write_text(json.dumps(summary, indent=2, ensure_ascii=False, default=str),
                                         encoding="utf-8")
    (RESULTS / "latest.md").write_text(header + "\n\n" + md_table(rows) + "\n\n" + footer + "\n", encoding="utf-8")
    print(f"\nwrote {RESULTS / 'latest.json'} and {RESULTS / 'latest.md'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
