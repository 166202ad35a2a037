"""The one place that picks the matcher's twin: compiled (Cython) or pure Python.

``BITONG_PURE=1`` forces the pure twin (read here as the parser reads it, so
importing the matcher does not load the parser). Both twins give the same
terms, presences and scores; tests/agent/match/test_twins.py runs both.

pure:      agent/match/analysis.py and agent/match/lexical.py
compiled:  the same two files compiled by Cython in pure-Python mode
           as bitong.agent.matching._analysis and bitong.agent.matching._lexical
"""

from __future__ import annotations

import os
from types import ModuleType

from bitong.agent.matching import analysis, lexical

__all__ = ["BACKEND", "Backend", "active", "backends", "compiled", "pure"]


class Backend:
    """A twin: text to terms (analysis) and the lexical hot loop."""

    def __init__(self, name: str, analysis_mod: ModuleType, lexical_mod: ModuleType) -> None:
        self.name = name
        self.terms = analysis_mod.terms
        self.rough_terms = analysis_mod.rough_terms
        self.stem = analysis_mod.stem
        self.presences = lexical_mod.presences
        self.accumulate = lexical_mod.accumulate
        self.scores = lexical_mod.scores
        self.matched = lexical_mod.matched
        self.best = lexical_mod.best
        self.idf = lexical_mod.idf
        self.near_words = lexical_mod.near_words

    def __repr__(self) -> str:
        return f"<matcher backend {self.name}>"


pure = Backend("pure", analysis, lexical)


def _load_compiled() -> Backend | None:
    try:
        from bitong.agent.matching import _analysis, _lexical   # type: ignore[attr-defined]
    except ImportError:
        return None
    return Backend("cython", _analysis, _lexical)


compiled: Backend | None = _load_compiled()
FORCED_PURE = os.environ.get("BITONG_PURE", "").strip() not in ("", "0")
active: Backend = pure if FORCED_PURE or compiled is None else compiled
BACKEND: str = active.name


def backends() -> list[Backend]:
    """Every twin available in this build (for parity tests and benchmarks)."""
    return [b for b in (pure, compiled) if b is not None]
