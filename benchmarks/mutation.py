"""Mutation testing for the security-critical modules: allowlist, confirm, params.

Each mutant is one small edit of the module's AST (a comparison flipped, a
boolean operator swapped, ``not`` dropped, ``continue`` turned into
``break``, a constant changed, an ``if`` branch emptied, a returned value
replaced by None, ``+`` and ``-`` swapped). The mutant's source really runs:
pytest is started with this file as a plugin (``-p mutation``), which, when
``BITONG_MUTANT`` is set, compiles the mutated AST and executes it in the
module's namespace before any test module is imported. A mutant is *killed*
when the module's tests fail (or hang past the timeout), *survived* when
they pass: a survivor is behaviour no test pins down.

Usage (on demand, not CI; each mutant is one pytest run)::

    python benchmarks/mutation.py                 # all three modules
    python benchmarks/mutation.py confirm -j 2    # one module, two pytest runs at once
    python benchmarks/mutation.py params --list   # the mutants, without running them

It prints each survivor (line and edit) and a killed/survived line per module.
"""

from __future__ import annotations

import argparse
import ast
import concurrent.futures
import dataclasses
import importlib
import os
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

MODULES: dict[str, list[str]] = {
    "allowlist": ["tests/agent/calling/test_allowlist.py"],
    "confirm": ["tests/agent/calling/test_confirm.py"],
    "params": ["tests/agent/calling/test_params.py"],
}
"""Module (under bitong/agent/calling/) -> the tests that must kill its mutants."""

_SWAP_CMP: dict[type, type] = {
    ast.Lt: ast.LtE, ast.LtE: ast.Lt, ast.Gt: ast.GtE, ast.GtE: ast.Gt, ast.Eq: ast.NotEq, ast.NotEq: ast.Eq,
    ast.In: ast.NotIn, ast.NotIn: ast.In, ast.Is: ast.IsNot, ast.IsNot: ast.Is,
}


@dataclasses.dataclass(frozen=True)
class Mutant:
    module: str
    index: int
    line: int
    edit: str


class _Mutator(ast.NodeTransformer):
    """Walks the tree in a fixed order; numbers every possible edit; applies edit ``target`` (-1: none)."""

    def __init__(self, target: int) -> None:
        self.target = target
        self.count = 0
        self.sites: list[tuple[int, str]] = []

    def _site(self, node: ast.AST, edit: str) -> bool:
        """Record one possible edit; True when it is the one to apply."""
        hit = self.count == self.target
        self.sites.append((getattr(node, "lineno", 0), edit))
        self.count += 1
        return hit

    # Docstrings, __all__ and type annotations are not behaviour: skip them.
    def visit_Expr(self, node: ast.Expr) -> ast.AST:
        if isinstance(node.value, ast.Constant) and isinstance(node.value.value, str):
            return node
        return self.generic_visit(node)

    def visit_Assign(self, node: ast.Assign) -> ast.AST:
        if any(isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets):
            return node
        return self.generic_visit(node)

    def visit_AnnAssign(self, node: ast.AnnAssign) -> ast.AST:
        if node.value is not None:
            node.value = self.visit(node.value)
        return node

    def visit_FunctionDef(self, node: ast.FunctionDef) -> ast.AST:
        node.body = [self.visit(stmt) for stmt in node.body]   # not the annotations or decorators
        return node

    def visit_arguments(self, node: ast.arguments) -> ast.AST:
        return node

    def visit_Compare(self, node: ast.Compare) -> ast.AST:
        self.generic_visit(node)
        for i, op in enumerate(node.ops):
            new = _SWAP_CMP.get(type(op))
            if new is not None and self._site(node, f"{type(op).__name__} -> {new.__name__}"):
                node.ops[i] = new()
        return node

    def visit_BoolOp(self, node: ast.BoolOp) -> ast.AST:
        self.generic_visit(node)
        new = ast.Or if isinstance(node.op, ast.And) else ast.And
        if self._site(node, f"{type(node.op).__name__} -> {new.__name__}"):
            node.op = new()
        return node

    def visit_UnaryOp(self, node: ast.UnaryOp) -> ast.AST:
        self.generic_visit(node)
        if isinstance(node.op, ast.Not) and self._site(node, "not x -> x"):
            return node.operand
        return node

    def visit_BinOp(self, node: ast.BinOp) -> ast.AST:
        self.generic_visit(node)
        swap = {ast.Add: ast.Sub, ast.Sub: ast.Add}.get(type(node.op))
        if swap is not None and self._site(node, f"{type(node.op).__name__} -> {swap.__name__}"):
            node.op = swap()
        return node

    def visit_Constant(self, node: ast.Constant) -> ast.AST:
        value = node.value
        if isinstance(value, bool):
            if self._site(node, f"{value} -> {not value}"):
                return ast.copy_location(ast.Constant(not value), node)
        elif isinstance(value, (int, float)):
            if self._site(node, f"{value!r} -> {value + 1!r}"):
                return ast.copy_location(ast.Constant(value + 1), node)
        return node

    def visit_Continue(self, node: ast.Continue) -> ast.AST:
        if self._site(node, "continue -> break"):
            return ast.copy_location(ast.Break(), node)
        return node

    def visit_Break(self, node: ast.Break) -> ast.AST:
        if self._site(node, "break -> continue"):
            return ast.copy_location(ast.Continue(), node)
        return node

    def visit_If(self, node: ast.If) -> ast.AST:
        self.generic_visit(node)
        if self._site(node, f"if {ast.unparse(node.test)[:50]}: <branch deleted>"):
            node.body = [ast.copy_location(ast.Pass(), node.body[0])]
        return node

    def visit_Return(self, node: ast.Return) -> ast.AST:
        self.generic_visit(node)
        if node.value is not None and not (isinstance(node.value, ast.Constant) and node.value.value is None):
            if self._site(node, f"return {ast.unparse(node.value)[:50]} -> return None"):
                node.value = ast.copy_location(ast.Constant(None), node.value)
        return node


