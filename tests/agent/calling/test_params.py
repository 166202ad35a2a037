"""bitong.agent.calling.params: validation, coercion and normalization against params_schema."""

from __future__ import annotations

import os

import pytest
from google.protobuf.struct_pb2 import Struct

from bitong.agent.calling import params
from bitong.agent.calling.numerals import parse_number
from bitong.agent.calling.params import ParamError, validate
from bitong.v1.agent_pb2 import ToolDef
from bitong.parser import parse

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


# ---------------------------------------------------------------- never raises (issue part 4)

import math  # noqa: E402

from hypothesis import HealthCheck, given, settings, strategies as st  # noqa: E402

settings.register_profile("mutation", max_examples=60, deadline=None)
settings.register_profile("default", max_examples=300, deadline=None,
                          suppress_health_check=[HealthCheck.too_slow])
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "default"))

_WORDS = st.sampled_from(["20", "二十分钟", "一" * 50, "亿" * 41, "9" * 400 + "天", "1e400天", "半", "个半小时",
                          "in ", " later", "PT1H", "p" * 30, "是", "~", "~nobody/x", "/tmp/x", "\x00", "7" * 5000,
                          "[1, 2]", '{"a": 1e999}', "NaN", "Infinity", "一点五", "两千五百万亿"])
_TEXT = st.one_of(st.text(max_size=60), _WORDS, st.lists(_WORDS, max_size=4).map("".join))
_SCALARS = st.one_of(st.none(), st.booleans(), st.integers(), st.integers(min_value=10**300, max_value=10**400),
                     st.floats(allow_nan=True, allow_infinity=True), _TEXT)
JSON = st.recursive(_SCALARS, lambda inner: st.one_of(st.lists(inner, max_size=4),
                                                    st.dictionaries(_TEXT, inner, max_size=4)), max_leaves=12)

EVERYTHING = tool(
    "s: { type: string, normalize: [trim, lower], min: 1, max: 30, enum: [a, b, \"1\"] }",
    "p: { type: string, normalize: [trim, path] }",
    "i: { type: integer, min: -5, max: 1000 }",
    "n: { type: number, min: 0 }",
    "b: { type: boolean, normalize: [boolean] }",
    "m: { type: integer, normalize: [duration_minutes] }",
    "d: { type: number, normalize: [duration_days], max: 36500 }",
    "a: { type: array, min: 1, max: 3 }",
    "o: { type: object }",
    "u: { type: string, normalize: [upper], pattern: \"^[A-Z]+$\" }",
)


@given(st.dictionaries(st.sampled_from(["s", "p", "i", "n", "b", "m", "d", "a", "o", "u", "zz", "\n"]), JSON,
                       max_size=8))
def test_validate_never_raises_for_any_json_values(given_params: dict) -> None:
    got = validate(EVERYTHING, given_params)
    for problem in got.errors:
        assert problem.param in given_params and problem.message
    for name, value in got.params.items():   # what passes is of the declared type and finite
        kind = EVERYTHING.params_schema[name].type
        assert isinstance(value, {"string": str, "integer": int, "number": float, "boolean": bool,
                                  "array": list, "object": dict}[kind])
        if kind == "number":
            assert math.isfinite(value)


@pytest.mark.parametrize("spec, value, words", [
    ("{ type: integer }", "7" * 5000, "got one with 5000 digits (at most 4000)"),
    ("{ type: integer }", "-" + "7" * 4001, "got one with 4001 digits"),
    ("{ type: number }", float("nan"), "expected a finite number; got NaN"),
    ("{ type: number }", 10 ** 400, "expected a finite number; got 1000"),
    ("{ type: number }", 10 ** 5000, "expected a finite number; got <an integer of about 5001 digits>"),
    ("{ type: number }", float("-inf"), "expected a finite number; got -Infinity"),
    ("{ type: integer, normalize: [duration_days] }", "9" * 400 + "天", "which is too large"),
    ("{ type: integer, normalize: [duration_days] }", float("nan"), "expected a finite duration in days"),
    ("{ type: integer, normalize: [duration_minutes] }", 10 ** 400, "expected a finite duration in minutes"),
    ("{ type: integer, normalize: [duration_minutes] }", "一" * 41 + "分钟", "expected a duration in minutes"),
    ("{ type: string }", 10 ** 5000, "expected text; got the number <an integer of about 5001 digits>"),
], ids=lambda v: "a-huge-int" if isinstance(v, int) and v > 10 ** 300 else None)
def test_values_past_pythons_limits_are_errors_in_words(spec: str, value: object, words: str) -> None:
    assert words in error(spec, value)


def test_integer_text_at_the_digit_limit_is_read() -> None:
    assert one("{ type: integer }", "7" * 4000) == int("7" * 4000)
    assert one("{ type: string }", 12345) == "12345"


def test_parse_duration_is_linear_in_its_text() -> None:
    """Stripping 'in ' one copy at a time was quadratic (minutes for 200,000 of them); now about a second."""
    import time

    text = "in " * 200_000 + "5 days"
    t0 = time.perf_counter()
    assert params.parse_duration(text, params.DAY_UNITS) == 5
    assert params.parse_duration("一" * 100_000 + "天", params.DAY_UNITS) is None
    assert time.perf_counter() - t0 < 10.0


# ---------------------------------------------------------------- mutation-testing survivors (issue part 7)


@pytest.mark.parametrize("rule", ["duration_minutes", "duration_days"])
def test_booleans_are_refused_as_durations(rule: str) -> None:
    msg = error(f"{{ type: integer, normalize: [{rule}] }}", True)
    assert msg.startswith("expected a duration in") and msg.endswith("got the boolean true")
    assert error(f"{{ type: integer, normalize: [{rule}] }}", False).endswith("got the boolean false")


def test_infinity_is_refused_for_number() -> None:
    assert error("{ type: number }", float("inf")) == "expected a finite number; got Infinity"
    assert error("{ type: number }", "1e999") == 'expected a number (e.g. 1.5); got the text "1e999"'
    assert error("{ type: number }", True) == "expected a number (e.g. 1.5); got the boolean true"


def test_whole_floats_inside_objects_and_lists_become_ints_at_every_depth() -> None:
    got = one("{ type: object }", {"a": {"b": [2.0, {"c": 3.0}]}, "d": 0.5, "e": "4.0"})
    assert got == {"a": {"b": [2, {"c": 3}]}, "d": 0.5, "e": "4.0"}
    assert type(got["a"]["b"][0]) is int and type(got["a"]["b"][1]["c"]) is int and type(got["d"]) is float
    assert one("{ type: array }", [1.0, [2.0, "x"], {"k": 5.0}]) == [1, [2, "x"], {"k": 5}]


@pytest.mark.parametrize("word", sorted(params.TRUE_WORDS))
def test_every_yes_word_is_true(word: str) -> None:
    assert one("{ type: boolean }", word) is True
    assert one("{ type: boolean }", f" {word.upper()} ") is True


@pytest.mark.parametrize("word", sorted(params.FALSE_WORDS))
def test_every_no_word_is_false(word: str) -> None:
    assert one("{ type: boolean }", word) is False


def test_the_yes_and_no_words_are_the_documented_ones() -> None:
    assert params.TRUE_WORDS == {"true", "yes", "y", "on", "1", "t", "是", "是的", "对", "對", "真", "开", "開",
                                 "开启", "要", "好"}
    assert params.FALSE_WORDS == {"false", "no", "n", "off", "0", "f", "否", "不", "不是", "错", "錯", "假", "关",
                                  "關", "关闭", "關閉", "不要"}
    assert "2" not in params.TRUE_WORDS | params.FALSE_WORDS
