"""agent.params: validation, coercion and normalization against params_schema."""

from __future__ import annotations

import os

import pytest
from google.protobuf.struct_pb2 import Struct

from agent import params
from agent.numerals import parse_number
from agent.params import ParamError, validate
from bitong.v1.agent_pb2 import ToolDef
from parser import parse

TEMPLATE = """\
name: ptool
display: P
intent: a tool to test parameters
method: run
executor: shell
command: echo
params_schema:
{schema}
constraints: {{ timeout_ms: 1000 }}
author: test-suite
created: 2026-01-01
why: tests
"""


def tool(*lines: str) -> ToolDef:
    """A ToolDef whose params_schema is the given lines (each `name: { ... }`)."""
    return parse(TEMPLATE.format(schema="\n".join("  " + line for line in lines)))


def one(spec: str, value: object) -> object:
    """Validate a single parameter `x` with `spec`; return its value, failing on any error."""
    got = validate(tool(f"x: {spec}"), {"x": value})
    assert got.errors == [], got.errors
    return got.params["x"]


def error(spec: str, value: object) -> str:
    """The single error message for parameter `x`."""
    got = validate(tool(f"x: {spec}"), {"x": value})
    assert [e.param for e in got.errors] == ["x"], got.errors
    return got.errors[0].message


# ---------------------------------------------------------------- coercion


@pytest.mark.parametrize("value, want", [(20, 20), (20.0, 20), ("20", 20), (" 20 ", 20), ("-3", -3),
                                         ("20.0", 20), ("1e3", 1000)])
def test_integer_coercion(value: object, want: int) -> None:
    got = one("{ type: integer }", value)
    assert got == want and type(got) is int


@pytest.mark.parametrize("value", [20.5, "20.5", "abc", True, [1], "", float("inf")])
def test_integer_refuses(value: object) -> None:
    msg = error("{ type: integer }", value)
    assert "expected an integer" in msg


@pytest.mark.parametrize("value, want", [("1.5", 1.5), (1.5, 1.5), (2, 2.0), ("-0.25", -0.25), (".5", 0.5)])
def test_number_coercion(value: object, want: float) -> None:
    got = one("{ type: number }", value)
    assert got == want and type(got) is float


@pytest.mark.parametrize("value", ["1.5x", "nan", False, {}])
def test_number_refuses(value: object) -> None:
    assert "expected a" in error("{ type: number }", value)


@pytest.mark.parametrize("value, want", [
    (True, True), (False, False), ("true", True), ("false", False), ("是", True), ("否", False),
    ("yes", True), ("no", False), ("1", True), ("0", False), (1.0, True), (0.0, False), (" YES ", True),
])
def test_boolean_coercion(value: object, want: bool) -> None:
    assert one("{ type: boolean }", value) is want


def test_boolean_refuses() -> None:
    msg = error("{ type: boolean }", "maybe")
    assert "expected true or false" in msg and "是/否" in msg
    assert "expected true or false" in error("{ type: boolean }", 2.0)


def test_string_accepts_numbers_as_their_text() -> None:
    # A Struct makes an id like 42 into 42.0; the text must still be "42".
    assert one("{ type: string }", 42.0) == "42"
    assert one("{ type: string }", 1.5) == "1.5"
    assert "expected text" in error("{ type: string }", True)
    assert "expected text" in error("{ type: string }", ["a"])


def test_array_and_object_take_json_text() -> None:
    assert one("{ type: array }", ["a", 1.0]) == ["a", 1]
    assert one("{ type: array }", '["a", 2]') == ["a", 2]
    assert one("{ type: object }", {"n": 3.0, "v": [1.0, 1.5]}) == {"n": 3, "v": [1, 1.5]}
    assert one("{ type: object }", '{"k": "v"}') == {"k": "v"}
    assert "expected a list" in error("{ type: array }", "a, b")
    assert "expected a list" in error("{ type: array }", '{"k": 1}')
    assert "expected an object" in error("{ type: object }", "[1]")


def test_struct_input_is_accepted_as_is() -> None:
    s = Struct()
    s.update({"n": 20, "flag": "是", "tags": ["a", "b"]})
    got = validate(tool("n: { type: integer }", "flag: { type: boolean }", "tags: { type: array }"), s)
    assert got.errors == []
    assert got.params == {"n": 20, "flag": True, "tags": ["a", "b"]}
    assert type(got.params["n"]) is int


# ---------------------------------------------------------------- presence, defaults, unknown


