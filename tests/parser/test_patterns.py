"""Patterns run in linear time, and what cannot is refused at load with its name.

Also the other values that used to escape as something other than a
ParseError: an int32 overflow in ``retry``, values nested thousands deep.
"""

from __future__ import annotations

import time

import pytest

from bitong.agent.calling.params import validate
from tests.parser.hdlp_cases import make
from bitong.parser import ParseError, parse, patterns
from bitong.parser._backend import Backend

# 26 'a's then '!' against ^(a+)+$: the stdlib's backtracking takes seconds
# (it doubles with each 'a'; 28 took 80-115 s to load); RE2 takes microseconds.
EVIL = "^(a+)+$"
EVIL_TEXT = "a" * 26 + "!"


def schema_file(spec: str) -> str:
    return make(params_schema=f"params_schema:\n  x: {spec}")


def test_a_catastrophic_pattern_loads_and_refuses_its_default_at_once(backend: Backend) -> None:
    text = schema_file(f"{{ type: string, pattern: '{EVIL}', default: '{EVIL_TEXT}' }}")
    start = time.perf_counter()
    with pytest.raises(ParseError) as err:
        parse(text, "evil.hdlp", backend=backend)
    assert time.perf_counter() - start < 0.5
    assert err.value.line == 7 and "does not match its pattern" in err.value.message


def test_a_catastrophic_pattern_checks_a_call_at_once() -> None:
    tool = parse(schema_file(f"{{ type: string, pattern: '{EVIL}' }}"))
    start = time.perf_counter()
    got = validate(tool, {"x": EVIL_TEXT})
    assert time.perf_counter() - start < 0.5
    assert [e.param for e in got.errors] == ["x"] and "matching the pattern" in got.errors[0].message
    assert validate(tool, {"x": "aaaa"}).errors == []


@pytest.mark.parametrize("pattern, named", [
    ("'a(?=b)'", "lookahead"),
    ("'(?<!x)a'", "negative lookbehind"),
    (r"'(a)\1'", r"backreference '\1'"),
    ("'(?P<q>a)(?P=q)'", "backreference '(?P=name)'"),
    ("'(?>ab)'", "atomic group"),
    (r"'\bword\b'", "word boundary"),
    (r"'[\W]'", r"'\W' inside [...]"),
    ("'a{99999999999}'", "OverflowError"),
    ("'a{1001}'", "RE2: invalid repetition size"),
    ("'" + "(" * 40 + "a" + ")" * 40 + "'", "nested deeper than 32"),
    ("'" + "a" * 1001 + "'", "at most 1000"),
    ("'('", "not a valid regular expression"),
], ids=lambda v: v[:24])
def test_what_the_linear_engine_cannot_run_is_refused_at_the_pattern(backend: Backend, pattern: str, named: str) -> None:
    line = f"  x: {{ type: string, pattern: {pattern} }}"
    with pytest.raises(ParseError) as err:
        parse(make(params_schema="params_schema:\n" + line), "p.hdlp", backend=backend)
    assert (err.value.line, err.value.column) == (7, line.index(pattern) + 1)
    assert "pattern of parameter 'x' is refused" in err.value.message and named in err.value.message


def test_five_thousand_nested_groups_are_a_parse_error_not_a_recursion_error(backend: Backend) -> None:
    deep = "(" * 5000 + ")" * 5000
    with pytest.raises(ParseError, match="pattern of parameter 'x' is refused"):
        parse(schema_file(f"{{ type: string, pattern: '{deep}' }}"), "p.hdlp", backend=backend)
    with pytest.raises(patterns.PatternError, match="nested deeper"):
        patterns._translate(deep)  # the depth limit holds without the length limit too


@pytest.mark.parametrize("pattern, text, found", [
    (r"^\d+$", "١٢٣", True),          # Unicode digits, as Python's \d
    (r"^[\w-]+$", "中文-x_1", True),   # \w inside a class, Unicode
    (r"^\w+$", "中文", True),
    (r"\s", "a\u3000b", True),         # ideographic space is whitespace
    (r"^\S+$", "a\u3000b", False),
    (r"^\D+$", "abc", True),
    (r"^\d+\Z", "12", True),           # \Z is the end of the text
    (r"^https?://", "https://x", True),
    (r"^\d+$", "123\n", False),        # the one kept difference: $ is the end of the text
])
def test_translated_classes_keep_pythons_unicode_meaning(pattern: str, text: str, found: bool) -> None:
    assert patterns.search(pattern, text) is found


def test_retry_beyond_int32_is_a_parse_error(backend: Backend) -> None:
    with pytest.raises(ParseError) as err:
        parse(make("retry: 4294967296"), "r.hdlp", backend=backend)
    assert err.value.line == 11 and "retry must be at most 2147483647" in err.value.message
    assert parse(make("retry: 2147483647"), "r.hdlp", backend=backend).retry == 2147483647


@pytest.mark.parametrize("value", ["[" * 5000 + "]" * 5000, "{ a: " * 40 + "1" + " }" * 40], ids=["lists", "maps"])
def test_deep_nesting_is_refused_with_a_message(backend: Backend, value: str) -> None:
    for text in (make(f"x-deep: {value}"), schema_file(f"{{ type: object, default: {{ k: {value} }} }}")):
        with pytest.raises(ParseError, match="nested deeper than 32 levels"):
            parse(text, "d.hdlp", backend=backend)
    ok = "[" * 30 + "]" * 30  # 32 levels with the file and x-ok: the limit itself is allowed
    assert parse(make(f"x-ok: {ok}"), "d.hdlp", backend=backend).name
