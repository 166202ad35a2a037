"""Call parameters: validate, coerce and normalize them against ``params_schema``.

A calling AI extracts parameters from what a person said, and gets them a
little wrong: numbers as text ("20"), "是" for true, "二十分钟" for 20, a path
with a stray space. This module turns what can be read without guessing into
the declared type, and reports everything else, every problem at once, each
naming its parameter and saying what was expected, so the AI can re-extract
(seed 002 §2.2: "不合法就反馈给AI让它重新提取").

Per parameter, in this order:

1. absent (missing or JSON null): an error if ``required``; else the
   ``default`` if the spec has one (run through steps 2-4 like a given
   value); else the parameter is left out of ``Validated.params``.
2. ``normalize`` rules, in the order written (see :data:`NORMALIZERS`).
3. coercion to ``type`` (see :func:`coerce`). Params arrive from a
   ``google.protobuf.Struct``, where every number is a float: an integer
   comes in as ``20.0`` and becomes ``20``; ``20.5`` is an error.
4. constraints: ``enum`` (type-aware: ``true`` never equals ``1``), ``min``
   and ``max`` (inclusive; the value for integer/number, the length in
   characters for string, the number of items for array), and ``pattern``
   for strings.

``pattern`` is searched for (unanchored, as JSON Schema's ``pattern`` is):
write ``^...$`` to match the whole value. It runs on RE2 in linear time
(``parser/patterns.py`` says which Python patterns are accepted and how).
Parameters the schema does not declare are errors.
"""

from __future__ import annotations

import dataclasses
import difflib
import json
import math
import os
import re
from typing import Any
from collections.abc import Callable, Mapping

from google.protobuf import json_format
from google.protobuf.struct_pb2 import Struct, Value

from bitong.v1.agent_pb2 import ParamSpec, ToolDef
from bitong.parser import patterns

from .numerals import scan_number

__all__ = ["ParamError", "Validated", "whole_numbers", "InvalidValue", "validate", "coerce", "normalize", "parse_duration",
           "NORMALIZERS", "TYPES"]

TYPES = ("string", "integer", "number", "boolean", "array", "object")


@dataclasses.dataclass(frozen=True)
class ParamError:
    """One problem with one parameter; ``message`` says what was expected."""

    param: str
    message: str

    def __str__(self) -> str:
        return f"{self.param}: {self.message}"


@dataclasses.dataclass
class Validated:
    """The outcome of :func:`validate`: coerced params, or every problem found."""

    params: dict[str, Any]
    errors: list[ParamError]

    @property
    def ok(self) -> bool:
        return not self.errors


class InvalidValue(ValueError):
    """A value that cannot become what the spec asks; the text says what was expected."""


# ---------------------------------------------------------------- validate


def validate(tool: ToolDef, raw: Mapping[str, Any] | Struct) -> Validated:
    """Check ``raw`` against ``tool.params_schema``; never raises for bad input.

    ``raw`` is a plain mapping (e.g. ``json_format.MessageToDict(struct)``)
    or the ``Struct`` itself. Parameters are checked in declaration order,
    unknown ones after, so the errors read in the order the tool lists them.
    """
    given: Mapping[str, Any] = json_format.MessageToDict(raw) if isinstance(raw, Struct) else raw
    schema = tool.params_schema
    # (Indexing a protobuf map with a missing key would add it: keep to known names.)
    order = [name for name in tool.param_order if name in schema] or sorted(schema)
    if len(order) < len(schema):   # (a served Call pays for every pass over the protobuf map: skip the usual no-op)
        order += sorted(name for name in schema if name not in order)
    params: dict[str, Any] = {}
    errors: list[ParamError] = []

    for name in order:
        spec = schema[name]
        value = given.get(name)
        from_default = False
        if value is None:
            if spec.required:
                errors.append(ParamError(name, f"required parameter is missing: expected {_expected(spec)}"))
                continue
            if not spec.HasField("default"):
                continue
            value = _from_value(spec.default)
            from_default = True
        try:
            params[name] = _check(spec, value)
        except InvalidValue as exc:
            text = str(exc)
            if from_default:
                text = f"the tool's default is invalid ({text}); the tool definition needs fixing"
            errors.append(ParamError(name, text))

    unknown = [k for k in given if k not in schema]
    for name in sorted(unknown):
        known = ", ".join(order) if order else "no parameters"
        close = difflib.get_close_matches(name, order, n=1)
        hint = f"; did you mean '{close[0]}'?" if close else ""
        errors.append(ParamError(name, f"unknown parameter: this tool takes {known}{hint}"))

    return Validated(params, errors)


