"""Match as a user meets it: the index over another team's tools, by words and by meaning."""

from __future__ import annotations

import random

import pytest

from bitong.agent.matching import DEFAULT_THRESHOLD, SUGGESTION, Index, ToolAnalysis
from bitong.agent.matching.semantic import MODEL_ID, default_embedder
from bitong.agent.matching.vocabulary import load_vocabulary
from bitong.v1.agent_pb2 import ToolDef

from .registry import tool, tools


def first(index: Index, text: str, **kw: object) -> str:
    result = index.match(text, 3, **kw)  # type: ignore[arg-type]
    return result.hits[0].name if result.found else ""


@pytest.mark.parametrize(("text", "expected"), [
    ("帮我把这两个PDF拼成一个", "pdf-merge"),             # Chinese, a word outside the tool's text (拼成)
    ("明天下午订个会议室", "meeting-book"),
    ("我还剩几天年假", "leave-balance"),
    ("what's the weather in Paris right now", "weather-now"),  # English
    ("how many lines are in notes.txt", "line-count"),
    ("看看 sample.txt 有多少行", "line-count"),            # mixed, a value in the request
    ("删掉 /tmp/old.log", "file-delete"),
    ("给张三发封邮件说会议改期", "email-send"),             # email and chat are told apart
])
def test_requests_in_chinese_english_and_mixed_find_their_tool(semantic_index: Index, text: str,
                                                                 expected: str) -> None:
    assert first(semantic_index, text) == expected


def test_a_chinese_homophone_typo_finds_the_word_it_meant(semantic_index: Index, lexical_index: Index) -> None:
    for index in (semantic_index, lexical_index):
        assert first(index, "统计 /tmp/a.log 的行书") == "line-count"   # 行书 typed for 行数


def test_an_english_one_edit_typo_is_forgiven(semantic_index: Index, lexical_index: Index) -> None:
    for index in (semantic_index, lexical_index):
        assert first(index, "wether in paris") == "weather-now"


def test_meaning_crosses_languages(semantic_index: Index) -> None:
    # currency-convert is written in English only; no word of this request is in it
    request = "美元兑人民币汇率"
    lexical_names = [h.name for h in semantic_index.match(request, 3, semantic=False).hits]
    assert "currency-convert" not in lexical_names
    assert semantic_index.match(request, 3).hits[0].name == "currency-convert"
    assert first(semantic_index, "convert 100 USD to CNY") == "currency-convert"


def test_a_request_for_a_non_goal_does_not_go_to_the_tool(semantic_index: Index) -> None:
    # release-rollback says 不做升级: an upgrade is not a rollback, worded any way
    upgrade = semantic_index.match("把服务升级到 2.0", 3)
    assert not (upgrade.found and upgrade.hits[0].name == "release-rollback")
    rollback = semantic_index.match("回滚到上个版本", 3)
    assert rollback.found and rollback.hits[0].name == "release-rollback"
    pushed = next(h for h in upgrade.hits if h.name == "release-rollback")
    assert pushed.score < rollback.hits[0].score and "ng_line" in pushed.evidence


def test_off_topic_requests_are_not_found_and_say_so(semantic_index: Index, lexical_index: Index) -> None:
    for index in (semantic_index, lexical_index):
        for text in ("给我讲个笑话", "订一张去上海的机票"):
            result = index.match(text, 3)
            assert not result.found and result.suggestion == SUGGESTION


def test_explain_says_why_a_request_was_not_found(semantic_index: Index) -> None:
    result = semantic_index.match("给我讲个笑话", 3)
    assert not result.found and result.hits  # the near misses are there for a tool author
    assert f"under the threshold {DEFAULT_THRESHOLD:.2f}" in result.explanation
    assert "no tool has the words" in result.explanation and "笑话" in result.missing_terms
    found = semantic_index.match("明天下午订个会议室", 3)
    assert found.found and "at or above the threshold" in found.explanation


def test_the_threshold_decides_found(semantic_index: Index) -> None:
    text = "明天下午订个会议室"
    score = semantic_index.match(text, 3).hits[0].score
    assert semantic_index.match(text, 3, threshold=score).found
    assert not semantic_index.match(text, 3, threshold=min(1.0, score + 1e-3)).found


