"""A parameter's ``pattern``: checked once at load, run in linear time at each call.

Python's ``re`` backtracks: ``^(a+)+$`` against 28 ``a`` and a ``!`` runs for
many seconds while holding the GIL, freezing every call of the sidecar, and
some patterns break it outright (``a{99999999999}`` raises OverflowError,
5,000 nested groups RecursionError). So patterns run on RE2
(``google-re2``), whose matching time is linear in the text, and this module
is the one place that decides which patterns are accepted: the parser calls
:func:`check` at load (the error names what is wrong) and ``agent/params.py``
calls :func:`compiled` at call time.

The dialect is the part of Python's syntax that RE2 can run with Python's
meaning. A pattern must compile in ``re`` (so it means what the format has
always said: a Python regular expression) and, after the translation below,
in RE2. Refused, each with a message naming the feature:

* lookarounds ``(?=`` ``(?!`` ``(?<=`` ``(?<!``, backreferences ``\\1`` and
  ``(?P=name)``, atomic groups ``(?>``, conditionals ``(?(``: they need
  backtracking, which is what RE2 gives up to be linear;
* ``\\b`` and ``\\B``: RE2's word boundary is ASCII-only, so around Chinese
  text it would not mean what Python's does;
* ``\\W`` and ``\\S`` inside ``[...]`` (no RE2 spelling keeps their meaning);
* more than :data:`MAX_PATTERN_CHARS` characters or groups nested deeper than
  :data:`MAX_GROUP_DEPTH`, and anything RE2 refuses (its message is quoted),
  such as a repetition count above 1000 or a program over its memory budget.

Translated to keep Python's Unicode meaning (RE2's own are ASCII-only):
``\\d`` → ``\\p{Nd}``, ``\\w`` → ``[\\p{L}\\p{N}_]``, ``\\s`` → Python's
whitespace set, their negations, and ``\\Z`` → ``\\z``. Measured over every
code point, these agree with Python 3.11's ``re`` on every character its
Unicode database (14.0) assigns. One difference is kept on purpose: ``$``
is the end of the text, so ``^\\d+$`` does not accept ``"123\\n"`` (Python's
``$`` also matches before a final newline).
"""

from __future__ import annotations

import functools
import re
import warnings
from typing import Protocol

import re2

__all__ = ["MAX_GROUP_DEPTH", "MAX_PATTERN_CHARS", "Pattern", "PatternError", "check", "compiled", "search"]

MAX_PATTERN_CHARS = 1000
MAX_GROUP_DEPTH = 32
# Enough for any pattern a parameter needs; RE2 refuses what would exceed it
# ("pattern too large"), so a pattern cannot make the process allocate without bound.
_RE2_MAX_MEM = 8 << 20

_SPACE = r"\s\x{0B}\x{1C}-\x{1F}\x{85}\p{Z}"  # Python's str.isspace() set (RE2's \s is [\t\n\f\r ])
_WORD = r"\p{L}\p{N}_"
# escape -> (outside a class, inside a class or None when it cannot be said there)
_CLASSES = {
    "d": (r"\p{Nd}", r"\p{Nd}"),
    "D": (r"\P{Nd}", r"\P{Nd}"),
    "w": (f"[{_WORD}]", _WORD),
    "W": (f"[^{_WORD}]", None),
    "s": (f"[{_SPACE}]", _SPACE),
    "S": (f"[^{_SPACE}]", None),
}
_GROUP_REFUSED = (
    ("(?<=", "a lookbehind '(?<=...)'"),
    ("(?<!", "a negative lookbehind '(?<!...)'"),
    ("(?=", "a lookahead '(?=...)'"),
    ("(?!", "a negative lookahead '(?!...)'"),
    ("(?>", "an atomic group '(?>...)'"),
    ("(?(", "a conditional '(?(...)...)'"),
    ("(?P=", "a backreference '(?P=name)'"),
)


class PatternError(ValueError):
    """A pattern that will not be run, and why, in words for the file's author."""


class Pattern(Protocol):
    """What a compiled pattern offers: ``search`` as ``re`` has it."""

    def search(self, text: str) -> object | None: ...