def _check(spec: ParamSpec, value: Any) -> Any:
    """Normalize, coerce and constrain one present value; raises InvalidValue."""
    for rule in spec.normalize:
        value = normalize(rule, value)
    value = coerce(spec.type, value)
    _constrain(spec, value)
    return value


def _expected(spec: ParamSpec) -> str:
    """The expectation in words, for a missing parameter."""
    what = _TYPE_WORDS.get(spec.type, spec.type or "a value")
    if spec.enum:
        what += " (one of " + ", ".join(_show(_from_value(v)) for v in spec.enum) + ")"
    if spec.description:
        what += f": {spec.description}"
    return what


_TYPE_WORDS = {
    "string": "text",
    "integer": "an integer",
    "number": "a number",
    "boolean": "true or false",
    "array": "a list",
    "object": "an object",
}


def _constrain(spec: ParamSpec, value: Any) -> None:
    """enum, min/max and pattern, on the coerced value."""
    if spec.enum:
        allowed = [_from_value(v) for v in spec.enum]
        if not any(_same(value, a) for a in allowed):
            shown = ", ".join(_show(a) for a in allowed)
            hint = ""
            if isinstance(value, str):
                text = [a for a in allowed if isinstance(a, str)]
                folded = [a for a in text if a.casefold() == value.casefold()]
                close = folded or difflib.get_close_matches(value, text, n=1)
                if close:
                    hint = f"; did you mean {_show(close[0])}?"
            raise InvalidValue(f"expected one of {shown}; got {_show(value)}{hint}")
    if spec.HasField("min") or spec.HasField("max"):
        if spec.type in ("integer", "number"):
            size, what = value, "a value"
        elif spec.type in ("string", "array"):
            size, what = len(value), ("a length" if spec.type == "string" else "a number of items")
        else:
            size, what = None, ""
        if size is not None:
            lo = _tidy(spec.min) if spec.HasField("min") else None
            hi = _tidy(spec.max) if spec.HasField("max") else None
            if (lo is not None and size < lo) or (hi is not None and size > hi):
                bounds = (f"between {lo} and {hi}" if lo is not None and hi is not None
                          else f"at least {lo}" if lo is not None else f"at most {hi}")
                got = _show(value) if what == "a value" else f"{size} ({_show(value)})"
                raise InvalidValue(f"expected {what} {bounds}; got {got}")
    if spec.pattern and isinstance(value, str):
        try:
            rx = patterns.compiled(spec.pattern)  # RE2: linear time, so no value can stall the calls
        except patterns.PatternError as exc:
            raise InvalidValue(f"the tool's pattern {spec.pattern!r} is refused ({exc}); "
                               "the tool definition needs fixing") from None
        if rx.search(value) is None:
            raise InvalidValue(f"expected text matching the pattern {spec.pattern!r}; got {_show(value)}")


def _same(a: Any, b: Any) -> bool:
    """Equality that keeps booleans apart from numbers (True == 1 in Python)."""
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    return bool(a == b)


# ---------------------------------------------------------------- coercion

_INT_TEXT = re.compile(r"[+-]?\d+")
_MAX_INT_DIGITS = 4000   # below sys.get_int_max_str_digits()'s default 4300, so int(text) cannot refuse
_FLOAT_TEXT = re.compile(r"[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?")

