"""Structured logs: ``bitong serve --log-format json`` writes one JSON object a line, and every line a
request causes carries that request's id.

The id is the caller's ``x-request-id`` metadata when it sends one (so its own
logs and ours join up), else a new random one. It rides a context variable: the
tasks and threads serving the request see it, nothing passes it by hand.
"""

from __future__ import annotations

import contextvars
import json
import logging
import secrets
import time
from collections.abc import Sequence

__all__ = ["JsonFormatter", "RequestIdFilter", "TextFormatter", "new_request_id", "request_id", "install"]

request_id: contextvars.ContextVar[str] = contextvars.ContextVar("bitong_request_id", default="")

_MAX_ID = 128   # a caller's id is cut here and made printable: it goes into every line of its request


def new_request_id(metadata: Sequence[tuple[str, str | bytes]] = ()) -> str:
    """The caller's x-request-id (printable, at most 128 characters), else 16 random hex digits."""
    for key, value in metadata:
        if key.lower() == "x-request-id" and isinstance(value, str):
            given = "".join(ch for ch in value[:_MAX_ID] if ch.isprintable())
            if given:
                return given
    return secrets.token_hex(8)


class RequestIdFilter(logging.Filter):
    """Gives every record the current request id (empty outside a request)."""

    def filter(self, record: logging.LogRecord) -> bool:
        record.request_id = request_id.get()
        return True


class JsonFormatter(logging.Formatter):
    """One JSON object a line: time (UTC, ISO 8601), level, logger, message, request_id, and the
    exception's traceback when there is one."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, object] = {
            "time": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)) + f".{int(record.msecs):03d}Z",
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        rid = getattr(record, "request_id", "") or request_id.get()
        if rid:
            entry["request_id"] = rid
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return json.dumps(entry, ensure_ascii=False)


class TextFormatter(logging.Formatter):
    """``logging.Formatter`` with the same output, the local time text built once a second.

    ``bitong serve`` logs a line per Call on the event loop: strftime on every
    line was a fifth of the line's cost.
    """

    _last: tuple[int, str] = (-1, "")   # (second, its text), replaced whole: a thread sees one or the other

    def formatTime(self, record: logging.LogRecord, datefmt: str | None = None) -> str:
        if datefmt:
            return super().formatTime(record, datefmt)
        second, text = self._last
        if int(record.created) != second:
            text = time.strftime(self.default_time_format, self.converter(record.created))
            self._last = (int(record.created), text)
        return self.default_msec_format % (text, record.msecs) if self.default_msec_format else text


def install(fmt: str) -> None:
    """Put the request id on every record of the root logger's handlers; JSON lines when ``fmt`` is json.

    For the serving process only (the CLI calls this): no line it writes
    names a thread, a process or a source line, so records stop collecting
    them (the logging HOWTO's "Optimization" knobs), a third of what a
    Call's log line cost on the event loop.
    """
    logging.logThreads = False
    logging.logProcesses = False
    logging.logMultiprocessing = False
    logging._srcfile = None   # no findCaller(): filename, lineno and funcName are not in the formats
    for handler in logging.getLogger().handlers:
        handler.addFilter(RequestIdFilter())
        if fmt == "json":
            handler.setFormatter(JsonFormatter())
        elif type(handler.formatter) is logging.Formatter and not handler.formatter.datefmt:
            handler.setFormatter(TextFormatter(handler.formatter._fmt))
