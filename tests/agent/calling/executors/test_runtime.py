"""Where a tool's own files go: beside its TOOL.hdlp, or under the state dir when it is installed code."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from bitong.agent.calling.executors import sandbox as sandboxes
from bitong.agent.calling.executors import shell
from bitong.agent.calling.executors.shell import ShellExecutor
from bitong.parser import parse_file

TOOL = """\
name: scratch
display: writes a scratch file
intent: write a file in the working folder
method: run
executor: shell
command: /bin/sh -c "echo made > made-here; echo $BITONG_TOOL_DIR"
params_schema: {}
constraints: { timeout_ms: 10000 }
author: test-suite
created: 2026-12-03
why: tests
"""


@pytest.fixture
def installed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A folder bitong takes for site-packages (the real ones are not for tests to write in)."""
    site = tmp_path / "site-packages"
    (site / "bitong" / "tools" / "scratch").mkdir(parents=True)
    monkeypatch.setattr(shell, "installed_roots", lambda: (str(site.resolve()),))
    return site


@pytest.fixture
def state(tmp_path: Path) -> Iterator[Path]:
    shell.set_state_dir(str(tmp_path / "state"))
    yield tmp_path / "state"
    shell.set_state_dir(None)


@pytest.mark.parametrize("box", ["off", "auto"])
def test_an_installed_tool_writes_under_the_state_dir_never_in_site_packages(installed: Path, state: Path,
                                                                           box: str) -> None:
    folder = installed / "bitong" / "tools" / "scratch"
    (folder / "TOOL.hdlp").write_text(TOOL, encoding="utf-8")
    tool = parse_file(folder / "TOOL.hdlp")
    out = asyncio.run(ShellExecutor(sandbox=sandboxes.probe(box)).run(tool, {}, deadline=time.monotonic() + 30))
    assert out.ok, (out.stderr, out.error)
    assert (state / "runtime" / "scratch" / "made-here").read_text() == "made\n"
    assert not (folder / "runtime").exists()
    assert out.stdout.decode().strip() == str(folder)   # BITONG_TOOL_DIR is still the tool's own folder


def test_a_users_tool_keeps_its_runtime_beside_its_definition(tmp_path: Path, state: Path) -> None:
    folder = tmp_path / "tools" / "scratch"
    folder.mkdir(parents=True)
    (folder / "TOOL.hdlp").write_text(TOOL, encoding="utf-8")
    tool = parse_file(folder / "TOOL.hdlp")
    out = asyncio.run(ShellExecutor(sandbox=sandboxes.probe("auto")).run(tool, {}, deadline=time.monotonic() + 30))
    assert out.ok, (out.stderr, out.error)
    assert (folder / "runtime" / "made-here").read_text() == "made\n"
    assert not state.exists()


def test_the_state_dir_defaults(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    shell.set_state_dir(None)
    monkeypatch.setenv("STATE_DIRECTORY", "/var/lib/svc:/other")
    assert shell.state_dir() == "/var/lib/svc"   # systemd's StateDirectory=
    monkeypatch.delenv("STATE_DIRECTORY")
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path))
    assert shell.state_dir() == str(tmp_path / "bitong")