def _translate(pattern: str) -> str:
    """The RE2 spelling of a Python pattern, or PatternError naming what RE2 cannot run.

    A single left-to-right pass that knows escapes, ``[...]`` classes (where
    ``(`` and ``$`` are literal) and group openings; it never recurses.
    """
    out: list[str] = []
    depth = 0
    in_class = False
    class_start = 0
    i = 0
    n = len(pattern)
    while i < n:
        c = pattern[i]
        if c == "\\" and i + 1 < n:
            e = pattern[i + 1]
            if e in _CLASSES:
                outside, inside = _CLASSES[e]
                if in_class and inside is None:
                    raise PatternError(f"'\\{e}' inside [...] has no linear-time equivalent: write the class out instead")
                out.append(inside if in_class and inside is not None else outside)
            elif e in "bB" and not in_class:
                raise PatternError(f"the word boundary '\\{e}' is not supported (the linear-time engine's is "
                                   "ASCII-only, so it would not mean what Python's means around Chinese text)")
            elif e.isdigit() and e != "0" and not in_class:
                raise PatternError(f"the backreference '\\{e}' is not supported (it needs a backtracking engine)")
            elif e == "Z" and not in_class:
                out.append(r"\z")
            elif e == "g" and not in_class and pattern.startswith("<", i + 2):
                raise PatternError("the backreference '\\g<...>' is not supported (it needs a backtracking engine)")
            else:
                out.append(pattern[i : i + 2])
            i += 2
            continue
        if in_class:
            # a ']' first in the class (after an optional '^') is literal, as in Python
            if c == "]" and i > class_start:
                in_class = False
            out.append(c)
            i += 1
            continue
        if c == "[":
            in_class = True
            class_start = i + 1
            if pattern.startswith("^", class_start):
                class_start += 1
            out.append(c)
            i += 1
            continue
        if c == "(":
            for opener, what in _GROUP_REFUSED:
                if pattern.startswith(opener, i):
                    raise PatternError(f"{what} is not supported (it needs a backtracking engine)")
            depth += 1
            if depth > MAX_GROUP_DEPTH:
                raise PatternError(f"groups nested deeper than {MAX_GROUP_DEPTH} levels: expected at most {MAX_GROUP_DEPTH}")
        elif c == ")":
            depth -= 1
        out.append(c)
        i += 1
    return "".join(out)


def _options() -> re2.Options:
    options = re2.Options()
    options.log_errors = False  # the error comes back to us as an exception; no stray stderr lines
    options.max_mem = _RE2_MAX_MEM
    return options


@functools.lru_cache(maxsize=1024)
def compiled(pattern: str) -> Pattern:
    """The RE2 program of an accepted pattern (cached); PatternError says why one is refused."""
    if len(pattern) > MAX_PATTERN_CHARS:
        raise PatternError(f"the pattern is {len(pattern)} characters long: expected at most {MAX_PATTERN_CHARS}")
    translated = _translate(pattern)  # first: its depth limit keeps re.compile below clear of recursion
    try:
        with warnings.catch_warnings():  # FutureWarning about [[ and -- in sets: not our concern here
            warnings.simplefilter("ignore")
            re.compile(pattern)
    except re.error as exc:
        raise PatternError(f"not a valid regular expression ({exc}): expected a Python regex") from None
    except (OverflowError, RecursionError, MemoryError, ValueError) as exc:
        raise PatternError(f"not a usable regular expression ({type(exc).__name__}: {exc})") from None
    try:
        compiled: Pattern = re2.compile(translated, _options())
        return compiled
    except re2.error as exc:
        reason = exc.args[0].decode("utf-8", "replace") if exc.args and isinstance(exc.args[0], bytes) else str(exc)
        raise PatternError(f"not supported by the linear-time regex engine (RE2: {reason})") from None


def check(pattern: str) -> None:
    """Raise PatternError unless ``pattern`` is accepted (what the parser calls at load)."""
    compiled(pattern)


def search(pattern: str, text: str) -> bool:
    """Does ``pattern`` occur in ``text`` (``re.search`` semantics, linear time)?"""
    return compiled(pattern).search(text) is not None
