"""bitong.agent's rooms import one way: a reader finds a concern by its folder, and no room reaches back up."""

from __future__ import annotations

import ast
from pathlib import Path

import bitong.agent

AGENT = Path(bitong.agent.__file__).parent
# Lowest first: a room may import the rooms before it, never one after it.
ROOMS = ["matching", "registry", "config", "calling", "serving", "mcp", "cli"]


def _room(path: Path) -> str:
    first = path.relative_to(AGENT).parts[0]
    return first.removesuffix(".py")


def _imports(path: Path) -> set[str]:
    package = ".".join(("bitong", "agent", *path.relative_to(AGENT).parent.parts))
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            found.add(module)
            found.update(f"{module}.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
    return found


def test_every_module_of_the_agent_lives_in_a_room() -> None:
    loose = sorted(str(p.relative_to(AGENT)) for p in AGENT.glob("*.py")
                   if p.name != "__init__.py" and _room(p) not in ROOMS)
    assert loose == []


def test_no_room_imports_a_room_above_it() -> None:
    upward = []
    for path in AGENT.rglob("*.py"):
        if path.name == "__init__.py" and path.parent == AGENT:
            continue
        mine = ROOMS.index(_room(path))
        for module in _imports(path):
            parts = module.split(".")
            if parts[:2] == ["bitong", "agent"] and len(parts) > 2 and parts[2] in ROOMS:
                if ROOMS.index(parts[2]) > mine:
                    upward.append(f"{path.relative_to(AGENT)} imports {module}")
    assert upward == []


def test_the_package_claims_no_global_name_but_bitong() -> None:
    import importlib.util

    for name in ("agent", "parser"):
        spec = importlib.util.find_spec(name)
        assert spec is None or "bitong" not in str(spec.origin or spec.submodule_search_locations), name
