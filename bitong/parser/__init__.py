"""TOOL.hdlp to ``bitong.v1.ToolDef``: the format's one parser.

>>> from bitong.parser import parse_file
>>> tool = parse_file("tools/shell-exec/TOOL.hdlp")

Errors are :class:`ParseError` with ``path:line:col: message``.
"""

from __future__ import annotations

import os
import stat

from bitong.v1.agent_pb2 import ToolDef

from ._backend import BACKEND, Backend, active
from .errors import ParseError

__all__ = ["BACKEND", "MAX_FILE_BYTES", "ParseError", "ToolDef", "parse", "parse_bytes", "parse_file", "read_tool_file"]

TOOL_FILE = "TOOL.hdlp"
# A tool definition is a page of text (the bundled ones are under 3 KiB); a
# file far bigger is a mistake (or a symlink to a log) and is refused unread.
MAX_FILE_BYTES = 1 << 20


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
    try:
        header, root = b.tree(text, path)
        tool: ToolDef = b.build(header, root, path, source if source is not None else text, _folder(path))
        return tool
    except ParseError:
        raise
    except Exception as exc:  # untrusted input: any failure is this file's error, never the caller's
        raise ParseError(path, 1, 1, f"cannot build the tool ({type(exc).__name__}: {exc}); "
                                     "this is a bug in bitong's parser, please report it with the file") from exc


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


def read_tool_file(path: str, max_bytes: int = MAX_FILE_BYTES) -> tuple[bytes, os.stat_result]:
    """The bytes of a regular file of at most ``max_bytes``, and its stat; else a ParseError at 1:1.

    The file is opened non-blocking and checked on its descriptor before a
    byte is read, so a FIFO (which would block the reader for ever), a device
    (``/dev/zero`` would fill memory) or a directory is refused, symlinked or
    not, and the size limit holds even if the file grows after the check.
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        raise ParseError(path, 1, 1, f"cannot read: {exc.strerror} (expected a readable TOOL.hdlp file)") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise ParseError(path, 1, 1, f"not a regular file ({_file_kind(st.st_mode)}): expected a TOOL.hdlp text file")
        if st.st_size > max_bytes:
            raise ParseError(path, 1, 1, f"file is {st.st_size} bytes: expected at most {max_bytes} bytes")
        chunks: list[bytes] = []
        total = 0
        while True:
            chunk = os.read(fd, max_bytes + 1 - total)
            if not chunk:
                break
            chunks.append(chunk)
            total += len(chunk)
            if total > max_bytes:
                raise ParseError(path, 1, 1, f"file grew past {max_bytes} bytes while being read: expected at most {max_bytes} bytes")
        return b"".join(chunks), st
    except OSError as exc:
        raise ParseError(path, 1, 1, f"cannot read: {exc.strerror} (expected a readable TOOL.hdlp file)") from None
    finally:
        os.close(fd)


def _file_kind(mode: int) -> str:
    for test, word in ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
                       (stat.S_ISDIR, "a directory"), (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return word
    return "an unknown kind of file"


def parse_file(path: str | os.PathLike[str], *, backend: Backend | None = None,
               max_bytes: int = MAX_FILE_BYTES) -> ToolDef:
    """Read and parse one TOOL.hdlp; an unreadable, oversized or non-regular file is a ParseError at 1:1."""
    p = os.fspath(path)
    data, _ = read_tool_file(p, max_bytes)
    return parse_bytes(data, p, backend=backend)
