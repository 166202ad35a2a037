"""The one place that picks the twin: compiled (Cython) or pure Python.

``BITONG_PURE=1`` forces the pure twin; without it the compiled one is used
when it was built (``pip install .`` builds it unless BITONG_PURE=1 is set at
build time). Both produce the same tokens, the same ToolDefs and the same
error texts; ``tests/parser`` runs both.

pure:      lexer.py -> lark's own LALR parser calling nodes.Rules -> build.py
compiled:  _speedups (lexer into a C array, LALR loop over lark's table for
           hdlp.lark) -> nodes.py compiled as _nodes -> build.py compiled as _build
"""

from __future__ import annotations

import functools
import os
from typing import Any
from collections.abc import Callable

from . import build, lexer
from .errors import ParseError

__all__ = ["BACKEND", "Backend", "compiled", "pure", "active", "backends"]


class Backend:
    """A twin: how to tokenize (for tests and tools), how to parse a text into
    (header, root Node), and how to build the ToolDef from those."""

    def __init__(self, name: str, tokenize: Callable[[str, str], list[Any]],
                 tree: Callable[[str, str], tuple[Any, ...]], build: Callable[..., Any]) -> None:
        self.name = name
        self.tokenize = tokenize
        self.tree = tree
        self.build = build


def _pure_tree(text: str, path: str) -> tuple[Any, ...]:
    toks = lexer.tokenize(text, path)
    if not toks:
        raise ParseError(path, 1, 1, lexer.EMPTY_ERROR)
    from . import grammar   # lark, only once something is parsed (a restart from --state parses nothing)
    return grammar.parse_tokens(toks, path)


pure = Backend("pure", lexer.tokenize, _pure_tree, build.build)


def _load_compiled() -> Backend | None:
    try:
        from . import _build, _speedups   # type: ignore[attr-defined]
    except ImportError:
        return None

    @functools.cache
    def program() -> Any:
        # built on first use: it needs lark's table, which the pure twin builds lazily too
        from . import grammar
        table = grammar.lalr_program(_speedups.TERMINALS, _speedups.KNOWN_RULES)
        return _speedups.Program(table, grammar.syntax_error)

    def tree(text: str, path: str) -> tuple[Any, ...]:
        parsed: tuple[Any, ...] = program().tree(text, path)
        return parsed

    return Backend("cython", _speedups.tokenize, tree, _build.build)


compiled: Backend | None = _load_compiled()
FORCED_PURE = os.environ.get("BITONG_PURE", "").strip() not in ("", "0")
active: Backend = pure if FORCED_PURE or compiled is None else compiled
BACKEND: str = active.name


def backends() -> list[Any]:
    """Every twin available in this build (for parity tests and benchmarks)."""
    return [b for b in (pure, compiled) if b is not None]
