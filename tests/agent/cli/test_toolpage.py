"""bitong show's page: everything a caller needs before the first call, and a call to paste."""

from __future__ import annotations

import shlex
import subprocess
import sys
from pathlib import Path

from bitong import parser as hdlp
from bitong.agent.cli.toolpage import render


def test_the_page_says_what_who_params_permissions_and_limits(tools_root: Path) -> None:
    tool = hdlp.parse_file(tools_root / "file-stats" / "TOOL.hdlp")
    page = render(tool)
    for text in (tool.intent, tool.why, tool.author, "executor python, method run", "not_modified_days",
                 ">= 0", "fs_read_paths", "timeout 15 s", *tool.non_goals):
        assert text in page, text
    header = next(line for line in page.splitlines() if line.strip().startswith("param "))
    assert header.split() == ["param", "type", "required", "default", "limits", "description"]


def test_the_example_call_runs(tools_root: Path) -> None:
    """The page's first example is a command line a user can paste (here with a real value put in)."""
    page = render(hdlp.parse_file(tools_root / "shell-exec" / "TOOL.hdlp"))
    example = page.split("call it\n", 1)[1].splitlines()[0].strip()
    argv = shlex.split(example)
    assert argv[:3] == ["bitong", "call", "shell-exec"]
    argv = [a.replace("<cmd>", "echo pasted") for a in argv[3:]]
    done = subprocess.run([sys.executable, "-m", "bitong", "call", "--tools", str(tools_root), "shell-exec", *argv],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and done.stdout == "pasted\n", done.stderr