def test_defaults_applied_and_absent_optionals_left_out() -> None:
    t = tool("n: { type: integer, default: 3 }", "mode: { type: string, default: fast }",
             "opt: { type: string }", "flag: { type: boolean, default: false }")
    got = validate(t, {})
    assert got.errors == []
    assert got.params == {"n": 3, "mode": "fast", "flag": False}
    assert type(got.params["n"]) is int
    # JSON null is the same as absent.
    assert validate(t, {"n": None, "opt": None}).params == {"n": 3, "mode": "fast", "flag": False}


def test_every_problem_is_reported_each_naming_its_parameter() -> None:
    t = tool("repo: { type: string, required: true, description: 仓库路径 }",
             "n: { type: integer, required: true }",
             "flag: { type: boolean }",
             "limit: { type: integer, min: 1, max: 100 }")
    got = validate(t, {"n": "twenty", "flag": "maybe", "limit": 500, "lmit": 5, "extra": 1})
    by_name = {e.param: e.message for e in got.errors}
    assert list(by_name) == ["repo", "n", "flag", "limit", "extra", "lmit"]   # declared order, then unknown
    assert "required parameter is missing" in by_name["repo"] and "仓库路径" in by_name["repo"]
    assert "expected an integer" in by_name["n"] and '"twenty"' in by_name["n"]
    assert "expected true or false" in by_name["flag"]
    assert "between 1 and 100" in by_name["limit"] and "500" in by_name["limit"]
    assert "unknown parameter" in by_name["lmit"] and "did you mean 'limit'" in by_name["lmit"]
    assert "this tool takes repo, n, flag, limit" in by_name["extra"]
    assert all(isinstance(e, ParamError) for e in got.errors)
    assert str(got.errors[0]).startswith("repo: ")
    assert not got.ok


def test_a_tool_without_parameters_refuses_any() -> None:
    got = validate(parse(TEMPLATE.format(schema="").replace("params_schema:\n", "params_schema: {}\n")), {"x": 1})
    assert got.errors == [ParamError("x", "unknown parameter: this tool takes no parameters")]


def test_a_broken_default_is_blamed_on_the_definition() -> None:
    # The parser refuses such a default; a ToolDef built another way may still carry one.
    t = tool("n: { type: integer, default: 500 }")
    t.params_schema["n"].max = 100
    got = validate(t, {})
    assert "the tool's default is invalid" in got.errors[0].message
    assert "at most 100" in got.errors[0].message


# ---------------------------------------------------------------- constraints


def test_enum_is_type_aware_and_hints() -> None:
    spec = '{ type: string, enum: [main, dev, "release-1"] }'
    assert one(spec, "dev") == "dev"
    msg = error(spec, "Main")
    assert 'expected one of "main", "dev", "release-1"' in msg and 'did you mean "main"' in msg
    assert one("{ type: integer, enum: [1, 2, 3] }", "2") == 2
    assert "expected one of 1, 2, 3" in error("{ type: integer, enum: [1, 2, 3] }", 4)
    # true is not 1.
    assert "expected one of" in error("{ type: boolean, enum: [true] }", False)


def test_min_max_bound_values_and_lengths() -> None:
    assert one("{ type: number, min: 0.5, max: 2 }", "2") == 2.0
    assert "at least 0.5" in error("{ type: number, min: 0.5 }", 0.1)
    assert one("{ type: string, min: 2, max: 4 }", "abcd") == "abcd"
    assert "a length at most 4" in error("{ type: string, max: 4 }", "abcde")
    assert "a number of items at least 1" in error("{ type: array, min: 1 }", [])


def test_pattern_is_searched_like_json_schema() -> None:
    # Unanchored: it must occur somewhere; anchors make it whole.
    assert one('{ type: string, pattern: "[0-9]+" }', "v12") == "v12"
    assert one('{ type: string, pattern: "^[a-z-]+$" }', "git-ops") == "git-ops"
    msg = error('{ type: string, pattern: "^[a-z-]+$" }', "Git Ops")
    assert "matching the pattern '^[a-z-]+$'" in msg
    # The parser refuses a broken pattern; a ToolDef built another way is still handled.
    t = tool("x: { type: string }")
    t.params_schema["x"].pattern = "("
    assert "not a valid regular expression" in validate(t, {"x": "a"}).errors[0].message


# ---------------------------------------------------------------- normalization


