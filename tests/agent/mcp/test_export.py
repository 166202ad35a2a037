"""``bitong tools --format json-schema|openai|mcp`` through the CLI as a subprocess.

The exported schemas are checked with a real JSON Schema validator (the
``jsonschema`` package the MCP SDK depends on): each is a valid 2020-12
schema, accepts what bitong accepts and refuses what it refuses.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.support import tool_text

jsonschema = pytest.importorskip("jsonschema")

BITONG = [sys.executable, "-m", "bitong"]

PARAMS = ('{ word: { type: string, required: true, pattern: "^[a-z]+$", min: 2, max: 8, description: "one word" },'
          ' times: { type: integer, min: 1, max: 10, default: 3 },'
          ' colour: { type: string, enum: [red, blue] },'
          ' wait: { type: integer, normalize: [duration_minutes], description: "minutes" } }')


def export(root: Path, fmt: str) -> Any:
    done = subprocess.run([*BITONG, "tools", "--tools", str(root), "--format", fmt], capture_output=True,
                          text=True, timeout=60, check=True)
    return json.loads(done.stdout)


@pytest.fixture
def root(tmp_path: Path) -> Path:
    folder = tmp_path / "tools" / "say-word"
    folder.mkdir(parents=True)
    (folder / "TOOL.hdlp").write_text(tool_text("say-word", command="echo {word}", params=PARAMS, confirm=True,
                                                intent="say a word a few times", why="the export test"),
                                      encoding="utf-8")
    return tmp_path / "tools"


def test_json_schema_maps_every_constraint_as_bitong_checks_it(root: Path) -> None:
    (doc,) = export(root, "json-schema")
    jsonschema.Draft202012Validator.check_schema(doc)
    assert doc["$schema"] == "https://json-schema.org/draft/2020-12/schema" and doc["title"] == "say-word"
    assert doc["description"].startswith("say a word a few times\n\nWhy: the export test")
    props = doc["properties"]
    assert props["word"] == {"type": "string", "description": "one word", "minLength": 2, "maxLength": 8,
                             "pattern": "^[a-z]+$"}
    assert props["times"] == {"type": "integer", "default": 3, "minimum": 1, "maximum": 10}
    assert props["colour"] == {"type": "string", "enum": ["red", "blue"]}
    assert props["wait"]["type"] == ["integer", "string"]   # "20 min" is read by the normalizer
    assert doc["required"] == ["word"] and doc["additionalProperties"] is False
    assert "_confirm" not in props   # only the MCP listing takes the token back
    check = jsonschema.Draft202012Validator(doc)
    assert check.is_valid({"word": "hello", "times": 2, "colour": "red", "wait": "20 min"})
    for bad in ({}, {"word": "Hello"}, {"word": "a"}, {"word": "hello", "times": 11}, {"word": "ok", "colour": "green"},
                {"word": "ok", "extra": 1}):
        assert not check.is_valid(bad), bad


def test_openai_and_mcp_forms(root: Path) -> None:
    (function,) = export(root, "openai")
    assert function["type"] == "function"
    assert function["function"]["name"] == "say-word"
    assert function["function"]["parameters"]["required"] == ["word"]
    jsonschema.Draft202012Validator.check_schema(function["function"]["parameters"])

    listed = export(root, "mcp")
    (tool,) = listed["tools"]
    assert set(tool) == {"name", "title", "description", "inputSchema", "annotations"}
    assert "_confirm" in tool["inputSchema"]["properties"]   # the two-step confirmation's token
    # it writes nothing, but its author asks for confirmation: never offered as read-only
    assert tool["annotations"] == {"title": "say-word", "readOnlyHint": False, "destructiveHint": True,
                                   "openWorldHint": False}
    import mcp_types

    mcp_types.Tool.model_validate(tool)   # the SDK's own model of a listed tool takes it as is


def test_the_bundled_tools_export_and_the_default_table_stays(tmp_path: Path) -> None:
    from tests.support import BUNDLED

    docs = export(BUNDLED, "json-schema")
    assert {d["title"] for d in docs} == {p.parent.name for p in BUNDLED.glob("*/TOOL.hdlp")}
    for doc in docs:
        jsonschema.Draft202012Validator.check_schema(doc)
    table = subprocess.run([*BITONG, "tools", "--tools", str(BUNDLED)], capture_output=True, text=True, timeout=60,
                           check=True).stdout
    assert table.splitlines()[0].split()[:2] == ["file-read", "python"]
    bad = subprocess.run([*BITONG, "tools", "--format", "yaml"], capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and "--format" in bad.stderr
