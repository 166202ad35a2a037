"""Helpers the tests import (``from tests.support import ...``); fixtures stay in conftest.py.

A conftest is a plugin, not a module to import: importing it by its bare name
breaks as soon as two conftest.py files are collected in one run.
"""

from __future__ import annotations

import os
from typing import Any
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
BUNDLED = REPO / "tools"
# CI clones the repository next to a copy of shared/ (the spec, the eval registry
# and the scorer); so does a developer's checkout. Without it the tests that read
# it skip locally and fail the run in CI (see tests/conftest.py).
SHARED = REPO.parent / "shared"
EVAL_REGISTRY = SHARED / "eval" / "registry"


def in_ci() -> bool:
    """CI=true (or 1/yes), as CI services set it: there a missing ../shared is an error, not a skip."""
    return os.environ.get("CI", "").strip().lower() in ("1", "true", "yes")


TOOL_TEMPLATE = """\
name: {name}
display: {display}
intent: {intent}
method: run
executor: shell
command: {command}
params_schema: {params}
constraints: {{ timeout_ms: {timeout_ms}, max_output_bytes: {max_output_bytes}, require_confirm: {confirm} }}
{permissions}author: test-suite
created: 2026-11-30
why: {why}
"""


def approve(sidecar: Any, *names: str) -> None:
    """Approve test tools that declare a sensitive permission, as a config's [approve] would."""
    import dataclasses

    from bitong.agent.registry.approval import Grant

    policy = sidecar.registry.approval
    sidecar.registry.approval = dataclasses.replace(policy, grants=(*policy.grants, *(Grant(n) for n in names)))


def writes_to(folder: object) -> str:
    """The permissions of a test tool that runs other programs and writes into ``folder`` (in the sandbox,
    a tool without them sees a private /tmp and may run only its own program)."""
    return f'exec: true, fs_write: true, fs_write_paths: ["{folder}/**"]'


def tool_text(name: str, *, command: str = "echo hello", params: str = "{}", intent: str = "",
              display: str = "", timeout_ms: int = 30000, max_output_bytes: int = 65536,
              confirm: bool = False, why: str = "a tool the tests write", permissions: str = "") -> str:
    """A valid shell-executor TOOL.hdlp (every placeholder in command must be in params);
    ``permissions``: the flow map's inside, e.g. ``exec: true``."""
    return TOOL_TEMPLATE.format(
        name=name, display=display or name, intent=intent or f"run the {name} test tool",
        command=command, params=params, timeout_ms=timeout_ms, max_output_bytes=max_output_bytes,
        confirm="true" if confirm else "false", why=why,
        permissions=f"permissions: {{ {permissions} }}\n" if permissions else "",
    )


WriteTool = Callable[..., Path]
