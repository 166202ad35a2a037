"""The one place that picks the matcher's twin: compiled (Cython) or pure Python.

The flag is the parser's, ``BITONG_PURE=1``, read the same way here (not
imported from :mod:`parser._backend`, which would load the parser with the
matcher): without it the compiled twin is used when it was built (``pip install .`` builds it unless BITONG_PURE=1 is set at build
time). Both give the same analyses, hits, scores and matched terms;
tests/agent/test_matcher_twins.py runs both.

pure:      agent/text.py (Analyzer) and agent/ranking.py (Ranker)
compiled:  the same two files compiled by Cython in pure-Python mode as
           agent._text and agent._ranking, typed by agent/_text.pxd and
           agent/_ranking.pxd
"""

from __future__ import annotations

import os
from typing import Any

from agent import ranking, text

__all__ = ["BACKEND", "Backend", "active", "backends", "compiled", "pure"]


class Backend:
    """A twin: the Analyzer class (text to terms) and the Ranker class (terms to hits)."""

    def __init__(self, name: str, analyzer: Any, ranker: Any) -> None:
        self.name = name
        self.analyzer = analyzer
        self.ranker = ranker

    def __repr__(self) -> str:
        return f"<matcher backend {self.name}>"


pure = Backend("pure", text.Analyzer, ranking.Ranker)


def _load_compiled() -> Backend | None:
    try:
        from agent import _ranking, _text  # type: ignore[attr-defined]
    except ImportError:
        return None
    return Backend("cython", _text.Analyzer, _ranking.Ranker)


compiled: Backend | None = _load_compiled()
FORCED_PURE = os.environ.get("BITONG_PURE", "").strip() not in ("", "0")
active: Backend = pure if FORCED_PURE or compiled is None else compiled
BACKEND: str = active.name


def backends() -> list[Backend]:
    """Every twin available in this build (for parity tests and benchmarks)."""
    return [b for b in (pure, compiled) if b is not None]
