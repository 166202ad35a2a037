"""The grammar, loaded once, and lark's LALR parse over our tokens.

``hdlp.lark`` is the one definition of the syntax: lark builds its LALR
table here, the pure twin runs lark's own parser over it, and the compiled
twin (``_speedups``) walks the very same table and calls the very
same rule shapes, read from lark (``lalr_program``). Syntax errors are
worded here, once, for both.
"""

from __future__ import annotations

import functools
import os
from pathlib import Path
from typing import Any
from collections.abc import Iterable, Iterator

from lark import Lark, Transformer
from lark.exceptions import UnexpectedToken
from lark.lexer import Lexer
from lark.parse_tree_builder import maybe_create_child_filter

from .errors import ParseError
from .nodes import Node, block_node, flow_node, map_node, null_node, scalar_node

__all__ = ["GRAMMAR_PATH", "Rules", "lark_parser", "lalr_program", "parse_tokens", "syntax_error"]

GRAMMAR_PATH = Path(__file__).with_name("hdlp.lark")
CACHE_PATH = GRAMMAR_PATH.with_name("hdlp.lark.cache")

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

    def lex(self, lexer_state: Any, parser_state: Any) -> Iterator[Any]:  # pragma: no cover
        raise RuntimeError("bitong feeds tokens to the LALR parser directly")


class _Feed:
    """The LexerThread shape that lark's LALR parser reads tokens from."""

    __slots__ = ("toks",)

    def __init__(self, toks: list[Any]) -> None:
        self.toks = toks

    def lex(self, parser_state: Any) -> Iterable[Any]:
        return iter(self.toks)


@functools.cache
def lark_parser() -> Lark:
    """The LALR parser built from hdlp.lark, with the rule callbacks applied while parsing.

    Building the LALR table costs ~50 ms, loading it ~3 ms, so the table is
    kept in ``hdlp.lark.cache`` beside the grammar (lark's own ``cache=``:
    keyed by the grammar's text, the options, lark's and Python's versions,
    so an edited grammar is rebuilt, never served stale). The build writes
    it (setup.py); where it is missing and the folder is read-only, the
    table is built in memory each time, as before.
    """
    cache = str(CACHE_PATH) if CACHE_PATH.exists() or os.access(CACHE_PATH.parent, os.W_OK) else False
    return Lark(GRAMMAR_PATH.read_text(encoding="utf-8"), parser="lalr",
                lexer=_ExternalLexer, transformer=Rules(), start="start", cache=cache)


def _rule_shape(rule: Any, placeholders: bool) -> tuple[Any, ...]:
    """What lark's callback wrappers do to a rule's children, as data.

    Returns (callback name, expand_single, include, append_none): ``include``
    lists (child index, splice it, Nones to put before it) for the children
    that reach the callback, or is None when they all do, untouched. This is
    lark's own ``maybe_create_child_filter``, asked rather than re-derived.
    """
    opts = rule.options
    name = str(rule.alias or opts.template_source or rule.origin.name)
    wrap = maybe_create_child_filter(rule.expansion, opts.keep_all_tokens, False,
                                     opts.empty_indices if placeholders else None)  # type: ignore[arg-type]  # lark takes None
    include: tuple[Any, ...] | None = None
    append_none = 0
    if wrap is not None:
        shape = wrap.args[0]
        include = tuple((e[0], bool(e[1]), e[2] if len(e) > 2 else 0) for e in shape)
        append_none = wrap.args[1] if len(wrap.args) > 1 else 0
    return name, bool(opts.expand1 and not rule.alias), include, append_none


