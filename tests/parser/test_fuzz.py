"""Fuzz: nothing but a ParseError leaves the parser, nothing but a LoadError the registry.

Bounded (a fixed number of examples, a per-example deadline) so it stays a few
seconds in CI. The texts are valid tool files with one line replaced or
inserted by hypothesis, plus raw bytes, so that most examples get past the
first lines and reach the builder, the pattern engine and the proto.
"""

from __future__ import annotations

import os
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bitong.agent.registry.snapshot import Registry
from tests.parser.hdlp_cases import FULL
from bitong.parser import ParseError, parse_bytes
from bitong.parser._backend import backends

FUZZ = settings(max_examples=300, deadline=2000, derandomize=True, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])

_ATOMS = st.sampled_from([
    "retry: ", "timeout_ms: ", "pattern: ", "default: ", "  x: { type: string, pattern: ", "[", "]", "{", "}",
    "'", '"', "\\", "|", ">", ":", ",", "#", " ", "  ", "\t", "\n", "\r", "\ufeff", "\0", "a{99999999999}",
    "(" * 50, ")" * 50, "(?=", "\\1", "4294967296", "-9223372036854775809", "1e999", "9" * 45, "中文", "😀",
    "\\uD83D", "HLDP://x", "x-", "- ", "true", "null", "^(a+)+$",
])
_LINE = st.lists(st.one_of(_ATOMS, st.text(max_size=12)), max_size=12).map("".join)


# Whole entries with the values that once escaped as other exceptions: they
# must be reachable often, not one random line in millions.
_HAZARDS = st.sampled_from(["4294967296", "2147483648", "9223372036854775808", "-1", "1e999", "0",
                            "[" * 40 + "]" * 40, "{ a: " * 40 + "1" + " }" * 40, "'" + "a" * 28 + "!'"])
_PATTERNS = st.sampled_from(["'a{99999999999}'", "'" + "(" * 5000 + ")" * 5000 + "'", "'^(a+)+$'", "'(?=a)'",
                             r"'(a)\1'", r"'\bx'", r"'[\W]'", "'('", "'a{1001}'", r"'^\d+$'", "'[]'"])
_TOP = st.sampled_from(["retry", "version", "x-a", "trigger_keywords", "non_goals"])
_PARAM = st.tuples(st.sampled_from(["string", "integer", "array", "object"]), _PATTERNS, _HAZARDS).map(
    lambda t: f"  z: {{ type: {t[0]}, pattern: {t[1]}, default: {t[2]} }}")


@st.composite
def mutated(draw: st.DrawFn) -> bytes:
    """A valid file with lines replaced or inserted, or plain random bytes."""
    if draw(st.integers(0, 9)) == 0:
        return draw(st.binary(max_size=400))
    lines = list(FULL)
    if draw(st.booleans()):
        lines.insert(9, draw(_PARAM))  # right under params_schema:
    if draw(st.booleans()):
        lines.insert(len(lines), f"{draw(_TOP)}: {draw(_HAZARDS)}")
    if draw(st.booleans()):
        return "\n".join(lines).encode("utf-8")
    for _ in range(draw(st.integers(1, 3))):
        at = draw(st.integers(0, len(lines)))
        line = draw(_LINE)
        if draw(st.booleans()) and at < len(lines):
            lines[at] = line
        else:
            lines.insert(at, line)
    return "\n".join(lines).encode("utf-8", "surrogatepass")


@FUZZ
@given(mutated())
def test_the_parser_raises_nothing_but_parse_errors(data: bytes) -> None:
    outcomes = []
    for backend in backends():
        try:
            tool = parse_bytes(data, "fuzz.hdlp", backend=backend)
        except ParseError as err:
            assert err.line >= 1 and err.column >= 1
            outcomes.append(("error", str(err)))
        else:
            outcomes.append(("ok", tool.SerializeToString(deterministic=True)))
    assert len(set(outcomes)) == 1, outcomes  # and the twins agree


@FUZZ
@given(st.lists(mutated(), min_size=1, max_size=3))
def test_the_registry_turns_every_file_into_a_tool_or_a_load_error(tmp_path_factory, files: list[bytes]) -> None:
    root = tmp_path_factory.mktemp("fuzz")
    for i, data in enumerate(files):
        os.makedirs(root / f"t{i}")
        (root / f"t{i}" / "TOOL.hdlp").write_bytes(data)
    (root / "bundled").mkdir()
    (root / "bundled" / "TOOL.hdlp").write_bytes(Path(__file__).parents[2].joinpath("tools", "git-ops", "TOOL.hdlp")
                                                 .read_bytes().replace(b"name: git-ops", b"name: bundled"))
    snap = Registry([str(root)]).rescan()
    assert "bundled" in snap.tools  # the others never cost a good tool
    seen = {t.source_path for t in snap.tools.values()} | {e.path for e in snap.errors}
    assert all(str(root / f"t{i}" / "TOOL.hdlp") in seen for i in range(len(files)))
