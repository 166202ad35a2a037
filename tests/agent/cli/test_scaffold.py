"""bitong init: a scaffold that parses, passes lint and runs, and never overwrites."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from bitong import parser as hdlp
from bitong.agent.cli.lint import problems
from bitong.agent.cli.scaffold import EXECUTORS, ScaffoldError, create


@pytest.mark.parametrize("executor", EXECUTORS)
def test_each_executor_scaffolds_a_tool_that_passes_lint(tmp_path: Path, executor: str) -> None:
    written = create(f"new-{executor}", executor, str(tmp_path))
    tool = hdlp.parse_file(written[0])
    assert tool.name == f"new-{executor}" and tool.executor == executor
    assert problems(tool) == []
    for field in ("display", "intent", "why"):
        assert "TODO" in getattr(tool, field)   # what the author must write is marked
    assert (len(written) == 2) == (executor == "python")


def test_the_python_scaffold_runs_as_a_tool(tmp_path: Path) -> None:
    create("lister", "python", str(tmp_path))
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "a.txt").write_text("x")
    done = subprocess.run([sys.executable, "-m", "bitong", "call", "--tools", str(tmp_path), "lister",
                           f"path={tmp_path / 'data'}", "--sandbox", "off"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert '"entries": ["a.txt"]' in done.stdout


def test_it_never_overwrites_and_refuses_a_bad_name(tmp_path: Path) -> None:
    create("mine", "shell", str(tmp_path))
    with pytest.raises(ScaffoldError, match="already exists"):
        create("mine", "shell", str(tmp_path))
    with pytest.raises(ScaffoldError, match="must match"):
        create("Not A Name", "shell", str(tmp_path))
    with pytest.raises(ScaffoldError, match="expected one of"):
        create("other", "perl", str(tmp_path))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mine"]