TRUE_WORDS = frozenset({"true", "yes", "y", "on", "1", "t", "是", "是的", "对", "對", "真", "开", "開", "开启", "要",
                        "好"})
FALSE_WORDS = frozenset({"false", "no", "n", "off", "0", "f", "否", "不", "不是", "错", "錯", "假", "关", "關",
                         "关闭", "關閉", "不要"})


def coerce(type_: str, value: Any) -> Any:
    """``value`` as ``type_``, converting only what reads without guessing; raises :class:`InvalidValue`.

    * integer: ints, whole floats (20.0), integer text ("20", " 20 ", "20.0", "1e3");
    * number: ints and floats (returned as float), numeric text ("1.5");
    * boolean: booleans, 1/0, and the words in TRUE_WORDS/FALSE_WORDS (是/否, yes/no, ...);
    * string: text; a number becomes its decimal text (20.0 -> "20"), since the
      Struct carried it as a float; a boolean, list or object is an error;
    * array/object: a list/dict, or its JSON text. Whole floats inside become ints.
    """
    if type_ == "string":
        if isinstance(value, str):
            return value
        if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() <= 1024:
            return str(value)   # (a longer int may have no decimal text: Python's int-to-text limit)
        if isinstance(value, float) and math.isfinite(value):
            return str(_tidy(value))
        raise InvalidValue(f"expected text; got {_kind(value)} {_show(value)}")
    if type_ == "integer":
        if isinstance(value, bool):
            raise InvalidValue(f"expected an integer (e.g. 20); got the boolean {_show(value)}")
        if isinstance(value, int):
            return value
        if isinstance(value, float):
            if math.isfinite(value) and value.is_integer():
                return int(value)
            raise InvalidValue(f"expected an integer (e.g. 20); got {_show(value)}, which is not whole")
        if isinstance(value, str):
            text = value.strip()
            if _INT_TEXT.fullmatch(text):
                if len(text.lstrip("+-")) > _MAX_INT_DIGITS:   # Python's int-from-text limit: say so, never raise
                    raise InvalidValue(f"expected an integer (e.g. 20); got one with {len(text.lstrip('+-'))} "
                                       f"digits (at most {_MAX_INT_DIGITS})")
                return int(text)
            if _FLOAT_TEXT.fullmatch(text):
                number = float(text)
                if math.isfinite(number) and number.is_integer():
                    return int(number)
                raise InvalidValue(f"expected an integer (e.g. 20); got {_show(value)}, which is not whole")
        raise InvalidValue(f"expected an integer (e.g. 20); got {_kind(value)} {_show(value)}")
    if type_ == "number":
        if isinstance(value, bool):
            raise InvalidValue(f"expected a number (e.g. 1.5); got the boolean {_show(value)}")
        if isinstance(value, (int, float)):
            finite = _finite(value)
            if finite is None:
                raise InvalidValue(f"expected a finite number; got {_show(value)}")
            return finite
        if isinstance(value, str) and _FLOAT_TEXT.fullmatch(value.strip()):
            number = float(value.strip())
            if math.isfinite(number):
                return number
        raise InvalidValue(f"expected a number (e.g. 1.5); got {_kind(value)} {_show(value)}")
    if type_ == "boolean":
        return _boolean(value)
    if type_ in ("array", "object"):
        want: type = list if type_ == "array" else dict
        words = "a list (or its JSON text, e.g. [\"a\", \"b\"])" if type_ == "array" else \
            "an object (or its JSON text, e.g. {\"key\": \"value\"})"
        if isinstance(value, tuple):
            value = list(value)
        if isinstance(value, str):
            try:
                value = json.loads(value)
            except ValueError:
                raise InvalidValue(f"expected {words}; got text that is not JSON: {_show(value)}") from None
        if isinstance(value, want):
            return whole_numbers(value)
        raise InvalidValue(f"expected {words}; got {_kind(value)} {_show(value)}")
    raise InvalidValue(f"the tool declares the unknown type {type_!r} (expected one of {', '.join(TYPES)}); "
                   "the tool definition needs fixing")


