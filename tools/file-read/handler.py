"""file-read: lines of a text file, as JSON, inside the tool's fs_read_paths."""

from __future__ import annotations

from bitong.agent.calling.allowlist import require


def read_file(path: str, from_line: int = 1, limit: int = 500) -> dict:
    """Lines ``from_line`` .. ``from_line + limit - 1`` (1-based) of the file at ``path``.

    ``content`` holds them as text (invalid UTF-8 replaced, and said so);
    ``eof`` says whether the file ends within them.
    """
    real = require(path, "read", "path")
    from_line, limit = int(from_line), int(limit)
    if from_line < 1 or limit < 1:
        raise ValueError("from_line and limit start at 1")
    lines: list[bytes] = []
    eof = True
    with open(real, "rb") as fh:
        for number, line in enumerate(fh, 1):
            if number < from_line:
                continue
            if len(lines) == limit:
                eof = False
                break
            lines.append(line)
    raw = b"".join(lines)
    try:
        text, replaced = raw.decode("utf-8"), False
    except UnicodeDecodeError:
        text, replaced = raw.decode("utf-8", "replace"), True
    return {
        "path": real,
        "from_line": from_line,
        "to_line": from_line + len(lines) - 1 if lines else None,
        "lines": len(lines),
        "eof": eof,
        "invalid_utf8_replaced": replaced,
        "content": text,
    }
