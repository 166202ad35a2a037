"""BM25F presences and the share of a request a tool explains (agent/match/lexical.py, both twins)."""

from __future__ import annotations

import heapq
import random

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


def _postings_of(words: dict[str, int]) -> dict[str, dict[str, float]]:
    """word -> how many tools have it: postings whose tools say which word a typo became."""
    return {"w:" + word: {f"{word}-{i}": 0.5 for i in range(df)} for word, df in words.items()}


def test_a_typo_becomes_the_same_word_from_its_deletions_as_from_every_edit(twin: _backend.Backend) -> None:
    postings = _postings_of({"weather": 3, "whether": 1, "disk": 2, "desk": 2, "card": 1, "cart": 1, "usage": 4,
                             "storage": 2, "restart": 1, "service": 3, "invoice": 1, "voice": 2, "city": 1,
                             "route6": 2, "code5": 2})   # an edit inserts or replaces letters only, never digits
    near = twin.near_words(postings)
    typos = {"wether", "weathr", "waether", "weatherr", "dsik", "disc", "dosk", "carx", "crad", "usge", "usaeg",
             "storag", "restrat", "servise", "invoise", "vioce", "voic", "zzzz", "cityy", "ciyt", "deskk", "dissk",
             "route", "codex", "coder"}
    for word in [w[2:] for w in postings]:   # every deletion, swap and doubled letter of every known word
        typos.update(word[:i] + word[i + 1:] for i in range(len(word)))
        typos.update(word[:i] + word[i + 1] + word[i] + word[i + 2:] for i in range(len(word) - 1))
        typos.update(word[:i] + word[i] + word[i:] for i in range(len(word)))
    for typo in sorted(typos):
        q = {"w:" + typo: 1.0}
        assert twin.accumulate(q, postings, 40, near) == twin.accumulate(q, postings, 40), typo
    # of two words equally common and one edit away, the first edit in order wins (d before t), as before
    acc, _, _, _ = twin.accumulate({"w:carx": 1.0}, postings, 40, near)
    assert set(acc) == {"card-0"}


def test_the_best_tools_are_nlargest_with_ties_in_the_order_scored(twin: _backend.Backend) -> None:
    rng = random.Random(3)
    for size in (0, 1, 5, 24, 25, 300, 2000):
        acc = {f"t{i}": rng.choice((0.25, 0.5, 0.75, 1.0, rng.random())) for i in range(size)}
        for k in (0, 1, 3, 24):
            assert twin.best(acc, k) == heapq.nlargest(k, acc, key=acc.__getitem__), (size, k)