def _boolean(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, (int, float)) and value in (0, 1):
        return bool(value)
    if isinstance(value, str):
        word = value.strip().lower()
        if word in TRUE_WORDS:
            return True
        if word in FALSE_WORDS:
            return False
    raise InvalidValue(f"expected true or false (also accepted: yes/no, 1/0, 是/否); got {_kind(value)} {_show(value)}")


def whole_numbers(value: Any) -> Any:
    """Whole floats inside lists and objects become ints: a Struct (or a Value) holds every number as a float."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, list):
        return [whole_numbers(v) for v in value]
    if isinstance(value, dict):
        return {k: whole_numbers(v) for k, v in value.items()}
    return value


# ---------------------------------------------------------------- normalization


def normalize(rule: str, value: Any) -> Any:
    """Apply one ``normalize`` rule; raises :class:`InvalidValue` (saying what was expected) if it cannot."""
    fn = NORMALIZERS.get(rule)
    if fn is None:
        raise InvalidValue(f"the tool names the unknown normalize rule {rule!r} (known: {', '.join(NORMALIZERS)}); "
                       "the tool definition needs fixing")
    return fn(value)


def _trim(value: Any) -> Any:
    return value.strip() if isinstance(value, str) else value


def _lower(value: Any) -> Any:
    return value.lower() if isinstance(value, str) else value


def _upper(value: Any) -> Any:
    return value.upper() if isinstance(value, str) else value


def _path(value: Any) -> str:
    """``~`` expanded, made absolute against the server's working directory, NUL refused.

    No symlink is resolved: that is for the permission checks that read the file system.
    """
    if not isinstance(value, str):
        raise InvalidValue(f"expected a path (text); got {_kind(value)} {_show(value)}")
    if "\x00" in value:
        raise InvalidValue("expected a path; got text containing a NUL character")
    if not value.strip():
        raise InvalidValue("expected a path; got empty text")
    return os.path.abspath(os.path.expanduser(value))


def _duration(unit_table: dict[str, float], base: str, examples: str, rounding: bool) -> Callable[[Any], Any]:
    def read(value: Any) -> Any:
        if isinstance(value, bool):
            raise InvalidValue(f"expected a duration in {base}, e.g. {examples}; got the boolean {_show(value)}")
        if isinstance(value, (int, float)):
            amount = _finite(value)
            if amount is None:
                raise InvalidValue(f"expected a finite duration in {base}, e.g. {examples}; got {_show(value)}")
            return _tidy(amount)
        if isinstance(value, str):
            amount = parse_duration(value, unit_table)
            if amount is not None:
                if not math.isfinite(amount):   # "1e400天", 400 nines: no duration is that long
                    raise InvalidValue(f"expected a finite duration in {base}, e.g. {examples}; "
                                       f"got {_show(value)}, which is too large")
                return _tidy(float(math.floor(amount + 0.5))) if rounding else _tidy(round(amount, 6))
        raise InvalidValue(f"expected a duration in {base}, e.g. {examples}; got {_show(value)}")
    return read


# Unit words, each with its size in the normalization's base unit.
_SECOND_WORDS = ("s", "sec", "secs", "second", "seconds", "秒", "秒钟", "秒鐘")
_MINUTE_WORDS = ("m", "min", "mins", "minute", "minutes", "分", "分钟", "分鐘")
_HOUR_WORDS = ("h", "hr", "hrs", "hour", "hours", "小时", "小時", "钟头", "鐘頭")
_QUARTER_HOUR = ("刻", "刻钟", "刻鐘")
_DAY_WORDS = ("d", "day", "days", "天", "日")
_WEEK_WORDS = ("w", "wk", "wks", "week", "weeks", "周", "週", "星期", "礼拜", "禮拜")
_MONTH_WORDS = ("mo", "mos", "mon", "month", "months", "月")
_QUARTER_WORDS = ("quarter", "quarters", "季度", "季")
_YEAR_WORDS = ("y", "yr", "yrs", "year", "years", "年")


def _table(*groups: tuple[tuple[str, ...], float]) -> dict[str, float]:
    return {word: size for words, size in groups for word in words}


MINUTE_UNITS = _table((_SECOND_WORDS, 1 / 60), (_MINUTE_WORDS, 1), (_HOUR_WORDS, 60), (_QUARTER_HOUR, 15),
                      (_DAY_WORDS, 1440), (_WEEK_WORDS, 10080))
"""duration_minutes: sizes in minutes. A bare number is minutes."""

DAY_UNITS = _table((("h", "hr", "hrs", "hour", "hours", "小时", "小時"), 1 / 24), (_DAY_WORDS, 1),
                   (_WEEK_WORDS, 7), (_MONTH_WORDS, 30), (_QUARTER_WORDS, 90), (_YEAR_WORDS, 365))
"""duration_days: sizes in days (a month is 30 days, a year 365). A bare number is days."""

_ISO = re.compile(r"p(?:(?P<y>\d+(?:\.\d+)?)y)?(?:(?P<mo>\d+(?:\.\d+)?)m)?(?:(?P<w>\d+(?:\.\d+)?)w)?"
                  r"(?:(?P<d>\d+(?:\.\d+)?)d)?(?:t(?:(?P<h>\d+(?:\.\d+)?)h)?(?:(?P<mi>\d+(?:\.\d+)?)m)?"
                  r"(?:(?P<s>\d+(?:\.\d+)?)s)?)?")
_ISO_MINUTES = {"y": 525600, "mo": 43200, "w": 10080, "d": 1440, "h": 60, "mi": 1, "s": 1 / 60}
# Words around the amount that do not change it: "20分钟后", "in 20 min", "大约两周".
_PREFIXES = ("after ", "in ", "for ", "about ", "around ", "approx ", "大约", "大概", "约", "再过", "过")
_SUFFIXES = (" from now", " later", " ago", "以后", "之后", "后", "以内", "之内", "内", "左右", "上下", "的时间",
             "时间", "的样子")
_CONNECTORS = " \t,，、+&又零"
_HALF = "半"
_CLASSIFIERS = "个個"


def parse_duration(text: str, units: dict[str, float]) -> float | None:
    """An amount of time in the table's base unit, or None if ``text`` is not one.

    Understands sums of ``<number><unit>`` ("1h30m", "一小时二十分钟"), halves
    ("半小时", "一个半小时", "两天半"), Chinese numerals (via :mod:`bitong.agent.calling.numerals`),
    a bare number (already in the base unit) and ISO 8601 ("PT1H30M").
    """
    s = text.strip().lower()
    # Strip by index: slicing the text once per word stripped would be quadratic in its length.
    lo, hi = 0, len(s)
    changed = True
    while changed and lo < hi:
        changed = False
        for p in _PREFIXES:
            if s.startswith(p, lo, hi):
                lo, changed = lo + len(p), True
                while lo < hi and s[lo].isspace():
                    lo += 1
        for x in _SUFFIXES:
            if hi - lo >= len(x) and s.endswith(x, lo, hi):
                hi, changed = hi - len(x), True
                while hi > lo and s[hi - 1].isspace():
                    hi -= 1
    s = s[lo:hi]
    if not s:
        return None
    iso = _ISO.fullmatch(s)
    if iso and any(iso.groupdict().values()):
        minutes = sum(float(v) * _ISO_MINUTES[k] for k, v in iso.groupdict().items() if v)
        return minutes / 1440 * units["天"]   # the table's size of a day converts minutes to its base
    words = sorted(units, key=len, reverse=True)
    total = 0.0
    pos = 0
    parts = 0
    while pos < len(s):
        while pos < len(s) and (s[pos] in _CONNECTORS or s.startswith("and ", pos)):
            pos += 4 if s.startswith("and ", pos) else 1
        if pos >= len(s):
            break
        amount, end = scan_number(s, pos)
        said_half = False
        if amount is None:
            if s.startswith(_HALF, pos):
                amount, end, said_half = 0.5, pos + 1, True
            elif s.startswith(("an ", "a "), pos):
                amount, end = 1, s.index(" ", pos) + 1
            else:
                return None
        pos = end
        while pos < len(s) and s[pos] == " ":
            pos += 1
        if pos < len(s) and s[pos] in _CLASSIFIERS:
            pos += 1
        half = 0.0
        if pos < len(s) and s[pos] == _HALF and not said_half:   # 一个半小时
            half, pos = 0.5, pos + 1
        unit = next((w for w in words if s.startswith(w, pos) and _word_ends(s, pos + len(w), w)), None)
        if unit is None:
            if parts == 0 and pos >= len(s) and not half:
                bare = _finite(amount)   # a bare number: already in the base unit
                return math.inf if bare is None else bare
            return None
        pos += len(unit)
        size = units[unit]
        if pos < len(s) and s[pos] == _HALF and not half and not said_half:   # 一小时半, 两天半
            half, pos = 0.5, pos + 1
        number = _finite(amount)
        total += ((math.inf if number is None else number) + half) * size
        parts += 1
    return total if parts else None


def _finite(value: int | float) -> float | None:
    """``value`` as a finite float, or None (an int too large for a float, +Inf, NaN)."""
    try:
        number = float(value)
    except OverflowError:
        return None
    return number if math.isfinite(number) else None


def _word_ends(s: str, end: int, word: str) -> bool:
    """An ASCII unit must end at a word boundary ("m" must not eat "months")."""
    if not word.isascii():
        return True
    return end >= len(s) or not s[end].isascii() or not s[end].isalpha()


NORMALIZERS: dict[str, Callable[[Any], Any]] = {
    "trim": _trim,
    "lower": _lower,
    "upper": _upper,
    "path": _path,
    "duration_minutes": _duration(MINUTE_UNITS, "minutes", '20, "20 min", "1.5h", "二十分钟", "半小时"', False),
    "duration_days": _duration(DAY_UNITS, "days", '10, "10 days", "两周", "三个月", "一年"', True),
    "boolean": lambda value: _boolean(value),
}
"""The ``normalize:`` rules. Non-text values pass through trim/lower/upper untouched;
a duration that is already a number is taken as the base unit (minutes or days);
duration_days rounds to whole days (months and years are approximate anyway),
duration_minutes keeps fractions, so an integer parameter then refuses "90 s"."""


# ---------------------------------------------------------------- helpers


def _from_value(value: Value) -> Any:
    """A google.protobuf.Value as plain Python."""
    return json_format.MessageToDict(value)


def _tidy(value: float) -> int | float:
    return int(value) if float(value).is_integer() else value


def _kind(value: Any) -> str:
    if isinstance(value, bool):
        return "the boolean"
    if isinstance(value, (int, float)):
        return "the number"
    if isinstance(value, str):
        return "the text"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "an object"
    return type(value).__name__


def _show(value: Any, limit: int = 60) -> str:
    """A value as JSON, shortened: it goes back to the caller inside a message."""
    try:
        text = json.dumps(whole_numbers(value), ensure_ascii=False)
    except (TypeError, ValueError, RecursionError):
        try:
            text = repr(value)
        except ValueError:   # an int past the int-to-text limit
            text = f"<an integer of about {int(value.bit_length() * 0.30103) + 1} digits>"
    return text if len(text) <= limit else text[: limit - 1] + "…"
