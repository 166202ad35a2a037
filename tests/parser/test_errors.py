"""Every error names ``path:line:col`` and what was expected, pointing at the offending token.

The cases live in ``hdlp_cases.INVALID``, written from the spec: each one
says where the error must point (1-based line and column, counted in
characters) and a piece of the message. They run on both twins.
"""

from __future__ import annotations

import pytest

from tests.parser.hdlp_cases import FULL, INVALID, Case, variant
from bitong.parser import ParseError, parse, parse_bytes, parse_file
from bitong.parser._backend import Backend


def _parse(case: Case, backend: Backend) -> ParseError:
    """Parse an invalid case and return its error (failing if it parses)."""
    with pytest.raises(ParseError) as info:
        if isinstance(case.text, bytes):
            parse_bytes(case.text, case.path, backend=backend)
        else:
            parse(case.text, case.path, backend=backend)
    return info.value


@pytest.mark.parametrize("case", INVALID, ids=[c.id for c in INVALID])
def test_error_points_at_the_offending_token(case: Case, backend: Backend) -> None:
    err = _parse(case, backend)
    assert (err.line, err.column) == (case.line, case.column), str(err)
    assert str(err) == f"{case.path}:{case.line}:{case.column}: {err.message}"
    assert case.expect.lower() in err.message.lower(), str(err)


@pytest.mark.parametrize("case", INVALID, ids=[c.id for c in INVALID])
def test_error_says_what_was_expected(case: Case, backend: Backend) -> None:
    """Each message names what would have been right, not only what is wrong."""
    message = _parse(case, backend).message.lower()
    assert any(word in message for word in ("expected", "must", "needs", "did you mean", "write")), message


def test_error_ids_are_unique() -> None:
    ids = [c.id for c in INVALID]
    assert len(ids) == len(set(ids))


def test_base_of_the_cases_is_valid(backend: Backend) -> None:
    """The invalid cases are single edits of FULL, so FULL itself must parse."""
    tool = parse(variant(), "demo.hdlp", backend=backend)
    assert tool.name == "demo-tool" and len(FULL) == 20


def test_only_parse_error_escapes(backend: Backend) -> None:
    """A caller catches ParseError and nothing else (it is a ValueError, for callers that catch those)."""
    assert issubclass(ParseError, ValueError)
    for case in INVALID:
        try:
            if isinstance(case.text, bytes):
                parse_bytes(case.text, case.path, backend=backend)
            else:
                parse(case.text, case.path, backend=backend)
        except ParseError:
            pass


def test_missing_fields_are_all_named(backend: Backend) -> None:
    err = _parse(Case("none", "x-only: 1\n", 1, 1, ""), backend)
    for field in ("name", "display", "intent", "method", "executor", "params_schema",
                  "constraints", "author", "created", "why"):
        assert field in err.message


def test_unreadable_file_is_a_parse_error(tmp_path, backend: Backend) -> None:
    missing = tmp_path / "nope" / "TOOL.hdlp"
    with pytest.raises(ParseError) as info:
        parse_file(missing, backend=backend)
    assert (info.value.line, info.value.column) == (1, 1)
    assert str(info.value).startswith(f"{missing}:1:1: ")


def test_parse_file_names_the_path(tmp_path, backend: Backend) -> None:
    folder = tmp_path / "demo-tool"
    folder.mkdir()
    path = folder / "TOOL.hdlp"
    path.write_text(variant({16: "  timeout_ms: soon"}), encoding="utf-8")
    with pytest.raises(ParseError) as info:
        parse_file(path, backend=backend)
    assert str(info.value).startswith(f"{path}:16:15: ")


def test_error_is_picklable() -> None:
    """Errors cross process boundaries (a worker pool may parse)."""
    import pickle

    err = ParseError("a/TOOL.hdlp", 3, 7, "expected x")
    back = pickle.loads(pickle.dumps(err))
    assert (back.path, back.line, back.column, back.message, str(back)) == (
        err.path, err.line, err.column, err.message, str(err))


def test_columns_count_characters_not_bytes(backend: Backend) -> None:
    """Columns are in characters: CJK text before the fault does not shift it by bytes."""
    line = '  path: { type: string, description: "路径", required: 是 }'
    err = _parse(Case("cjk", variant({10: line}), 10, 0, ""), backend)
    assert err.column == line.index("是") + 1


def test_columns_ignore_the_bom(backend: Backend) -> None:
    data = b"\xef\xbb\xbf" + b"name demo\n"
    with pytest.raises(ParseError) as info:
        parse_bytes(data, "demo.hdlp", backend=backend)
    assert (info.value.line, info.value.column) == (1, 6)


def test_crlf_does_not_shift_positions(backend: Backend) -> None:
    text = variant({16: "  timeout_ms: soon"}).replace("\n", "\r\n")
    err = _parse(Case("crlf", text, 16, 15, ""), backend)
    assert (err.line, err.column) == (16, 15)
