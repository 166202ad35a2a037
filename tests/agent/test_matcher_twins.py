"""The matcher's twins agree: the same request terms, analyses, hits, scores and matched terms.

The pure twin (agent/text.py and agent/ranking.py) always exists; the compiled
one (the same two files built by Cython as agent._text and agent._ranking)
when it was built. ``BITONG_PURE=1`` only changes which twin Match uses by
default, so both run here (``test_compiled_twin_is_live_when_built`` checks
the default).
"""

from __future__ import annotations

import hashlib
import os
import random
from pathlib import Path

import pytest
from parser import parse_file

import agent
from agent import _backend, matcher
from agent.evaluate import read_queries, score
from agent.matcher import Index, ToolTerms

AGENT = Path(agent.__file__).resolve().parent
SHARED = Path(__file__).resolve().parents[2].parent / "shared" / "eval"
EVAL_FILES = sorted((SHARED / "registry").glob("*/TOOL.hdlp"))
EVAL_MISSING = "../shared/eval/registry is not checked out next to the repository"

needs_compiled = pytest.mark.skipif(_backend.compiled is None,
                                    reason="the compiled twin (agent._text, agent._ranking) is not built")
needs_eval = pytest.mark.skipif(not EVAL_FILES, reason=EVAL_MISSING)


# ---------------------------------------------------------------- the live backend


def test_compiled_twin_is_live_when_built() -> None:
    """The compiled twin serves by default when it was built; BITONG_PURE=1 forces the pure one."""
    forced = os.environ.get("BITONG_PURE", "").strip() not in ("", "0")
    built = all(any(AGENT.glob(f"{mod}*.so")) or any(AGENT.glob(f"{mod}*.pyd")) for mod in ("_text", "_ranking"))
    if forced:
        assert _backend.BACKEND == "pure"
    elif built:
        assert _backend.compiled is not None, "agent._text / agent._ranking are built but do not import"
        assert _backend.BACKEND == "cython"
    else:
        assert _backend.BACKEND == "pure"
    assert Index.build([])._backend is _backend.active


@needs_compiled
def test_the_twins_are_different_code() -> None:
    assert _backend.compiled is not None
    assert _backend.compiled.analyzer is not _backend.pure.analyzer
    assert _backend.compiled.ranker is not _backend.pure.ranker
    assert _backend.compiled.ranker.__module__ == "agent._ranking"
    assert type(_backend.compiled.ranker.rank).__name__ == "cython_function_or_method"
    assert type(_backend.pure.ranker.rank).__name__ == "function"


def test_the_fingerprint_hashes_the_sources_the_twins_are_built_from() -> None:
    """Stored analyses are keyed by the .py sources, which the compiled twin is built from too.

    Were a source unreadable (an install without them), the hash would be a
    per-process token and no stored analysis would ever be trusted.
    """
    digest = hashlib.sha256(matcher._FORMAT)
    for mod in ("matcher.py", "text.py", "vocabulary.py"):
        digest.update((AGENT / mod).read_bytes())
    assert matcher._CODE_HASH == digest.hexdigest()[:16]


# ---------------------------------------------------------------- the same answers


def _eval_tools() -> list:
    return [parse_file(str(p)) for p in EVAL_FILES]