def test_trim_lower_upper_run_in_order() -> None:
    assert one("{ type: string, normalize: [trim, lower] }", "  Main\t") == "main"
    assert one("{ type: string, normalize: [trim, upper] }", "\u3000abc ") == "ABC"
    assert one("{ type: integer, normalize: [trim] }", 20.0) == 20   # not text: passes through
    assert one('{ type: string, normalize: [trim], enum: [dev] }', " dev ") == "dev"


def test_path_expands_home_makes_absolute_and_refuses_nul(tmp_path: object) -> None:
    home = os.path.expanduser("~")
    assert one("{ type: string, normalize: [path] }", "~/notes/a.txt") == os.path.join(home, "notes", "a.txt")
    assert one("{ type: string, normalize: [path] }", "data/../x") == os.path.join(os.getcwd(), "x")
    assert one("{ type: string, normalize: [trim, path] }", " /tmp/a/ ") == "/tmp/a"
    assert "NUL" in error("{ type: string, normalize: [path] }", "/tmp/a\x00b")
    assert "expected a path" in error("{ type: string, normalize: [path] }", 5)


@pytest.mark.parametrize("said, minutes", [
    ("二十分钟", 20), ("20 min", 20), ("1.5h", 90), ("半小时", 30), ("一个半小时", 90), ("20", 20), (20.0, 20),
    ("两个小时", 120), ("一小时二十分钟", 80), ("1h30m", 90), ("一刻钟", 15), ("20分钟后", 20),
    ("in 45 minutes", 45), ("PT1H30M", 90), ("一点五小时", 90), ("2 hours", 120), ("两天", 2880),
])
def test_duration_minutes(said: object, minutes: int) -> None:
    got = one("{ type: integer, normalize: [duration_minutes] }", said)
    assert got == minutes and type(got) is int


def test_duration_minutes_keeps_fractions_so_integers_refuse_them() -> None:
    assert one("{ type: number, normalize: [duration_minutes] }", "90秒") == 1.5
    assert "not whole" in error("{ type: integer, normalize: [duration_minutes] }", "90 seconds")


@pytest.mark.parametrize("said, days", [
    ("三个月", 90), ("两周", 14), ("10 days", 10), ("一年", 365), ("半个月", 15), ("一周半", 11), ("3 months", 90),
    ("十天", 10), ("P14D", 14), ("一个季度", 90), ("两个星期", 14), (7.0, 7), ("半年", 183),
])
def test_duration_days(said: object, days: int) -> None:
    got = one("{ type: integer, normalize: [duration_days] }", said)
    assert got == days and type(got) is int


@pytest.mark.parametrize("rule, example", [("duration_minutes", "二十分钟"), ("duration_days", "三个月")])
def test_unreadable_durations_say_what_was_expected(rule: str, example: str) -> None:
    msg = error(f"{{ type: integer, normalize: [{rule}] }}", "soon-ish")
    assert msg.startswith("expected a duration in") and example in msg and '"soon-ish"' in msg


def test_boolean_normalization() -> None:
    assert one("{ type: boolean, normalize: [boolean] }", "是") is True
    assert one("{ type: boolean, normalize: [trim, boolean] }", " no ") is False
    assert "expected true or false" in error("{ type: boolean, normalize: [boolean] }", "也许")


def test_unknown_normalize_rule_is_a_definition_error() -> None:
    t = tool("x: { type: string }")   # the parser refuses it; a ToolDef built another way may not
    t.params_schema["x"].normalize.append("shout")
    msg = validate(t, {"x": "a"}).errors[0].message
    assert "unknown normalize rule 'shout'" in msg and "definition" in msg


@pytest.mark.parametrize("text, value", [
    ("二十", 20), ("十二", 12), ("一百零五", 105), ("两千五", 2500), ("一万二", 12000), ("三亿五千万", 350_000_000),
    ("二〇二六", 2026), ("一点五", 1.5), ("廿五", 25), ("壹佰贰拾", 120), ("1.5万", 15000), ("２０", 20), ("零", 0),
])
def test_chinese_numerals(text: str, value: float) -> None:
    assert parse_number(text) == value


@pytest.mark.parametrize("text", ["", "二十个", "abc", "二三十"])
def test_not_numerals(text: str) -> None:
    assert parse_number(text) is None


def test_public_surface() -> None:
    for name in params.__all__:
        assert hasattr(params, name), name
    assert set(params.NORMALIZERS) >= {"trim", "lower", "upper", "path", "duration_minutes", "duration_days",
                                       "boolean"}