@functools.cache
def lalr_program(terminals: tuple[str, ...], known: frozenset[str]) -> tuple[Any, ...]:
    """hdlp.lark's LALR table and rule shapes as plain ints, for the compiled driver.

    ``terminals`` are the compiled lexer's token kinds in its numbering
    (``$END`` included); rule names are numbered after them. ``known`` is the
    set of rule callbacks the compiled twin implements; a rule whose callback
    is neither known nor lark's own (a ``_helper`` whose children its parent
    splices, or a ``?rule`` that always has one child) cannot be run there,
    which is an error now rather than a wrong tree later.

    Returns ``(names, action, start_state, end_state, rules)``: ``action`` is
    flat, ``nstates * len(names)`` entries, 0 for an error, ``s + 1`` to shift
    or go to state s, ``-(r + 1)`` to reduce by rule r; ``rules[r]`` is
    ``(lhs, size, callback, include, append_none)``: the rule's symbol
    number, how many values it pops, the name of its callback ("" for a
    helper, whose children become a list that its parent splices, "?" for a
    single child passed through) and its child filter (see ``_rule_shape``).
    """
    lark = lark_parser()
    inner = lark.parser.parser.parser
    table = inner.parse_table
    names = list(terminals)
    ids = {name: i for i, name in enumerate(names)}
    for row in table.states.values():
        for sym in row:
            if str(sym) not in ids:
                if str(sym).isupper():
                    raise RuntimeError(f"terminal {sym} of hdlp.lark is not produced by the compiled lexer")
                ids[str(sym)] = len(names)
                names.append(str(sym))
    method_names = {name for name in vars(Rules) if not name.startswith("_")}
    if method_names - set(known):
        raise RuntimeError(f"the compiled twin lacks rule callbacks: {sorted(method_names - set(known))}")
    rule_ids: dict[Any, int] = {}
    rules: list[tuple[Any, ...]] = []
    nsyms = len(names)
    action = [0] * (len(table.states) * nsyms)
    for state, row in table.states.items():
        for sym, (act, arg) in row.items():
            at = state * nsyms + ids[str(sym)]
            if act.name == "Shift":
                action[at] = arg + 1
                continue
            if arg not in rule_ids:
                name, single, include, append_none = _rule_shape(arg, lark.options.maybe_placeholders)
                if single and name in method_names:
                    raise RuntimeError(f"?rule {arg} with a callback: the compiled twin does not expand it")
                if name not in method_names:
                    if single and include is None and len(arg.expansion) == 1:
                        name = "?"  # ExpandSingleChild over one child: the child itself
                    elif arg.origin.name.startswith("_"):
                        name = ""  # lark's Tree, which the parent's filter splices
                    else:
                        raise RuntimeError(f"rule {arg} has no callback the compiled twin can run")
                rule_ids[arg] = len(rules)
                rules.append((ids[arg.origin.name], len(arg.expansion), name, include, append_none))
            action[at] = -(rule_ids[arg] + 1)
    return (tuple(names), action, table.start_states["start"], table.end_states["start"], rules)


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


def parse_tokens(toks: list[Any], path: str) -> tuple[Any, ...]:
    """Run lark's LALR parser over the tokens; return (header token or None, root map Node)."""
    try:
        parsed: tuple[Any, ...] = lark_parser().parser.parser.parse(_Feed(toks), "start")
        return parsed
    except UnexpectedToken as exc:
        raise syntax_error(path, exc.token, exc.expected) from None


class Rules(Transformer):  # type: ignore[type-arg]
    """One method per rule of ``hdlp.lark``; lark calls them as it reduces.

    The compiled twin dispatches the same rule names to the same constructors
    (``_speedups`` refuses to load if this list and its own disagree).
    """

    def scalar(self, children: list[Any]) -> Node:
        tok = children[0]
        return scalar_node(tok.type, tok.value, tok.line, tok.column)

    def pair(self, children: list[Any]) -> tuple[Any, ...]:
        return (children[0], children[1])

    def flow_map(self, children: list[Any]) -> Node:
        opener = children[0]
        return flow_node("map", children[1:], opener.line, opener.column)

    def flow_list(self, children: list[Any]) -> Node:
        opener = children[0]
        return flow_node("list", children[1:], opener.line, opener.column)

    def scalar_entry(self, children: list[Any]) -> tuple[Any, ...]:
        return (children[0], children[1])

    def block_text_entry(self, children: list[Any]) -> tuple[Any, ...]:
        tok = children[1]
        return (children[0], block_node(tok.value, tok.line, tok.column))

    def nested_entry(self, children: list[Any]) -> tuple[Any, ...]:
        return (children[0], children[1])

    def empty_entry(self, children: list[Any]) -> tuple[Any, ...]:
        key = children[0]
        return (key, null_node(key.line, key.column + len(key.value) + 1))

    def mapping(self, children: list[Any]) -> Node:
        return map_node(children)

    def header(self, children: list[Any]) -> Any:
        return children[0]

    def start(self, children: list[Any]) -> tuple[Any, ...]:
        if len(children) == 2:
            return children[0], children[1]
        return None, children[0]