def test_hits_are_ranked_and_bounded(semantic_index: Index) -> None:
    hits = semantic_index.match("PDF", 2).hits
    assert len(hits) == 2 and hits[0].score >= hits[1].score
    assert {h.name for h in hits} == {"pdf-merge", "pdf-to-text"}
    assert all(0.0 <= h.score <= 1.0 for h in semantic_index.match("会议室", 20).hits)


def test_the_index_works_without_a_vocabulary_and_with_one(semantic_index: Index) -> None:
    with_vocab = Index.build(tools(), vocabulary=load_vocabulary())
    assert semantic_index.vocabulary is None
    assert with_vocab.vocabulary is not None and with_vocab.fingerprint != semantic_index.fingerprint
    for index in (with_vocab, semantic_index):
        assert first(index, "帮我把这两个PDF拼成一个") == "pdf-merge"


def test_empty_index_and_empty_request() -> None:
    assert Index.build([]).match("anything").found is False
    index = Index.build(tools())
    assert index.match("").found is False and index.match("   ").found is False


def test_until_its_vectors_are_in_the_index_ranks_by_words() -> None:
    emb = default_embedder()
    index = Index.build(tools(), embedder=emb)
    assert not index.semantic_ready and len(index.pending_vectors()) == len(tools())
    assert first(index, "how many lines are in notes.txt") == "line-count"
    hits = index.match("看看 sample.txt 有多少行").hits
    assert "cos" not in hits[0].evidence  # lexical evidence only


def test_updated_adds_replaces_and_removes_without_touching_the_old_index() -> None:
    old = Index.build(tools())
    new = old.updated(upsert=[tool("pdf-merge", "PDF拼接", "把多个PDF拼接成一个文件"),
                              tool("ocr-scan", "图片文字识别", "识别扫描件和照片里的文字")],
                      remove=["weather-now"])
    assert "weather-now" in old and "weather-now" not in new and "ocr-scan" in new
    assert len(new) == len(old)
    assert first(new, "识别这张照片里的文字") == "ocr-scan" and "ocr-scan" not in old
    fresh = Index.build([*(t for t in tools() if t.name not in ("pdf-merge", "weather-now")),
                         tool("pdf-merge", "PDF拼接", "把多个PDF拼接成一个文件"),
                         tool("ocr-scan", "图片文字识别", "识别扫描件和照片里的文字")])
    for text in ("PDF拼接", "识别文字", "会议室", "行数"):
        assert [(h.name, h.score) for h in new.match(text).hits] == [(h.name, h.score) for h in fresh.match(text).hits]


MANY = ("帮我把这两个PDF拼成一个", "wether in paris", "统计 /tmp/a.log 的行书", "美元兑人民币汇率", "把服务升级到 2.0",
        "回滚到上个版本", "给我讲个笑话", "convert 100 dollars to euros", "请假", "我还剩几天年假", "发封邮件给张三",
        "删掉 /tmp/old.log", "PDF", "meeting room tomorrow", "", "x" * 500)


@pytest.mark.parametrize("semantic", [True, False], ids=["semantic", "lexical"])
def test_match_answers_the_first_hits_of_the_full_evidence(semantic_index: Index, semantic: bool) -> None:
    # Match scores only what it returns (and, by words alone, reads only the candidates that could rank
    # among them): its hits are the first top_k of every candidate's evidence that the caller may call.
    policies = {"all": None, "no pdf": lambda name: not name.startswith("pdf"), "none": lambda name: False,
                "two": lambda name: name in ("leave-request", "weather-now")}
    for text in MANY:
        every, _ = semantic_index.evidence(text, semantic=semantic)
        for top_k in (1, 3, 5, 20):
            for policy, allowed in policies.items():
                got = semantic_index.match(text, top_k, semantic=semantic, allowed=allowed).hits
                want = [h for h in every if allowed is None or allowed(h.name)][:top_k]
                assert [(h.name, h.score, h.matched_terms, dict(h.evidence)) for h in got] == \
                    [(h.name, h.score, h.matched_terms, dict(h.evidence)) for h in want], (text, top_k, policy)


