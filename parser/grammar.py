"""The grammar, loaded once, and lark's LALR parse over our tokens.

``hdlp.lark`` is the one definition of the syntax: lark builds its LALR
table here, the pure twin runs lark's own parser over it, and the compiled
twin (``_speedups.run_lalr``) walks the very same table and calls the very
same rule callbacks. Syntax errors are worded here, once, for both.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any, Iterable

from lark import Lark
from lark.exceptions import UnexpectedToken
from lark.lexer import Lexer

from .errors import ParseError
from .nodes import Rules

__all__ = ["GRAMMAR_PATH", "lark_parser", "lalr_table", "parse_tokens", "syntax_error"]

GRAMMAR_PATH = Path(__file__).with_name("hdlp.lark")

# How each terminal is named in messages, in the order they are listed.
_WORDS = {
    "KEY": "a key", "STRING": "a value", "TEXT": "a value", "INT": "a value",
    "FLOAT": "a value", "TRUE": "a value", "FALSE": "a value", "BLOCK": "block text",
    "LBRACE": "'{'", "LBRACK": "'['", "_COLON": "':'", "_COMMA": "','", "_RBRACE": "'}'",
    "_RBRACK": "']'", "_NL": "the end of the line", "_INDENT": "an indented block",
    "_DEDENT": "less indentation", "$END": "the end of the file", "HEADER": "an HLDP:// line",
}
_VALUES = frozenset({"STRING", "TEXT", "INT", "FLOAT", "TRUE", "FALSE"})


class _ExternalLexer(Lexer):
    """Placeholder: tokens come from parser/lexer.py or the compiled twin."""

    def __init__(self, lexer_conf: Any) -> None:
        pass

    def lex(self, lexer_state: Any, parser_state: Any) -> Iterable[Any]:  # pragma: no cover
        raise RuntimeError("bitong feeds tokens to the LALR parser directly")


class _Feed:
    """The LexerThread shape that lark's LALR parser reads tokens from."""

    __slots__ = ("toks",)

    def __init__(self, toks: list) -> None:
        self.toks = toks

    def lex(self, parser_state: Any) -> Iterable[Any]:
        return iter(self.toks)


@functools.cache
def lark_parser() -> Lark:
    """The LALR parser built from hdlp.lark, with the rule callbacks applied while parsing."""
    return Lark(GRAMMAR_PATH.read_text(encoding="utf-8"), parser="lalr",
                lexer=_ExternalLexer, transformer=Rules(), start="start")


@functools.cache
def lalr_table() -> tuple:
    """(actions, start_state, end_state, reductions) for the compiled driver.

    ``actions[state]`` maps a terminal or rule name to (is_shift, target):
    the next state for a shift, the index in ``reductions`` for a reduce.
    ``reductions[i]`` is (rule name, number of children, callback).
    """
    inner = lark_parser().parser.parser.parser  # frontend -> LALR_Parser -> _Parser
    table = inner.parse_table
    rules: dict[Any, int] = {}
    reductions: list[tuple] = []
    actions: list[dict] = [None] * len(table.states)  # type: ignore[list-item]
    for state, row in table.states.items():
        out = {}
        for sym, (action, arg) in row.items():
            if action.name == "Shift":
                out[sym] = (True, arg)
            else:
                if arg not in rules:
                    rules[arg] = len(reductions)
                    reductions.append((arg.origin.name, len(arg.expansion), inner.callbacks[arg]))
                out[sym] = (False, rules[arg])
        actions[state] = out
    return actions, table.start_states["start"], table.end_states["start"], reductions


def syntax_error(path: str, token: Any, expected: Iterable[str]) -> ParseError:
    """Word an unexpected token for people: where it is, what would fit, what is there.

    ``expected`` may hold rule names too (the compiled driver passes a whole
    table row); only terminals are worth naming, as lark itself does.
    """
    kind = token.type
    if kind == "$END":
        what = "the end of the file"
    elif kind == "_INDENT":
        # "expected a key or the end of the line" says little here: say what indentation means
        return ParseError(path, token.line or 1, token.column or 1,
                          "unexpected indentation: expected a key at the indentation of the line above "
                          "(only a key with nothing after its ':' opens an indented block)")
    elif kind == "_DEDENT":
        what = "less indentation"
    elif kind == "_NL":
        what = "the end of the line"
    elif kind == "BLOCK":
        what = "block text"
    else:
        what = repr(token.value)
    names = {e for e in expected if e in _WORDS}
    if names & _VALUES:
        names -= {"LBRACE", "LBRACK"}  # a value may be a flow collection; no need to say so
    words = list(dict.fromkeys(_WORDS[e] for e in _WORDS if e in names))
    return ParseError(path, token.line or 1, token.column or 1,
                      f"expected {' or '.join(words) or 'something else'}, found {what}")


def parse_tokens(toks: list, path: str) -> tuple:
    """Run lark's LALR parser over the tokens; return (header token or None, root map Node)."""
    try:
        return lark_parser().parser.parser.parse(_Feed(toks), "start")
    except UnexpectedToken as exc:
        raise syntax_error(path, exc.token, exc.expected) from None
