"""Chinese (and Arabic) numerals to numbers, for parameter normalization.

A calling AI often passes what the user said: "二十分钟", "两周", "一百零五".
This module reads the number part only; units belong to the caller
(see :mod:`bitong.agent.calling.params`). It knows the everyday forms:

* unit form: 十 百 千 万 亿 (十二 = 12, 一百零五 = 105, 两千五 = 2500, 一万二 = 12000),
* digit strings: 二〇二六 = 2026, 一二三 = 123,
* decimals: 一点五 = 1.5, and Arabic numbers, with or without a 万/千 multiplier (1.5万),
* 两/俩/仨/廿/卅 and the financial capitals 壹贰叁肆伍陆柒捌玖拾佰仟.

``半`` (half) is not a number here: it is part of how durations are said
("一个半小时"), so :mod:`bitong.agent.calling.params` handles it.
"""

from __future__ import annotations

import re

__all__ = ["parse_number", "scan_number", "NUMERAL_CHARS", "MAX_NUMERAL_CHARS"]

_DIGITS: dict[str, int] = {
    "零": 0, "〇": 0, "○": 0, "洞": 0,
    "一": 1, "壹": 1, "幺": 1,
    "二": 2, "贰": 2, "貳": 2, "两": 2, "兩": 2, "俩": 2, "倆": 2,
    "三": 3, "叁": 3, "參": 3, "仨": 3,
    "四": 4, "肆": 4,
    "五": 5, "伍": 5,
    "六": 6, "陆": 6, "陸": 6,
    "七": 7, "柒": 7,
    "八": 8, "捌": 8,
    "九": 9, "玖": 9,
}
_SMALL_UNITS: dict[str, int] = {"十": 10, "拾": 10, "百": 100, "佰": 100, "千": 1000, "仟": 1000}
_BIG_UNITS: dict[str, int] = {"万": 10_000, "萬": 10_000, "亿": 100_000_000, "億": 100_000_000}
# 廿 and 卅 are "two tens" and "three tens": they behave like a digit followed by 十.
_TENS: dict[str, int] = {"廿": 20, "卅": 30}
_POINT = "点點"

NUMERAL_CHARS = frozenset(_DIGITS) | frozenset(_SMALL_UNITS) | frozenset(_BIG_UNITS) | frozenset(_TENS)
"""Every character that can be part of a Chinese numeral (the decimal point aside)."""

_ARABIC = re.compile(r"[0-9０-９]+(?:[.．][0-9０-９]+)?")

MAX_NUMERAL_CHARS = 40
"""A run of numeral characters longer than this is not a number anyone says: it is refused,
which keeps reading linear (no give-back loop over a long run, no 5,000-digit int)."""


def _chinese_integer(text: str) -> int | None:
    """An integer in Chinese unit or digit-string form; None if ``text`` is not one."""
    if not text or any(ch not in NUMERAL_CHARS for ch in text):
        return None
    if not any(ch in _SMALL_UNITS or ch in _BIG_UNITS or ch in _TENS for ch in text):
        # No unit at all: a digit string (二〇二六) or a single digit.
        return int("".join(str(_DIGITS[ch]) for ch in text))
    total = 0          # the part at or above 亿, already multiplied
    wan = 0            # the 万 block, already multiplied
    section = 0        # below 万
    digit: int | None = None
    last_unit = 0      # the unit just before a trailing digit (for 两千五 = 2500)
    after_zero = False
    for ch in text:
        if ch in _DIGITS:
            if digit is not None and digit != 0 and _DIGITS[ch] != 0:
                return None  # two digits in a row inside a unit form: 二三十 is ambiguous
            value = _DIGITS[ch]
            if value == 0:
                after_zero = True
            digit = value
        elif ch in _TENS:
            if digit not in (None, 0):
                return None
            section += _TENS[ch]
            digit, last_unit, after_zero = None, 10, False
        elif ch in _SMALL_UNITS:
            unit = _SMALL_UNITS[ch]
            section += (1 if digit is None else digit) * unit
            if digit == 0:
                return None  # 零十 is not a numeral
            digit, last_unit, after_zero = None, unit, False
        else:
            unit = _BIG_UNITS[ch]
            block = section + (digit or 0)
            if block == 0 and total == 0 and wan == 0:
                block = 1  # 万 alone reads as 一万
            if unit == 10_000:
                wan += block * unit
            else:
                total = (total + wan + block) * unit
                wan = 0
            section, digit, last_unit, after_zero = 0, None, unit, False
    if digit:
        if last_unit and not after_zero:
            # A bare trailing digit right after a unit is one unit lower: 一万二 = 12000.
            digit *= last_unit // 10
        section += digit
    return total + wan + section


def parse_number(text: str) -> int | float | None:
    """``text`` as a number (int when whole), or None when it is not exactly a numeral.

    >>> parse_number("一百零五"), parse_number("两千五"), parse_number("一点五"), parse_number("1.5万")
    (105, 2500, 1.5, 15000)
    """
    value, end = scan_number(text.strip(), 0)
    if value is None or end != len(text.strip()):
        return None
    return value


def scan_number(text: str, pos: int) -> tuple[int | float | None, int]:
    """Read the longest numeral starting at ``pos``: ``(value, end)``, or ``(None, pos)``."""
    m = _ARABIC.match(text, pos)
    if m:
        raw = m.group().translate(_FULLWIDTH)
        value: float = float(raw)
        end = m.end()
        if end < len(text) and text[end] in _BIG_UNITS:   # 1.5万
            value *= _BIG_UNITS[text[end]]
            end += 1
        elif end < len(text) and text[end] in "千仟":  # 3千
            value *= 1000
            end += 1
        return _tidy(value), end
    end = pos
    while end < len(text) and text[end] in NUMERAL_CHARS:
        end += 1
        if end - pos > MAX_NUMERAL_CHARS:
            return None, pos
    if end == pos:
        return None, pos
    # Give back trailing characters until the run reads as a numeral (rare: 二三十).
    while end > pos:
        whole = _chinese_integer(text[pos:end])
        if whole is not None:
            break
        end -= 1
    else:
        return None, pos
    if end + 1 < len(text) and text[end] in _POINT and text[end + 1] in _DIGITS:
        frac_end = end + 1
        while frac_end < len(text) and text[frac_end] in _DIGITS:
            frac_end += 1
            if frac_end - end > MAX_NUMERAL_CHARS:
                return None, pos
        fraction = "".join(str(_DIGITS[ch]) for ch in text[end + 1:frac_end])
        return _tidy(float(f"{whole}.{fraction}")), frac_end
    return whole, end


_FULLWIDTH = str.maketrans("０１２３４５６７８９．", "0123456789.")


def _tidy(value: float) -> int | float:
    """Whole floats become ints, so 20.0 prints and compares as 20."""
    return int(value) if value.is_integer() else value
