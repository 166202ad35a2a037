"""Values with positions: what the grammar's rules reduce to.

The rule callbacks below run during the LALR parse (no tree is built), so a
value is ready the moment its rule is reduced. Every value keeps the line and
column it came from, because the builder's errors must point there.

The constructors (``scalar_node`` ... ``map_node``) are the one source of how
a value is made. ``grammar.Rules`` adapts them to lark's callback shape for the
pure twin (lark stays out of this module, so a process that parses nothing
never imports it); the compiled twin compiles this very file as ``bitong.parser._nodes``
(``_nodes.pxd`` types it) and calls the constructors straight from its LALR
driver, so the twins cannot drift.
"""

from __future__ import annotations

from typing import Any


__all__ = ["Node", "block_node", "flow_node", "map_node", "null_node", "scalar_node"]


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


def _new(kind: str, value: Any, line: int, column: int, raw: str) -> Node:
    """A Node without the call to ``__init__``: compiled, this is a plain
    allocation and five stores (``_nodes.pxd``), which the parse does ~70 times a file."""
    node = Node.__new__(Node)
    node.kind = kind
    node.value = value
    node.line = line
    node.column = column
    node.raw = raw
    return node


def scalar_node(terminal: str, value: str, line: int, column: int) -> Node:
    """A scalar from its terminal (STRING, TEXT, INT, FLOAT, TRUE or FALSE) and its text."""
    if terminal == "STRING":
        return _new("str", value, line, column, value)
    if terminal == "TEXT":
        return _new("text", value, line, column, value)
    if terminal == "INT":
        # Past 40 characters the value is out of any range (the builder says
        # so); this also keeps clear of Python's limit on int() of long text.
        number = int(value) if len(value) <= 40 else (-1 if value[0] == "-" else 1) * 2**128
        return _new("int", number, line, column, value)
    if terminal == "FLOAT":
        return _new("float", float(value), line, column, value)
    return _new("bool", terminal == "TRUE", line, column, value)


def block_node(value: str, line: int, column: int) -> Node:
    """``key: |`` block text, positioned at its ``|``."""
    return _new("block", value, line, column, value)


def flow_node(kind: str, items: list[Any], line: int, column: int) -> Node:
    """A flow map (items are (key, Node)) or list at its opening bracket; the
    ``None`` lark puts in for an empty ``[]``/``{}`` is dropped."""
    return _new(kind, [c for c in items if c is not None], line, column, "")


def null_node(line: int, column: int) -> Node:
    """``key:`` with nothing after it and nothing below, positioned just after the colon."""
    return _new("null", None, line, column, "")


def map_node(entries: list[Any]) -> Node:
    """A block of entries, (key token, Node) each, positioned at its first key."""
    first = entries[0][0]
    return _new("map", entries, first.line, first.column, "")
