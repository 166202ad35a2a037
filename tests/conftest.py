"""Shared fixtures: real tool folders on disk, a real sidecar on a real socket."""

from __future__ import annotations

import os
import shutil
import tempfile
import textwrap
from collections.abc import AsyncIterator
from pathlib import Path

import grpc
import pytest

from bitong.v1 import agent_pb2_grpc as pb_grpc
from tests.support import BUNDLED, SHARED, WriteTool, in_ci, tool_text

pytest_plugins = ("tests.fakes.fixtures",)   # define, token, server, runners: the executor tests' fixtures

SHARED_MISSING = (f"{SHARED} is missing: the tests that read the spec, the eval registry and the scorer "
                  "cannot run (clone shared/ beside the repository)")


def pytest_sessionstart(session: pytest.Session) -> None:
    """In CI a missing ../shared fails the run at once: a green suite that skipped 66 tests proves nothing.
    bitong's caches (the unpacked model, the in-process match's registries) go to a folder of this
    session's, never the user's (the commands the tests start inherit it)."""
    if not SHARED.is_dir() and in_ci():
        raise pytest.UsageError(f"CI=true and {SHARED_MISSING}")
    os.environ["BITONG_CACHE_DIR"] = tempfile.mkdtemp(prefix="bitong-test-cache-")


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    cache = os.environ.get("BITONG_CACHE_DIR", "")
    if os.path.basename(cache).startswith("bitong-test-cache-"):
        shutil.rmtree(cache, ignore_errors=True)


def pytest_report_header(config: pytest.Config) -> str | None:
    if not SHARED.is_dir():
        return f"WARNING: {SHARED_MISSING}; they SKIP (CI=true makes this an error)"
    return None


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """Locally the shared/ tests skip, and the last thing on screen says how many and why."""
    if SHARED.is_dir():
        return
    skipped = [r for r in terminalreporter.stats.get("skipped", []) if "shared" in str(r.longrepr)]
    terminalreporter.write_sep("!", f"{len(skipped)} tests SKIPPED: {SHARED_MISSING}", red=True, bold=True)


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
async def sidecar(tools_root: Path, tmp_path: Path, request: pytest.FixtureRequest) -> AsyncIterator[object]:
    """A served sidecar; ``@pytest.mark.host_proc``: without the OS sandbox, for tests that read host pids
    through /proc (the sandbox gives each call a /proc of its own namespace)."""
    from bitong.agent.calling.executors.sandbox import Sandbox
    from bitong.agent.serving.server import Sidecar

    box = Sandbox("off", False, "the test reads host pids") if request.node.get_closest_marker("host_proc") else None
    car = Sidecar([str(tools_root)], f"unix:{tmp_path}/bitong.sock", poll_s=0.1, grace_s=5, sandbox=box)
    await car.start()
    try:
        yield car
    finally:
        await car.stop(0)


@pytest.fixture
async def stub(sidecar: object) -> AsyncIterator[pb_grpc.ToolAgentStub]:
    async with grpc.aio.insecure_channel(sidecar.address) as channel:  # type: ignore[attr-defined]
        yield pb_grpc.ToolAgentStub(channel)


@pytest.fixture
async def start_sidecar(tools_root: Path) -> AsyncIterator[object]:
    """start_sidecar(listen, **Sidecar options) -> a started Sidecar on the test's tools root; all stopped after."""
    from bitong.agent.registry.approval import development
    from bitong.agent.serving.server import Sidecar

    started: list[Sidecar] = []

    async def start(listen: str, **options: object) -> Sidecar:
        options.setdefault("poll_s", 0.1)
        options.setdefault("grace_s", 5)
        config = options.get("config")
        if "approvals" not in options and (config is None or not config.approve.grants):  # type: ignore[attr-defined]
            options["approvals"] = development()   # the bundled tools serve, as they do without --config
        car = Sidecar([str(tools_root)], listen, **options)  # type: ignore[arg-type]
        await car.start()
        started.append(car)
        return car

    try:
        yield start
    finally:
        for car in reversed(started):
            await car.stop(0)