def _source(module: str) -> tuple[Path, str]:
    path = REPO / "bitong" / "agent" / "calling" / f"{module}.py"
    return path, path.read_text(encoding="utf-8")


def mutants(module: str) -> list[Mutant]:
    path, text = _source(module)
    walker = _Mutator(-1)
    walker.visit(ast.parse(text, str(path)))
    return [Mutant(module, i, line, edit) for i, (line, edit) in enumerate(walker.sites)]


def mutated_code(module: str, index: int) -> object:
    path, text = _source(module)
    tree = _Mutator(index).visit(ast.parse(text, str(path)))
    ast.fix_missing_locations(tree)
    return compile(tree, str(path), "exec")


def _install_from_env() -> None:
    """As a pytest plugin: replace bitong.agent.calling.<module>'s code by mutant <index> before tests import it."""
    spec = os.environ.get("BITONG_MUTANT")
    if not spec:
        return
    module, index = spec.split(":")
    target = importlib.import_module(f"bitong.agent.calling.{module}")
    exec(mutated_code(module, int(index)), target.__dict__)  # the point of mutation testing


_install_from_env()   # runs when pytest imports this file with -p mutation


def run_one(mutant: Mutant, timeout_s: float) -> tuple[Mutant, str]:
    env = dict(os.environ, BITONG_MUTANT=f"{mutant.module}:{mutant.index}",
               PYTHONPATH=os.pathsep.join([str(REPO / "benchmarks"), os.environ.get("PYTHONPATH", "")]),
               HYPOTHESIS_PROFILE="mutation")
    cmd = [sys.executable, "-m", "pytest", "-x", "-q", "-p", "mutation", "-p", "no:cacheprovider",
           "--no-header", "-o", "addopts=", *MODULES[mutant.module]]
    try:
        done = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        return mutant, "killed (timeout)"
    if done.returncode == 0:
        return mutant, "survived"
    if done.returncode == 1:
        return mutant, "killed"
    return mutant, f"killed (pytest exit {done.returncode})"   # import error, collection error: still caught


def _baseline(module: str) -> None:
    cmd = [sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", *MODULES[module]]
    if subprocess.run(cmd, cwd=REPO, capture_output=True).returncode != 0:
        raise SystemExit(f"mutation: the tests of agent/{module}.py fail unmutated; fix them first")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("modules", nargs="*", metavar="MODULE", help=f"which of {', '.join(MODULES)} (default: all)")
    ap.add_argument("-j", "--jobs", type=int, default=2, help="pytest runs at once (default 2)")
    ap.add_argument("--timeout", type=float, default=120.0, help="seconds before a mutant's run counts as hung")
    ap.add_argument("--list", action="store_true", help="print the mutants and stop")
    args = ap.parse_args(argv)
    chosen = args.modules or list(MODULES)
    unknown = [m for m in chosen if m not in MODULES]
    if unknown:
        ap.error(f"unknown module {', '.join(unknown)}: choose from {', '.join(MODULES)}")
    totals: list[str] = []
    for module in chosen:
        found = mutants(module)
        if args.list:
            for m in found:
                print(f"agent/{module}.py:{m.line}: #{m.index} {m.edit}")
            continue
        _baseline(module)
        t0 = time.monotonic()
        survived: list[Mutant] = []
        killed = 0
        with concurrent.futures.ThreadPoolExecutor(args.jobs) as pool:
            for mutant, verdict in pool.map(lambda m: run_one(m, args.timeout), found):
                if verdict == "survived":
                    survived.append(mutant)
                else:
                    killed += 1
        for m in sorted(survived, key=lambda m: m.line):
            print(f"survived: agent/{module}.py:{m.line}: {m.edit}")
        score = 100.0 * killed / len(found) if found else 100.0
        line = (f"agent/{module}.py: {len(found)} mutants, {killed} killed, {len(survived)} survived: "
                f"score {score:.1f}% ({time.monotonic() - t0:.0f} s)")
        print(line, flush=True)
        totals.append(line)
    if len(totals) > 1:
        print("\n".join(["", "summary:", *totals]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
