"""Parser benchmark: bitong's compiled and pure twins against PyYAML's CSafeLoader, same files, same run.

    python benchmarks/bench_parser.py [--repeats 5]

The corpus is the eval registry (``../shared/eval/registry``, 40 files) plus
the bundled ``tools/``. Each engine turns a file on disk into a value:

* bitong: ``parser.parse_file(path, backend=...)`` -> a checked ToolDef
  (read, decode, lex, LALR, every rule of the format, protobuf, SHA-256);
* PyYAML: read the file, ``yaml.load(data, Loader=CSafeLoader)`` -> dicts,
  no checks at all.

TOOL.hdlp is not YAML (``why: see "docs": http://x:80`` is one string here,
an error there), so PyYAML reads a YAML-safe equivalent of each file, made in
this run: the pure twin's parse of the file as plain data (maps, lists,
typed scalars, in file order) dumped with ``CSafeDumper`` (leaf collections
in flow style as the sources write them, multi-line text as ``|`` blocks,
the HLDP:// line as a comment), written to a temporary folder, and checked
to load back to the same data. The read-only floor (open and read the
bytes) is shown for context. Figures are medians of ``repeats`` rounds, the
engines taking turns in each round so that noise from the machine falls on
all of them; ratios travel between machines, absolute times do not.

``run(repeats)`` returns the figures as a dict (``benchmarks/run_all.py``
imports it); run as a script it prints a table and writes
``benchmarks/results/parser.json``. Needs ``pyyaml`` (benchmarks/requirements.txt).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(REPO))

import yaml

from bitong import parser
from bitong.parser import _backend

EVAL_ROOT = Path(__file__).resolve().parents[1].parent / "shared/eval/registry"
TOOLS_ROOT = REPO / "tools"
RESULTS = HERE / "results" / "parser.json"
TARGET_VS_YAML = 1.0  # compiled / CSafeLoader, at most
TARGET_VS_PURE = 3.0  # pure / compiled, at least
ROUND_SECONDS = 0.15  # each engine's share of one round


def corpus() -> dict[str, list[Path]]:
    """The files, by where they come from."""
    return {
        "eval": sorted(EVAL_ROOT.glob("*/TOOL.hdlp")) if EVAL_ROOT.is_dir() else [],
        "bundled": sorted(TOOLS_ROOT.glob("*/TOOL.hdlp")),
    }


def _plain(node: Any) -> Any:
    """A parsed value as plain data, the shape a YAML loader returns."""
    if node.kind == "map":
        return {key.value: _plain(value) for key, value in node.value}
    if node.kind == "list":
        return [_plain(item) for item in node.value]
    return node.value


class _Dumper(yaml.CSafeDumper):  # type: ignore[misc,name-defined]
    """CSafeDumper, writing multi-line text as ``|`` block text like the sources do."""


def _represent_str(dumper: yaml.SafeDumper, text: str) -> yaml.ScalarNode:
    return dumper.represent_scalar("tag:yaml.org,2002:str", text, style="|" if "\n" in text else None)


_Dumper.add_representer(str, _represent_str)


def yaml_equivalent(path: Path) -> tuple[bytes, Any]:
    """The YAML-safe twin of a TOOL.hdlp (see the module docstring) and the data it must load to."""
    text = path.read_text(encoding="utf-8")
    header, root = _backend.pure.tree(text, str(path))
    data = _plain(root)
    body = yaml.dump(data, Dumper=_Dumper, allow_unicode=True, sort_keys=False,
                     default_flow_style=None, width=4096)
    if header is not None:
        body = f"# {header.value}\n{body}"
    return body.encode("utf-8"), data


def _time_round(fn: Callable[[str], Any], paths: list[str], seconds: float) -> tuple[float, int]:
    """Run ``fn`` over all the paths as many passes as fit in ``seconds``; (µs per file, passes)."""
    passes = 0
    t0 = time.perf_counter()
    elapsed = 0.0
    while elapsed < seconds or passes == 0:
        for p in paths:
            fn(p)
        passes += 1
        elapsed = time.perf_counter() - t0
    return elapsed / (passes * len(paths)) * 1e6, passes


def run(repeats: int = 5, quick: bool = False) -> dict:
    """Measure every engine over the corpus; the figures, ratios and whether the targets are met.

    ``quick`` (benchmarks/run_all.py --quick) takes 3 shorter rounds. The
    result carries ``rows`` in run_all's shape as well as the raw figures.
    """
    if quick:
        repeats = min(repeats, 3)
    seconds = ROUND_SECONDS / 2 if quick else ROUND_SECONDS
    files = corpus()
    paths = [p for group in files.values() for p in group]
    if not paths:
        raise SystemExit(f"no TOOL.hdlp files under {EVAL_ROOT} or {TOOLS_ROOT}")
    compiled = _backend.compiled
    pure = _backend.pure
    if compiled is None:
        raise SystemExit("the compiled twin is not built (pip install -e . without BITONG_PURE=1)")
    names = [str(p) for p in paths]

    # The engines must agree before they are timed: same ToolDef from both twins,
    # and each YAML twin loads back to the data it was made from.
    for name in names:
        if parser.parse_file(name, backend=compiled) != parser.parse_file(name, backend=pure):
            raise SystemExit(f"the twins disagree on {name}")
    with tempfile.TemporaryDirectory(prefix="bitong-bench-parser-") as tmp:
        yaml_paths = []
        hdlp_bytes = yaml_bytes = 0
        for i, path in enumerate(paths):
            body, data = yaml_equivalent(path)
            if yaml.load(body, Loader=yaml.CSafeLoader) != data:
                raise SystemExit(f"the YAML equivalent of {path} does not load back to the same data")
            out = Path(tmp) / f"{i:03d}-{path.parent.name}.yaml"
            out.write_bytes(body)
            yaml_paths.append(str(out))
            hdlp_bytes += path.stat().st_size
            yaml_bytes += len(body)

        def read_floor(p: str) -> bytes:
            with open(p, "rb") as fh:
                return fh.read()

        def yaml_load(p: str) -> Any:
            with open(p, "rb") as fh:
                return yaml.load(fh.read(), Loader=yaml.CSafeLoader)

        engines: dict[str, tuple[Callable[[str], Any], list[str]]] = {
            "read_floor": (read_floor, names),
            "compiled": (lambda p: parser.parse_file(p, backend=compiled), names),
            "pure": (lambda p: parser.parse_file(p, backend=pure), names),
            "yaml_csafe": (yaml_load, yaml_paths),
        }
        # Where the compiled and pure time goes, in memory: lex + LALR + values, then the rules + protobuf.
        texts = {p: Path(p).read_bytes() for p in names}
        trees = {b.name: {p: b.tree(texts[p].decode("utf-8"), p) for p in names} for b in (compiled, pure)}

        def tree_of(b: _backend.Backend) -> Callable[[str], Any]:
            return lambda p: b.tree(texts[p].decode("utf-8"), p)

        def build_of(b: _backend.Backend) -> Callable[[str], Any]:
            made = trees[b.name]
            return lambda p: b.build(made[p][0], made[p][1], p, texts[p], parser._folder(p))

        pieces: dict[str, tuple[Callable[[str], Any], list[str]]] = {
            "compiled_tree": (tree_of(compiled), names),
            "compiled_build": (build_of(compiled), names),
            "pure_tree": (tree_of(pure), names),
            "pure_build": (build_of(pure), names),
        }
        for fn, ps in list(engines.values()) + list(pieces.values()):  # warm up: caches, lark's table
            for p in ps:
                fn(p)
        samples: dict[str, list[float]] = {k: [] for k in list(engines) + list(pieces)}
        for _ in range(repeats):
            for key, (fn, ps) in engines.items():
                samples[key].append(_time_round(fn, ps, seconds)[0])
            for key, (fn, ps) in pieces.items():
                samples[key].append(_time_round(fn, ps, seconds / 3)[0])

    us = {k: statistics.median(v) for k, v in samples.items()}
    ratios = {
        "compiled_over_yaml": us["compiled"] / us["yaml_csafe"],
        "pure_over_compiled": us["pure"] / us["compiled"],
    }
    met_yaml = ratios["compiled_over_yaml"] <= TARGET_VS_YAML
    met_pure = ratios["pure_over_compiled"] >= TARGET_VS_PURE
    rows = [
        {"what": "parse a TOOL.hdlp file to a ToolDef (compiled twin)", "bitong": round(us["compiled"], 1),
         "peer": round(us["yaml_csafe"], 1), "peer_name": "PyYAML CSafeLoader, YAML twin of the file",
         "unit": "us/file", "ratio": round(ratios["compiled_over_yaml"], 3),
         "target": f"<= {TARGET_VS_YAML}", "met": met_yaml},
        {"what": "pure twin / compiled twin, same files", "bitong": round(us["pure"], 1),
         "peer": round(us["compiled"], 1), "peer_name": "compiled twin", "unit": "us/file",
         "ratio": round(ratios["pure_over_compiled"], 3), "target": f">= {TARGET_VS_PURE}", "met": met_pure},
        {"what": "read the file's bytes (floor, for context)", "bitong": round(us["read_floor"], 1),
         "unit": "us/file", "met": None},
    ]
    return {
        "benchmark": "parser",
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "python": platform.python_version(),
        "machine": f"{platform.machine()}, {os.cpu_count()} cpus",
        "yaml": f"PyYAML {yaml.__version__}, libyaml {'yes' if yaml.__with_libyaml__ else 'no'}",
        "files": {k: len(v) for k, v in files.items()},
        "bytes_per_file": {"hdlp": hdlp_bytes / len(paths), "yaml_equivalent": yaml_bytes / len(paths)},
        "repeats": repeats,
        "us_per_file": {k: round(us[k], 2) for k in engines},
        "us_per_file_pieces": {k: round(us[k], 2) for k in pieces},
        "samples_us": {k: [round(x, 2) for x in v] for k, v in samples.items()},
        "ratios": {k: round(v, 3) for k, v in ratios.items()},
        "targets": {
            "compiled_over_yaml_at_most": TARGET_VS_YAML,
            "pure_over_compiled_at_least": TARGET_VS_PURE,
            "compiled_over_yaml_met": met_yaml,
            "pure_over_compiled_met": met_pure,
        },
        "rows": rows,
    }


def table(r: dict) -> str:
    """The figures as a small text table."""
    us = r["us_per_file"]
    pieces = r["us_per_file_pieces"]
    t = r["targets"]
    n = sum(r["files"].values())
    lines = [
        (f"parser: {n} files ({r['files']['eval']} eval + {r['files']['bundled']} bundled), "
         f"~{r['bytes_per_file']['hdlp']:.0f} B each (YAML twin ~{r['bytes_per_file']['yaml_equivalent']:.0f} B); "
         f"median of {r['repeats']}; Python {r['python']}, {r['machine']}; {r['yaml']}"),
        f"{'what':<44}{'µs/file':>10}",
        f"{'read the bytes (floor)':<44}{us['read_floor']:>10.1f}",
        (f"{'bitong compiled  parse_file -> ToolDef':<44}{us['compiled']:>10.1f}"
         f"   (lex+LALR {pieces['compiled_tree']:.1f}, rules+protobuf {pieces['compiled_build']:.1f})"),
        (f"{'bitong pure      parse_file -> ToolDef':<44}{us['pure']:>10.1f}"
         f"   (lex+LALR {pieces['pure_tree']:.1f}, rules+protobuf {pieces['pure_build']:.1f})"),
        f"{'PyYAML CSafeLoader  read + load -> dict':<44}{us['yaml_csafe']:>10.1f}",
        (f"compiled / CSafeLoader = {r['ratios']['compiled_over_yaml']:.2f}"
         f"  (target <= {t['compiled_over_yaml_at_most']:.1f}: {'met' if t['compiled_over_yaml_met'] else 'NOT met'})"),
        (f"pure / compiled        = {r['ratios']['pure_over_compiled']:.2f}"
         f"  (target >= {t['pure_over_compiled_at_least']:.1f}: {'met' if t['pure_over_compiled_met'] else 'NOT met'})"),
    ]
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--quick", action="store_true", help="3 shorter rounds")
    ap.add_argument("--json", type=Path, default=RESULTS, help="where to write the JSON copy")
    args = ap.parse_args()
    result = run(args.repeats, quick=args.quick)
    print(table(result))
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(result, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    print(f"(JSON: {args.json})")


if __name__ == "__main__":
    main()
