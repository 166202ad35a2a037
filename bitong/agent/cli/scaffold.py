"""``bitong init NAME``: a new tool folder that passes lint, with every field to fill in marked.

A tool author starts from a definition with all ten required fields (seed
000 §5: who wrote it, why, how it runs), a params block showing the common
keys, and for ``--executor python`` a ``handler.py`` whose ``run`` takes
exactly the declared params. What needs the author's words says ``TODO``;
the text is parsed and linted before anything is written, so the scaffold
can never hand out a file bitong would refuse.
"""

from __future__ import annotations

import datetime
import getpass
import os
import subprocess

__all__ = ["EXECUTORS", "ScaffoldError", "create"]

EXECUTORS = ("shell", "python", "http")


class ScaffoldError(ValueError):
    """The folder cannot be made as asked; ``str()`` says why."""


_HEADER = """HLDP://tools/{name}
# Made by `bitong init`. Replace each TODO, then: bitong lint {folder}
name: {name}
display: TODO a short title people will see
intent: TODO what this tool does, in the words a caller would use to ask for it
"""

_SHELL = """method: run
executor: shell
command: echo {{message}}
params_schema:
  message: {{ type: string, required: true, description: "TODO what this parameter is" }}
constraints: {{ timeout_ms: 30000, max_output_bytes: 65536 }}
"""

_PYTHON = """method: run
executor: python
params_schema:
  path: {{ type: string, required: true, normalize: [trim, path], description: "TODO what this parameter is" }}
  limit: {{ type: integer, default: 10, min: 1, max: 1000, description: "TODO an optional parameter with its default" }}
constraints: {{ timeout_ms: 30000, max_output_bytes: 65536 }}
permissions:
  fs_read: true
  fs_read_paths: ["/tmp/**"]
"""

_HTTP = """method: GET
executor: http
params_schema:
  url: {{ type: string, required: true, pattern: "^https?://", description: "TODO the URL to ask" }}
constraints: {{ timeout_ms: 30000, max_output_bytes: 131072 }}
permissions: {{ network: true }}
"""

_FOOTER = """version: 0.1.0
trigger_keywords: [TODO, words, callers use]
non_goals: |
  TODO what this tool does not do (Match keeps such requests away from it)
author: {author}
created: {created}
why: TODO why this tool exists, who needs it and for what
"""

_HANDLER = '''"""The {name} tool (executor: python): bitong calls run() with the validated params as keywords.

Return JSON-able data; it is the call's output. An exception is the call's
error, with its traceback in stderr. Runs in the tool's runtime/ folder.
"""

from __future__ import annotations

import os


def run(path: str, limit: int = 10) -> dict[str, object]:
    # TODO: the tool's work. Reads are limited to the permissions' fs_read_paths.
    names = sorted(os.listdir(path))[:limit]
    return {{"path": path, "entries": names}}
'''


def _author() -> str:
    try:
        done = subprocess.run(["git", "config", "user.name"], capture_output=True, text=True, timeout=5)
        if done.returncode == 0 and done.stdout.strip():
            return done.stdout.strip()
    except (OSError, subprocess.SubprocessError):
        pass
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return "TODO your name"


def create(name: str, executor: str = "shell", parent: str = ".") -> list[str]:
    """Write ``parent/name/TOOL.hdlp`` (and ``handler.py`` for python); returns the paths written."""
    from bitong import parser as hdlp

    from .lint import problems

    if executor not in EXECUTORS:
        raise ScaffoldError(f"--executor {executor!r}: expected one of {', '.join(EXECUTORS)}")
    folder = os.path.join(parent, name)
    if os.path.exists(folder):
        raise ScaffoldError(f"{folder} already exists: bitong init never overwrites a tool")
    body = {"shell": _SHELL, "python": _PYTHON, "http": _HTTP}[executor]
    text = (_HEADER + body + _FOOTER).format(name=name, folder=folder, author=_author(),
                                             created=datetime.date.today().isoformat())
    path = os.path.join(folder, hdlp.TOOL_FILE)
    try:
        hdlp.parse(text, path)   # the name's own rules (and the folder's) are the parser's
    except hdlp.ParseError as exc:
        raise ScaffoldError(f"cannot make a tool named {name!r}: {exc.message}") from None
    os.makedirs(folder)
    written = [path]
    with open(path, "w", encoding="utf-8") as fh:
        fh.write(text)
    if executor == "python":
        handler = os.path.join(folder, "handler.py")
        with open(handler, "w", encoding="utf-8") as fh:
            fh.write(_HANDLER.format(name=name))
        written.append(handler)
    left = problems(hdlp.parse_file(path))
    if left:  # a bug in these templates, not the user's: say so rather than leave a broken tool
        raise ScaffoldError("the scaffold does not pass lint (a bitong bug): " + "; ".join(left))
    return written
