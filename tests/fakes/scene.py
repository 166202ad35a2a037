"""The scene a test sets: tool folders on disk, a config pointing at the fakes, and the secret.

``TOKEN`` is the value that no log line, error or result may ever show;
tests export it as ``TOKEN_VAR`` and name that variable in the config.
"""

from __future__ import annotations

import textwrap
import time
from pathlib import Path
from typing import Any

from bitong.agent.config import Config, from_dict
from bitong.v1.agent_pb2 import ToolDef
from bitong.parser import parse_file

__all__ = ["TOKEN", "TOKEN_VAR", "config_for", "soon", "write_tool_folder"]

TOKEN_VAR = "BITONG_TEST_TOKEN"
TOKEN = "s3cr3t-t0ken-9f8e7d6c5b4a"

TEMPLATE = """\
name: {name}
display: {name}
intent: a tool the executor tests write
method: {method}
executor: {executor}
params_schema: {params}
constraints: {{ timeout_ms: {timeout_ms}, max_output_bytes: {cap} }}
retry: {retry}
author: test-suite
created: 2026-06-01
why: tests
{extra}"""


def write_tool_folder(root: Path, name: str, *, executor: str, method: str, params: str = "{}", extra: str = "",
                      timeout_ms: int = 5000, cap: int = 65536, retry: int = 0,
                      handler: str | None = None) -> ToolDef:
    """``root/<name>/TOOL.hdlp`` (and ``handler.py`` when given), parsed."""
    folder = root / name
    folder.mkdir(parents=True, exist_ok=True)
    text = TEMPLATE.format(name=name, executor=executor, method=method, params=params, timeout_ms=timeout_ms,
                           cap=cap, retry=retry, extra=textwrap.dedent(extra))
    (folder / "TOOL.hdlp").write_text(text, encoding="utf-8")
    if handler is not None:
        (folder / "handler.py").write_text(textwrap.dedent(handler), encoding="utf-8")
    return parse_file(str(folder / "TOOL.hdlp"))


def config_for(url: str, **overrides: Any) -> Config:
    """Every HTTP executor pointed at ``url`` (gatekeeper as two named endpoints), tokens from TOKEN_VAR."""
    doc: dict[str, Any] = {
        "defaults": {"retry_backoff_ms": 5, "retry_backoff_max_ms": 20, "user_agent": "bitong-tests"},
        "gatekeeper": {"default": "BS-SG-001", "endpoints": {
            "BS-SG-001": {"url": url, "token_env": TOKEN_VAR},
            "BS-GZ-006": {"url": url, "token_env": TOKEN_VAR}}},
        "hlpd-api": {"url": url + "/api", "token_env": TOKEN_VAR},
        "git-forgejo": {"url": url, "token_env": TOKEN_VAR, "owner": "zhuyuan", "repo": "native-repo"},
    }
    doc.update(overrides)
    return from_dict(doc)


def soon(seconds: float = 10.0) -> float:
    """A deadline ``seconds`` from now."""
    return time.monotonic() + seconds
