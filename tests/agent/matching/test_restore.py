"""A restart's index and a cold start's: saved posting lists taken as they are, a rough index replaced whole."""

from __future__ import annotations

import pytest

from bitong.agent.matching import Index, analysis_fingerprint, analyze
from bitong.agent.matching.index import ROUGH, ToolAnalysis
from bitong.agent.matching.vocabulary import default_vocabulary
from bitong.v1.agent_pb2 import ToolDef

from .registry import tool, tools

INTENTS = ("帮我把这两个PDF拼成一个", "convert 100 dollars to euros", "缩放图片到 800x600", "请个假", "给我讲个笑话",
           "rollback the release", "")


def answers(index: Index) -> list[tuple[bool, list[tuple[str, float, tuple[str, ...]]]]]:
    out = []
    for text in INTENTS:
        result = index.match(text, 5)
        out.append((result.found, [(h.name, h.score, h.matched_terms) for h in result.hits]))
    return out


def stored(index: Index, ts: list[ToolDef]) -> list[tuple[ToolDef, bytes]]:
    return [(t, index.stored_analysis(t.name)[1]) for t in ts]


def edited() -> ToolDef:
    return tool("pdf-merge", "PDF拼接", "把几个PDF拼接成一个文件", keywords="拼接PDF")


def test_a_restore_takes_the_saved_postings_and_answers_as_the_index_that_saved_them() -> None:
    vocab = default_vocabulary()
    ts = tools()
    built = Index.build(ts, vocabulary=vocab)
    restored = Index.restore(stored(built, ts), vocabulary=vocab, saved=built.saved_postings())
    assert restored.postings_restored and not built.postings_restored
    assert answers(restored) == answers(built)
    assert {a.name: a for a in restored.analyses()} == {a.name: a for a in built.analyses()}
    # saved again without decoding: the same bytes a restart reads
    assert restored.saved_postings() == built.saved_postings()
    # an edit of a restored index is the edit of the index it restored
    after, expected = restored.updated(upsert=[edited()]), built.updated(upsert=[edited()])
    assert answers(after) == answers(expected) and after.postings_restored
    assert after.analysis("pdf-merge") == analyze(edited(), vocab)
    gone = restored.updated(remove=["email-send"])
    assert "email-send" not in gone and len(gone) == len(ts) - 1
    assert answers(gone) == answers(built.updated(remove=["email-send"]))


def test_saved_postings_that_do_not_fit_the_tools_are_not_used() -> None:
    vocab = default_vocabulary()
    ts = tools()
    built = Index.build(ts, vocabulary=vocab)
    saved = built.saved_postings()
    damaged = saved[:-9] + bytes([saved[-9] ^ 0x01]) + saved[-8:]
    other_version = [(edited() if t.name == "pdf-merge" else t, data) for t, data in stored(built, ts)]
    fewer = stored(built, ts)[1:]
    cases = {"damaged": (stored(built, ts), damaged, vocab), "garbage": (stored(built, ts), b"\x00garbage", vocab),
             "a tool changed": (other_version, saved, vocab), "a tool fewer": (fewer, saved, vocab),
             "another vocabulary": (stored(built, ts), saved, None)}
    for why, (pairs, blob, vocabulary) in cases.items():
        restored = Index.restore(pairs, vocabulary=vocabulary, saved=blob)
        assert not restored.postings_restored, why
        expected = Index.build([t for t, _ in pairs], vocabulary=vocabulary)
        assert answers(restored) == answers(expected), why


