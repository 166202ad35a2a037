"""The serving process's log setup: the same lines, each still carrying its request's id."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator

import pytest

from bitong.agent.serving import requestlog
from bitong.agent.serving.requestlog import TextFormatter, install, request_id

FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


@pytest.fixture
def root_handler() -> Iterator[tuple[logging.Handler, io.StringIO]]:
    """A real StreamHandler on the root logger, as basicConfig makes it; logging's globals put back after."""
    saved = (logging.logThreads, logging.logProcesses, logging.logMultiprocessing, logging._srcfile)
    root = logging.getLogger()
    level = root.level
    out = io.StringIO()
    handler = logging.StreamHandler(out)
    handler.setFormatter(logging.Formatter(FORMAT))
    root.addHandler(handler)
    root.setLevel(logging.INFO)
    try:
        yield handler, out
    finally:
        root.removeHandler(handler)
        root.setLevel(level)
        logging.logThreads, logging.logProcesses, logging.logMultiprocessing, logging._srcfile = saved


def test_the_text_formatter_writes_what_logging_formatter_writes_across_seconds() -> None:
    plain, cached = logging.Formatter(FORMAT), TextFormatter(FORMAT)
    for created in (1_700_000_000.0, 1_700_000_000.999, 1_700_000_001.0005, 1_700_000_001.5, 1_700_000_061.25,
                    1_700_000_000.5):   # forward, over a minute, and back again
        record = logging.LogRecord("bitong.call", logging.INFO, __file__, 1, "call %s: ok=%s", ("t", True), None)
        record.created, record.msecs = created, (created - int(created)) * 1000
        assert cached.format(record) == plain.format(record)
    dated = TextFormatter(FORMAT, datefmt="%Y")
    assert dated.format(record) == logging.Formatter(FORMAT, datefmt="%Y").format(record)


def test_install_keeps_the_line_and_stamps_the_request_id(
        root_handler: tuple[logging.Handler, io.StringIO]) -> None:
    handler, out = root_handler
    install("text")
    assert isinstance(handler.formatter, TextFormatter)
    assert logging._srcfile is None and not logging.logThreads   # records no longer gather what no line prints
    seen: list[logging.LogRecord] = []
    handler.addFilter(lambda record: seen.append(record) or True)
    token = request_id.set("req-42")
    try:
        logging.getLogger("bitong.call").info("call %s: ok=%s", "echo", True)
    finally:
        request_id.reset(token)
    logging.getLogger("bitong.call").info("outside")
    lines = out.getvalue().splitlines()
    assert lines[0].endswith(" INFO bitong.call: call echo: ok=True") and lines[1].endswith(": outside")
    assert [r.request_id for r in seen] == ["req-42", ""]   # type: ignore[attr-defined]


def test_install_json_puts_the_request_id_in_each_line(root_handler: tuple[logging.Handler, io.StringIO]) -> None:
    handler, out = root_handler
    install("json")
    token = request_id.set(requestlog.new_request_id([("x-request-id", "abc\n1")]))
    try:
        logging.getLogger("bitong.call").info("call %s", "echo")
    finally:
        request_id.reset(token)
    entry = json.loads(out.getvalue())
    assert entry["message"] == "call echo" and entry["request_id"] == "abc1" and entry["logger"] == "bitong.call"
