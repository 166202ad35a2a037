"""The one error type of the format: where, and what was expected."""

from __future__ import annotations

from typing import Any

__all__ = ["ParseError"]


class ParseError(ValueError):
    """A TOOL.hdlp that cannot become a ToolDef.

    ``str(err)`` is ``path:line:col: message``, the form editors and
    ``bitong lint`` understand. ``line`` and ``column`` are 1-based; a problem
    with the file as a whole (unreadable, empty) points at 1:1.
    """

    def __init__(self, path: str, line: int, column: int, message: str) -> None:
        self.path = path
        self.line = line
        self.column = column
        self.message = message
        super().__init__(f"{path}:{line}:{column}: {message}")

    def __reduce__(self) -> tuple[Any, ...]:  # picklable across worker processes
        return (ParseError, (self.path, self.line, self.column, self.message))