def crowded(n: int = 90, seed: int = 5) -> list[ToolDef]:
    """Tools that share most of their words, some of them referring to each other: many close candidates."""
    rng = random.Random(seed)
    pool = ["report", "sales", "invoice", "customer", "order", "refund", "export", "monthly", "weekly", "chart",
            "ticket", "user", "account", "backup", "server", "disk", "log", "alert", "deploy", "release",
            "报表", "销售", "发票", "客户", "订单", "退款", "导出", "每月", "图表", "工单", "账号", "备份", "日志", "告警"]
    out = []
    for i in range(n):
        words = rng.sample(pool, 8)
        ng = f"[不做{rng.choice(pool)}{rng.choice(pool)}（用 t{rng.randrange(n)}）]" if i % 3 == 0 else ""
        out.append(tool(f"t{i}", " ".join(words[:2]), " ".join(words[2:]), keywords=", ".join(words[:1]) if i % 2 else "",
                        non_goals=ng))
    return out


def test_match_by_words_reads_enough_candidates_in_a_crowded_registry() -> None:
    index = Index.build(crowded())
    rng = random.Random(11)
    words = [t.intent.split()[0] for t in crowded()] + ["不做", "用", "quarterly", "repport"]
    for _ in range(150):
        text = " ".join(rng.sample(words, rng.randrange(2, 7)))
        every, _ = index.evidence(text, semantic=False)
        for top_k in (1, 3, 8):
            got = index.match(text, top_k, semantic=False).hits
            assert [(h.name, h.score, dict(h.evidence)) for h in got] == \
                [(h.name, h.score, dict(h.evidence)) for h in every[:top_k]], (text, top_k)


def test_typos_of_the_words_an_update_adds_or_removes_are_found_as_a_new_index_finds_them() -> None:
    old = Index.build(tools())
    assert first(old, "wether in paris") == "weather-now"   # the typo map is made now, then carried by updated()
    new = old.updated(upsert=[tool("tide-times", "Tide tables", "High and low tide times for a harbour")],
                      remove=["weather-now"])
    fresh = Index.build([*(t for t in tools() if t.name != "weather-now"),
                         tool("tide-times", "Tide tables", "High and low tide times for a harbour")])
    for text in ("tidde tables for the harbor", "wether in paris", "curency converter", "harbuor tide"):
        assert [(h.name, h.score, h.matched_terms) for h in new.match(text).hits] == \
            [(h.name, h.score, h.matched_terms) for h in fresh.match(text).hits]
    assert first(new, "tidde tables") == "tide-times" and first(old, "wether in paris") == "weather-now"
    # an index over the same words (a calibration, vectors, another twin) takes the map as it is
    assert old.with_calibration()._near is old._near is not None and old.using(old._backend)._near is old._near


def test_an_analysis_round_trips_with_its_vectors_and_a_broken_one_is_refused(semantic_index: Index) -> None:
    a = semantic_index.analysis("pdf-merge")
    assert a is not None and a.vectors and a.vectors_model == MODEL_ID
    assert ToolAnalysis.from_bytes(a.to_bytes()) == a
    for bad in (b"", b"junk", a.to_bytes()[:-3], b"bt1\0" + a.to_bytes()[4:]):
        with pytest.raises(ValueError):
            ToolAnalysis.from_bytes(bad)


def test_restore_reuses_stored_vectors_and_redoes_stale_ones(semantic_index: Index) -> None:
    ts = tools()
    for i, t in enumerate(ts):
        t.content_sha256 = f"{i:064x}"
    emb = default_embedder()
    assert emb is not None
    built = Index.build(ts, embedder=emb)
    built = built.with_vectors({a.name: (a.sha256, emb.passages(a.vector_texts())) for a in built.pending_vectors()})
    stored = [(t, built.analysis(t.name).to_bytes()) for t in ts]  # type: ignore[union-attr]
    restored = Index.restore(stored, embedder=emb)
    assert restored.semantic_ready and not restored.pending_vectors()  # nothing to recompute
    ts[0].content_sha256 = "f" * 64  # that file changed since the state was written
    stale = Index.restore([(t, b) for t, (_, b) in zip(ts, stored)], embedder=emb)
    assert [a.name for a in stale.pending_vectors()] == [ts[0].name]
    other_vocab = Index.restore(stored, vocabulary=load_vocabulary(), embedder=emb)
    assert len(other_vocab.pending_vectors()) == len(ts)  # analysed again: another vocabulary
