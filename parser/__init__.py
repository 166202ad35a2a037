"""TOOL.hdlp to ``bitong.v1.ToolDef``: the format's one parser.

>>> from parser import parse_file
>>> tool = parse_file("tools/shell-exec/TOOL.hdlp")

Errors are :class:`ParseError` with ``path:line:col: message``.
"""

from __future__ import annotations

import os

from bitong.v1.agent_pb2 import ToolDef

from ._backend import BACKEND, Backend, active
from .errors import ParseError

__all__ = ["BACKEND", "ParseError", "ToolDef", "parse", "parse_bytes", "parse_file"]

TOOL_FILE = "TOOL.hdlp"


def _folder(path: str) -> str | None:
    """The folder whose name must equal the tool's, for a file named TOOL.hdlp."""
    if os.path.basename(path) != TOOL_FILE:
        return None
    return os.path.basename(os.path.dirname(os.path.abspath(path)))


def parse(text: str, path: str = "<string>", *, backend: Backend | None = None,
          source: bytes | None = None) -> ToolDef:
    """Parse one definition. ``path`` names the file in errors; when it ends in
    ``TOOL.hdlp`` its folder name must equal the tool's ``name``.

    Raises :class:`ParseError` (a ``ValueError``) for anything wrong with the text.
    """
    b = backend or active
    header, root = b.tree(text, path)
    return b.build(header, root, path, source if source is not None else text, _folder(path))


def parse_bytes(data: bytes, path: str = "<bytes>", *, backend: Backend | None = None) -> ToolDef:
    """Parse raw file content; bytes that are not UTF-8 are an error at their position."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        before = data[: exc.start]
        line = before.count(b"\n") + 1
        col = len(before[before.rfind(b"\n") + 1 :].decode("utf-8", "replace")) + 1
        raise ParseError(path, line, col, "not UTF-8 text: expected a file encoded as UTF-8") from None
    return parse(text, path, backend=backend, source=data)


def parse_file(path: str | os.PathLike[str], *, backend: Backend | None = None) -> ToolDef:
    """Read and parse one TOOL.hdlp; an unreadable file is a ParseError at 1:1."""
    p = os.fspath(path)
    try:
        with open(p, "rb") as fh:
            data = fh.read()
    except OSError as exc:
        raise ParseError(p, 1, 1, f"cannot read: {exc.strerror} (expected a readable TOOL.hdlp file)") from None
    return parse_bytes(data, p, backend=backend)
