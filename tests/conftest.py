"""Shared fixtures: real tool folders on disk, a real sidecar on a real socket."""

from __future__ import annotations

import shutil
import textwrap
from pathlib import Path
from typing import AsyncIterator, Callable

import grpc
import pytest

from bitong.v1 import agent_pb2_grpc as pb_grpc

pytest_plugins = ("fakes.fixtures",)   # define, token, server, runners: the executor tests' fixtures

REPO = Path(__file__).resolve().parents[1]
BUNDLED = REPO / "tools"
# CI clones the repository next to a copy of shared/; so does a developer's checkout.
SHARED = REPO.parent / "shared"
EVAL_REGISTRY = SHARED / "eval" / "registry"

TOOL_TEMPLATE = """\
name: {name}
display: {display}
intent: {intent}
method: run
executor: shell
command: {command}
params_schema: {params}
constraints: {{ timeout_ms: {timeout_ms}, max_output_bytes: {max_output_bytes}, require_confirm: {confirm} }}
author: test-suite
created: 2026-11-30
why: {why}
"""


def tool_text(name: str, *, command: str = "echo hello", params: str = "{}", intent: str = "",
              display: str = "", timeout_ms: int = 30000, max_output_bytes: int = 65536,
              confirm: bool = False, why: str = "a tool the tests write") -> str:
    """A valid shell-executor TOOL.hdlp (every placeholder in command must be in params)."""
    return TOOL_TEMPLATE.format(
        name=name, display=display or name, intent=intent or f"run the {name} test tool",
        command=command, params=params, timeout_ms=timeout_ms, max_output_bytes=max_output_bytes,
        confirm="true" if confirm else "false", why=why,
    )


WriteTool = Callable[..., Path]


@pytest.fixture
def tools_root(tmp_path: Path) -> Path:
    """A private copy of the bundled tools: tests may add, break and delete files."""
    root = tmp_path / "tools"
    shutil.copytree(BUNDLED, root, ignore=shutil.ignore_patterns("runtime", "__pycache__"))
    return root


@pytest.fixture
def write_tool(tools_root: Path) -> WriteTool:
    """write_tool(name, text=None, **tool_text_options) -> path of the written TOOL.hdlp."""

    def write(name: str, text: str | None = None, **options: object) -> Path:
        folder = tools_root / name
        folder.mkdir(exist_ok=True)
        path = folder / "TOOL.hdlp"
        path.write_text(text if text is not None else textwrap.dedent(tool_text(name, **options)),
                        encoding="utf-8")
        return path

    return write


@pytest.fixture
async def sidecar(tools_root: Path, tmp_path: Path) -> AsyncIterator[object]:
    from agent.server import Sidecar

    car = Sidecar([str(tools_root)], f"unix:{tmp_path}/bitong.sock", poll_s=0.1, grace_s=5)
    await car.start()
    try:
        yield car
    finally:
        await car.stop(0)


@pytest.fixture
async def stub(sidecar: object) -> AsyncIterator[pb_grpc.ToolAgentStub]:
    async with grpc.aio.insecure_channel(sidecar.address) as channel:  # type: ignore[attr-defined]
        yield pb_grpc.ToolAgentStub(channel)
