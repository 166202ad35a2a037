"""Text to terms: what a word is, on both sides of a match (agent/match/analysis.py, both twins)."""

from __future__ import annotations

import pytest

from bitong.agent.matching import _backend
from bitong.agent.matching.analysis import normalize, pinyin_of, stem


@pytest.fixture(params=_backend.backends(), ids=lambda b: b.name)
def terms(request: pytest.FixtureRequest):  # type: ignore[no-untyped-def]
    return request.param.terms


def test_english_words_fold_case_plurals_and_endings(terms) -> None:  # type: ignore[no-untyped-def]
    a, b = terms("Restarting the Services"), terms("restart service")
    assert {t for t in a if t.startswith("w:")} == {t for t in b if t.startswith("w:")} == {"w:restart", "w:servic"}
    assert "w:the" not in a  # a function word carries no tool's meaning
    assert stem("https") == "https" and stem("status") == "status"


def test_full_width_text_is_the_same_text() -> None:
    assert normalize("ＰＤＦ　合并") == "pdf 合并"


def test_chinese_gives_words_bigrams_characters_and_pinyin(terms) -> None:  # type: ignore[no-untyped-def]
    t = terms("合并PDF文件")
    assert "z:合并" in t and "z:文件" in t          # the segmenter's words
    assert "b:合并" in t and "u:合" in t            # bigrams and characters for recall
    assert "y:he bing" in t                          # its pinyin, for homophone typos
    assert "w:pdf" in t                              # English inside Chinese
    assert t["z:合并"] > t["b:合并"] > t["u:合"]     # words decide, characters only help


def test_a_homophone_typo_shares_its_pinyin_with_the_word_it_meant(terms) -> None:  # type: ignore[no-untyped-def]
    right, typo = terms("行数"), terms("行书")
    assert "b:行数" in right and "b:行数" not in typo
    assert pinyin_of("数") == pinyin_of("书") == "shu"
    assert {t for t in right if t.startswith("y:")} & {t for t in typo if t.startswith("y:")}


def test_particles_and_pronouns_are_not_words(terms) -> None:  # type: ignore[no-untyped-def]
    t = terms("帮我看一下")
    assert "u:我" not in t and "u:帮" not in t
    assert not any(k.startswith("b:") and ("我" in k or "的" in k) for k in t)


@pytest.mark.parametrize(("text", "slot"), [
    ("读一下 /srv/app/config.yaml", "p:path"),
    ("调 https://api.example.com/v1/health", "p:url"),
    ("ping 10.0.0.12", "p:host"),
    ("what's the A record for git.example.org", "p:host"),
    ("发给 zhang.san@example.com", "p:email"),
    ("退回 v2.3.0", "p:version"),
    ("run `uname -a` on the box", "p:cmdline"),
])
def test_values_become_slots_and_their_words_count_little(terms, text: str, slot: str) -> None:  # type: ignore[no-untyped-def]
    t = terms(text)
    assert slot in t
    assert t.get("w:exampl", 0.0) <= 0.15 and "w:com" not in t  # a host's name is not the request's topic


def test_a_file_name_keeps_its_extension_as_a_word(terms) -> None:  # type: ignore[no-untyped-def]
    t = terms("看看 sample.txt 有多少行")
    assert t["w:txt"] > t["w:sampl"]
    assert "p:file" in t


def test_concepts_are_added_never_instead_of_words(terms) -> None:  # type: ignore[no-untyped-def]
    t = terms("发邮件", lambda text: (["message"] if "邮件" in text else [], set()))
    assert "c:message" in t and "b:邮件" in t


def test_both_twins_give_the_same_terms() -> None:
    texts = ["帮我把这两个PDF拼成一个", "convert 100 USD to CNY", "统计 /tmp/a.log 的行书", "ＰＯＳＴ 到 http://x/y", ""]
    results = [[b.terms(t) for t in texts] for b in _backend.backends()]
    assert all(r == results[0] for r in results)
