"""BM25F presences and the share of a request a tool explains (agent/match/lexical.py, both twins)."""

from __future__ import annotations

import pytest

from bitong.agent.matching import _backend
from bitong.agent.matching.lexical import ALPHA, OOV_FACTOR, TYPO_FACTOR, idf


@pytest.fixture(params=_backend.backends(), ids=lambda b: b.name)
def twin(request: pytest.FixtureRequest) -> _backend.Backend:
    return request.param  # type: ignore[no-any-return]


def test_presence_grows_with_the_fields_that_name_a_term_and_saturates(twin: _backend.Backend) -> None:
    once = twin.presences([("params", {"w:disk": 1.0})])["w:disk"]
    title = twin.presences([("display", {"w:disk": 1.0})])["w:disk"]
    everywhere = twin.presences([("display", {"w:disk": 1.0}), ("intent", {"w:disk": 1.0}),
                                 ("keywords", {"w:disk": 1.0}), ("name", {"w:disk": 1.0})])["w:disk"]
    assert 0 < once < title < everywhere < 1.0


def test_the_share_is_what_the_tool_explains_of_the_request(twin: _backend.Backend) -> None:
    postings = {"w:disk": {"a": 0.6, "b": 0.6}, "w:usage": {"a": 0.6}}
    acc, total, matched, missing = twin.accumulate({"w:disk": 1.0, "w:usage": 1.0, "w:pizza": 1.0}, postings, 2)
    assert acc["a"] > acc["b"] > 0
    assert missing == ["w:pizza"]  # no tool has it: it counts in the total, against every tool
    expected_total = ALPHA + idf(2, 2) + idf(2, 1) + idf(2, 0) * OOV_FACTOR
    assert total == pytest.approx(expected_total)
    assert set(matched["a"]) == {"w:disk", "w:usage"}


def test_an_unknown_word_one_edit_from_a_known_one_counts_at_a_discount(twin: _backend.Backend) -> None:
    postings = {"w:weather": {"w": 0.7}, "w:city": {"w": 0.5}}
    right, total_r, _, _ = twin.accumulate({"w:weather": 1.0}, postings, 5)
    typo, total_t, _, missing = twin.accumulate({"w:wether": 1.0}, postings, 5)
    assert not missing and typo["w"] == pytest.approx(right["w"] * TYPO_FACTOR)
    short, _, _, missing_short = twin.accumulate({"w:cty": 1.0}, postings, 5)
    assert missing_short == ["w:cty"] and not short  # three letters: too short to guess
