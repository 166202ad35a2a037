"""Fixtures for the executor tests (a plugin loaded by tests/conftest.py): tool folders, a server, executors."""

from __future__ import annotations

from pathlib import Path
from typing import Any
from collections.abc import Callable, Iterator

import pytest

from bitong.agent.calling.executors import Executors
from bitong.v1.agent_pb2 import ToolDef
from tests.fakes.scene import TOKEN, TOKEN_VAR, config_for, write_tool_folder
from tests.fakes.server import FakeServer

Define = Callable[..., ToolDef]


@pytest.fixture
def define(tmp_path: Path) -> Define:
    """define(name, executor=, method=, ...) -> ToolDef, written under tmp_path/tools (see fakes.scene)."""

    def make(name: str, **options: Any) -> ToolDef:
        return write_tool_folder(tmp_path / "tools", name, **options)

    return make


@pytest.fixture
def token(monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv(TOKEN_VAR, TOKEN)
    return TOKEN


@pytest.fixture
def server() -> Iterator[FakeServer]:
    with FakeServer() as srv:
        yield srv


@pytest.fixture
def runners(server: FakeServer, token: str) -> Executors:
    return Executors(config_for(server.url))