def test_a_rough_index_answers_by_words_and_is_never_saved_as_a_full_one() -> None:
    ts = tools()
    rough = Index.rough(ts)
    assert {a.fingerprint for a in rough.analyses()} == {ROUGH}
    hits = rough.match("把多个PDF文件合并成一个文件").hits
    assert hits and hits[0].name == "pdf-merge"
    assert rough.match("convert dollars to euros").hits[0].name == "currency-convert"
    assert rough.saved_postings() == b"", "a restart must not take rough postings for full ones"
    # what changes while rough is analysed in full (a rough analysis is never stale-checked as fresh)
    changed = rough.updated(upsert=[edited()])
    full = changed.analysis("pdf-merge")
    assert full is not None and full.fingerprint == analysis_fingerprint(None) == rough.fingerprint
    assert changed.saved_postings() == b""
    a = rough.analysis("email-send")
    assert isinstance(a, ToolAnalysis) and not a.fresh_for(ts[7], rough.fingerprint)


@pytest.mark.parametrize("text", ["合并PDF文件", "Merge the PDFs, please", "", "ａｂｃ　ＰＤＦ 的 了"])
def test_rough_terms_are_a_subset_of_the_full_terms_kinds(text: str) -> None:
    from bitong.agent.matching.analysis import rough_terms, terms

    rough, full = rough_terms(text), terms(text)
    assert {t[0] for t in rough} <= {"w", "b"}
    assert all(full.get(term) == weight for term, weight in rough.items())


def test_a_restored_index_answers_requests_from_several_threads_at_once() -> None:
    """Each first read decodes an analysis while other requests count and read the others."""
    import concurrent.futures

    vocab = default_vocabulary()
    ts = tools()
    built = Index.build(ts, vocabulary=vocab)
    expected = answers(built)
    for _ in range(5):   # a fresh restore each round: every analysis is decoded by some request
        restored = Index.restore(stored(built, ts), vocabulary=vocab, saved=built.saved_postings())
        with concurrent.futures.ThreadPoolExecutor(8) as pool:
            got = list(pool.map(answers, [restored] * 16))
        assert all(g == expected for g in got)


def test_a_restart_takes_its_stored_vectors_without_decoding_the_analyses(monkeypatch: pytest.MonkeyPatch) -> None:
    """With the model (at the restore, or attached after it) the stored vectors serve at once; the answers
    are those of the index that stored them, and no analysis is decoded for it."""
    from bitong.agent.matching.semantic import default_embedder

    emb = default_embedder()
    assert emb is not None
    vocab = default_vocabulary()
    ts = tools()
    built = Index.build(ts, vocabulary=vocab, embedder=emb)
    built = built.with_vectors({a.name: (a.sha256, emb.passages(a.vector_texts())) for a in built.pending_vectors()})
    decoded: list[bytes] = []
    real = ToolAnalysis.from_bytes.__func__   # type: ignore[attr-defined]
    monkeypatch.setattr(ToolAnalysis, "from_bytes", classmethod(lambda cls, data: decoded.append(data) or real(cls, data)))
    at_restore = Index.restore(stored(built, ts), vocabulary=vocab, embedder=emb, saved=built.saved_postings())
    lexical = Index.restore(stored(built, ts), vocabulary=vocab, saved=built.saved_postings())
    attached = lexical.with_embedder(emb)
    assert decoded == [], "the vectors were read from the stored bytes"
    for index in (at_restore, attached):
        assert index.semantic_ready and not index.pending_vectors()
        assert answers(index) == answers(built)
    assert not lexical.semantic_ready


def test_stored_vectors_are_read_for_their_model_only_and_a_cut_analysis_is_refused() -> None:
    from bitong.agent.matching.semantic import DIM

    a = analyze(tools()[0], default_vocabulary())._replace(vectors=bytes(4 * DIM * 2), vectors_model="m1")
    data = a.to_bytes()
    vecs = ToolAnalysis.stored_vectors(data, "m1")
    assert vecs is not None and vecs.shape == (2, DIM)
    assert ToolAnalysis.stored_vectors(data, "m2") is None and ToolAnalysis.stored_vectors(b"junk", "m1") is None
    assert ToolAnalysis.from_bytes(data) == a
    with pytest.raises(ValueError):
        ToolAnalysis.from_bytes(data[:-5])
