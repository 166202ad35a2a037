"""The matcher's twins: the compiled one is live when built, and both give the same answers."""

from __future__ import annotations

import os

import pytest

from bitong.agent.matching import Index, _backend

from .registry import tools

needs_compiled = pytest.mark.skipif(_backend.compiled is None and not os.environ.get("CI"),
                                    reason="the compiled twin was not built (BITONG_PURE=1 at install)")


def test_the_active_twin_follows_bitong_pure() -> None:
    if os.environ.get("BITONG_PURE", "").strip() not in ("", "0"):
        assert _backend.BACKEND == "pure"
    elif _backend.compiled is not None:
        assert _backend.BACKEND == "cython"
    assert Index.build([])._backend is _backend.active


@needs_compiled
def test_the_compiled_twin_is_compiled() -> None:
    assert _backend.compiled is not None, "bitong.agent.matching._analysis / _lexical are not built"
    assert type(_backend.compiled.terms).__name__ == "cython_function_or_method"
    assert type(_backend.pure.terms).__name__ == "function"


@needs_compiled
def test_both_twins_rank_alike(semantic_index: Index) -> None:
    assert _backend.compiled is not None
    pure, compiled = semantic_index.using(_backend.pure), semantic_index.using(_backend.compiled)
    for text in ("帮我把这两个PDF拼成一个", "wether in paris", "统计 /tmp/a.log 的行书", "美元兑人民币汇率",
                 "把服务升级到 2.0", "给我讲个笑话", "", "x" * 500):
        a, b = pure.match(text, 5), compiled.match(text, 5)
        assert (a.found, [(h.name, h.score, h.matched_terms) for h in a.hits]) == \
            (b.found, [(h.name, h.score, h.matched_terms) for h in b.hits])
    built = [Index.build(tools(), backend=b) for b in _backend.backends()]
    assert all(x.analysis("pdf-merge") == built[0].analysis("pdf-merge") for x in built)


@needs_compiled
def test_both_twins_cut_rough_terms_alike() -> None:
    assert _backend.compiled is not None
    for text in ("帮我把这两个PDF拼成一个", "Merging the PDFs of 2024", "ａｂｃ　ＰＤＦ 的 了", "", "x" * 500,
                 "把 /tmp/a.log 发到 ops@example.com"):
        assert _backend.pure.rough_terms(text) == _backend.compiled.rough_terms(text)