def _variants(tools: list, n: int, seed: int = 3) -> list:
    """``n`` more tools made of the eval tools' own texts, so that common words
    have posting lists long enough to take the ranking's shortcuts (deferred
    words, the preselection)."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        base, other = rng.choice(tools), rng.choice(tools)
        t = type(base)()
        t.CopyFrom(base)
        t.name = f"{base.name}-v{i}"
        t.display = rng.choice([base.display, other.display, base.display + other.display])
        t.intent = rng.choice([base.intent, other.intent + "，" + base.intent])
        if rng.random() < 0.3:
            del t.non_goals[:]
            t.non_goals.append(f"不{other.display}（用 {other.name}）")
        out.append(t)
    return out


def _queries(tools: list, n: int = 400, seed: int = 11) -> list[str]:
    """The dev queries and ``n`` made-up ones: pieces of the tools' texts with
    the shapes a request can hold (paths, URLs, hosts, numbers, durations,
    quotes, command lines, payloads, clause breaks, typos, conversions)."""
    rng = random.Random(seed)
    dev = SHARED / "dev_queries.tsv"
    out = [q.text for q in read_queries(dev)] if dev.exists() else []
    words = [w for t in tools for text in (t.display, t.intent, *t.trigger_keywords) for w in text.split() if w]
    shapes = ["/var/log/app/worker.log", "https://status.example.org/v2/ping", "10.9.8.7:9090", "10.2.3.4 的 3306",
              "二十分钟后", "5 minutes", "3点半", "v1.2.3", "#42", "ops/infra", "redis-server", "DB_PASSWORD",
              "max_connections=200", "`du -sh /var/cache`", '"hello world"', "「今晚停机」", "a.txt", "--force",
              "deploy 用户", "the backup user", "users 表", "example.org", "x@y.com", "{\"a\": 1}", "～/tmp"]
    glue = ["，然后", "; ", " and ", "。", " then ", "：", "说一声 ", "提醒我", " remind me to ", "转成 json",
            "把", "帮我", "看看", "重启", "删掉", "关掉的", "新增了多少", "please ", "what changed in ", ""]
    typos = ["restrat", "chcek", "dcoker", "pnig", "stauts", "srevice"]
    for _ in range(n):
        parts = [rng.choice(words) for _ in range(rng.randint(1, 4))]
        parts += [rng.choice(shapes) for _ in range(rng.randint(0, 2))]
        parts += [rng.choice(glue) for _ in range(rng.randint(0, 3))]
        if rng.random() < 0.1:
            parts.append(rng.choice(typos))
        rng.shuffle(parts)
        out.append(rng.choice(["", " "]).join(parts))
    out += ["", "   ", "apt install htop", "ＤＩＳＫ 还剩多少", "ls -la /tmp", "x" * 300]
    return out


@pytest.fixture(scope="module")
def registries() -> list[tuple[str, Index]]:
    if not EVAL_FILES:
        pytest.skip(EVAL_MISSING)
    tools = _eval_tools()
    return [("eval", Index.build(tools)), ("eval+400", Index.build(tools + _variants(tools, 400)))]


@needs_compiled
@needs_eval
def test_tool_analyses_are_identical() -> None:
    assert _backend.compiled is not None
    tools = _eval_tools()
    tools += _variants(tools, 100)
    fp = matcher.analysis_fingerprint()
    pure = matcher._analyzer(None, _backend.pure)
    compiled = matcher._analyzer(None, _backend.compiled)
    for t in tools:
        a, b = matcher._analyze(t, pure, fp), matcher._analyze(t, compiled, fp)
        assert a == b, t.name
        assert ToolTerms.from_bytes(a.to_bytes()) == b


@needs_compiled
def test_request_terms_are_identical(registries: list[tuple[str, Index]]) -> None:
    assert _backend.compiled is not None
    index = registries[0][1]
    pure, compiled = index.using(_backend.pure), index.using(_backend.compiled)
    for q in _queries(_eval_tools()):
        a = pure._analyzer.request(q, pure._known, pure._entries)
        b = compiled._analyzer.request(q, compiled._known, compiled._entries)
        assert a == b, q
        assert pure._analyzer.query(q) == compiled._analyzer.query(q), q
        assert pure._analyzer.text(q) == compiled._analyzer.text(q), q


@needs_compiled
def test_hits_scores_and_matched_terms_are_identical(registries: list[tuple[str, Index]]) -> None:
    """Same found, hits, scores and matched terms; the traces (every factor, to 3 decimals) too."""
    assert _backend.compiled is not None
    queries = _queries(_eval_tools())
    for label, index in registries:
        pure, compiled = index.using(_backend.pure), index.using(_backend.compiled)
        for q in queries:
            for k in (1, 3, 12):
                assert pure.match(q, k) == compiled.match(q, k), (label, q, k)
            ta: dict[str, list[str]] = {}
            tb: dict[str, list[str]] = {}
            assert pure._rank(q, 5, ta) == compiled._rank(q, 5, tb), (label, q)
            assert ta == tb, (label, q)


@needs_eval
def test_the_eval_registry_scores_the_same_under_every_twin(registries: list[tuple[str, Index]]) -> None:
    """The dev queries' eval, under each twin available (the pure one at least)."""
    dev = SHARED / "dev_queries.tsv"
    if not dev.exists():
        pytest.skip("no dev_queries.tsv")
    queries = read_queries(dev)
    index = registries[0][1]
    reports = [score(queries, [index.using(twin).match(q.text, 3) for q in queries]).summary
               for twin in _backend.backends()]
    assert len(set(reports)) == 1, reports
