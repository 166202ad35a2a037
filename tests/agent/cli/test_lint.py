"""bitong lint's runnability checks: what would otherwise fail at a tool's first call."""

from __future__ import annotations

from pathlib import Path

from bitong import parser as hdlp
from bitong.agent.cli.lint import problems
from tests.support import WriteTool

PY_TOOL = """\
name: {name}
display: A python tool
intent: count things
method: {method}
executor: python
params_schema:
  path: {{ type: string, required: true }}
  depth: {{ type: integer }}
  mode: {{ type: string, default: fast }}
constraints: {{ timeout_ms: 1000 }}
author: test
created: 2026-12-03
why: lint must see what the first call would
"""


def _python_tool(write_tool: WriteTool, handler: str | None, method: str = "run") -> hdlp.ToolDef:
    path = write_tool("py-tool", text=PY_TOOL.format(name="py-tool", method=method))
    if handler is not None:
        (path.parent / "handler.py").write_text(handler, encoding="utf-8")
    return hdlp.parse_file(path)


def test_a_handler_that_takes_the_params_passes(write_tool: WriteTool) -> None:
    assert problems(_python_tool(write_tool, "def run(path, depth=0, mode='fast'):\n    return 1\n")) == []
    assert problems(_python_tool(write_tool, "async def run(**params):\n    return params\n")) == []


def test_a_missing_handler_is_named(write_tool: WriteTool) -> None:
    tool = _python_tool(write_tool, None)
    assert problems(tool) == [f"{tool.source_path}: executor python needs handler.py beside it: "
                              "No such file or directory"]


def test_a_handler_that_does_not_compile_points_at_the_line(write_tool: WriteTool) -> None:
    tool = _python_tool(write_tool, "import os\n\ndef run(path:\n")
    [problem] = problems(tool)
    handler = Path(tool.source_path).parent / "handler.py"
    assert problem.startswith(f"{handler}:3:") and "does not compile" in problem


def test_no_function_named_by_method(write_tool: WriteTool) -> None:
    [problem] = problems(_python_tool(write_tool, "def main(path):\n    return 1\n", method="run"))
    assert "no top-level function 'run'" in problem


def test_a_signature_that_cannot_take_the_params(write_tool: WriteTool) -> None:
    [only] = problems(_python_tool(write_tool, "def run(path, /, depth=0, mode='x'):\n    return 1\n"))
    assert "positional-only parameters (path)" in only
    found = problems(_python_tool(write_tool, "def run(path, depth, extra):\n    return 1\n"))
    text = "\n".join(found)
    assert "does not take the declared param 'mode'" in text
    assert "requires 'extra', which is not a declared param" in text
    assert "requires 'depth', an optional param without a default" in text


def test_an_unknown_forgejo_method(write_tool: WriteTool) -> None:
    path = write_tool("fj-tool", text=PY_TOOL.format(name="fj-tool", method="teleport")
                      .replace("executor: python", "executor: git-forgejo"))
    [problem] = problems(hdlp.parse_file(path))
    assert "git-forgejo has no method 'teleport'" in problem


def test_the_bundled_tools_pass(tools_root: Path) -> None:
    for path in sorted(tools_root.glob("*/TOOL.hdlp")):
        assert problems(hdlp.parse_file(path)) == [], path
