"""The one place that picks the twin: compiled (Cython) or pure Python.

``BITONG_PURE=1`` forces the pure twin; without it the compiled one is used
when it was built (``pip install .`` builds it unless BITONG_PURE=1 is set at
build time). Both produce the same tokens, the same ToolDefs and the same
error texts; ``tests/parser`` runs both.
"""

from __future__ import annotations

import os
from typing import Any, Callable

from . import grammar, lexer

__all__ = ["BACKEND", "Backend", "compiled", "pure", "active"]


class Backend:
    """A twin: how to tokenize, and how to run the LALR parse over the tokens."""

    def __init__(self, name: str, tokenize: Callable[[str, str], list], run: Callable[[list, str], tuple]) -> None:
        self.name = name
        self.tokenize = tokenize
        self.run = run


pure = Backend("pure", lexer.tokenize, grammar.parse_tokens)


def _load_compiled() -> Backend | None:
    try:
        from . import _speedups  # type: ignore[attr-defined]
    except ImportError:
        return None

    def run(toks: list, path: str) -> tuple:
        return _speedups.run_lalr(toks, path, grammar.lalr_table(), grammar.syntax_error)

    return Backend("cython", _speedups.tokenize, run)


compiled: Backend | None = _load_compiled()
FORCED_PURE = os.environ.get("BITONG_PURE", "").strip() not in ("", "0")
active: Backend = pure if FORCED_PURE or compiled is None else compiled
BACKEND: str = active.name


def backends() -> list[Any]:
    """Every twin available in this build (for parity tests and benchmarks)."""
    return [b for b in (pure, compiled) if b is not None]
