"""Values with positions: what the grammar's rules reduce to.

The rule callbacks below run during the LALR parse (no tree is built), so a
value is ready the moment its rule is reduced. Every value keeps the line and
column it came from, because the builder's errors must point there.
"""

from __future__ import annotations

from typing import Any

from lark import Transformer

__all__ = ["Node", "Rules"]


class Node:
    """A parsed value: ``kind`` is one of str, text, int, float, bool, map, list, block, null.

    ``raw`` is the source text of a scalar (so ``version: 1.10`` stays
    "1.10" where a string is wanted); for a map, ``value`` is a list of
    ``(key_token, Node)`` in file order, duplicates included.
    """

    __slots__ = ("kind", "value", "line", "column", "raw")

    def __init__(self, kind: str, value: Any, line: int, column: int, raw: str = "") -> None:
        self.kind = kind
        self.value = value
        self.line = line
        self.column = column
        self.raw = raw

    def __repr__(self) -> str:
        return f"Node({self.kind}, {self.value!r}, {self.line}:{self.column})"


def _scalar(tok: Any) -> Node:
    t = tok.type
    v = tok.value
    if t == "STRING":
        return Node("str", v, tok.line, tok.column, v)
    if t == "TEXT":
        return Node("text", v, tok.line, tok.column, v)
    if t == "INT":
        # Past 40 characters the value is out of any range (the builder says
        # so); this also keeps clear of Python's limit on int() of long text.
        value = int(v) if len(v) <= 40 else (-1 if v[0] == "-" else 1) * 2**128
        return Node("int", value, tok.line, tok.column, v)
    if t == "FLOAT":
        return Node("float", float(v), tok.line, tok.column, v)
    return Node("bool", t == "TRUE", tok.line, tok.column, v)


class Rules(Transformer):
    """One method per rule of ``hdlp.lark``; lark calls them as it reduces."""

    def scalar(self, children: list) -> Node:
        return _scalar(children[0])

    def pair(self, children: list) -> tuple:
        return (children[0], children[1])

    def flow_map(self, children: list) -> Node:
        opener = children[0]
        return Node("map", [c for c in children[1:] if c is not None], opener.line, opener.column)

    def flow_list(self, children: list) -> Node:
        opener = children[0]
        return Node("list", [c for c in children[1:] if c is not None], opener.line, opener.column)

    def scalar_entry(self, children: list) -> tuple:
        return (children[0], children[1])

    def block_text_entry(self, children: list) -> tuple:
        tok = children[1]
        return (children[0], Node("block", tok.value, tok.line, tok.column, tok.value))

    def nested_entry(self, children: list) -> tuple:
        return (children[0], children[1])

    def empty_entry(self, children: list) -> tuple:
        key = children[0]
        return (key, Node("null", None, key.line, key.column + len(key.value) + 1))

    def mapping(self, children: list) -> Node:
        first = children[0][0]
        return Node("map", children, first.line, first.column)

    def header(self, children: list) -> Any:
        return children[0]

    def start(self, children: list) -> tuple:
        if len(children) == 2:
            return children[0], children[1]
        return None, children[0]
