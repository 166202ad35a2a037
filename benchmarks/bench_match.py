"""Match benchmark: bitong's matcher (bitong.agent.matching) beside rank_bm25, bm25s and the embedding model alone.

    python benchmarks/bench_match.py [--quick] [--eval ../shared/eval] [--tools 10000]

One run prints three parts, the peers measured in the same process:

* quality on every labelled set: the shared dev set, the development sets
  benchmarks/devsets/{office,plugins} and the blind sets
  benchmarks/blind/*: hit@1, hit@3, none_acc and mrr of
  bitong (vocabulary + model, --no-vocabulary, --no-semantic), of rank_bm25
  and bm25s (character bigrams plus English words over display, intent, why
  and keywords; generously, at the threshold that suits them best on the very
  set they are scored on, and by ranking alone) and of the embedding model
  alone (the cosine of the request with "display: intent"; its threshold is
  the best one on ANOTHER set: the dev set's for every other set, the
  development sets' for the dev set);
* latency of Index.match (p50/p99, in process, one thread) at the 40 dev
  tools and at 10,000 tools (dev tools plus benchmarks/synthetic.py): with
  the model on every query a text the model has not seen (its request cache
  cleared before each, outside the timer), the same queries again from the
  cache, and lexical alone under each twin (pure and compiled); beside
  rank_bm25, bm25s and one emb.query;
* building: the cold lexical index of 10,000 tools, their vectors (time a
  tool, the projected total; --quick computes 500 and extrapolates when all
  would take over three minutes), a restart from stored analyses with their
  vectors (Index.restore), the re-index after one changed tool, memory.

Vectors computed once are kept in benchmarks/results/.bench_match_vectors.npz
(keyed by model and text) so a later run, quick ones too, serves 10,000 tools
with their real vectors; without them a quick run serves the 10,000-tool
figures with stand-in vectors (the computed ones reused) and says so.
Needs benchmarks/requirements.txt.
"""

from __future__ import annotations

import argparse
import gc
import glob
import hashlib
import os
import re
import statistics
import subprocess
import sys
import time
import tracemalloc
from collections.abc import Callable
from typing import Any

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(0, HERE)

from bitong.v1.agent_pb2 import ToolDef  # noqa: E402
from bitong.parser import parse_file   # noqa: E402

from bitong.agent.matching import Hit, Index, MatchResult, _backend   # noqa: E402
from bitong.agent.matching.calibrate import calibrate   # noqa: E402
from bitong.agent.matching.evaluate import Query, Report, read_queries, score   # noqa: E402
from bitong.agent.matching.semantic import USEEmbedder, default_embedder   # noqa: E402
from bitong.agent.matching.vocabulary import Vocabulary, load_vocabulary   # noqa: E402
from synthetic import synthetic_queries, synthetic_tools  # noqa: E402

ROOT = os.path.dirname(HERE)
DEFAULT_EVAL = os.path.join(ROOT, "..", "shared", "eval")
VECTOR_CACHE = os.path.join(HERE, "results", ".bench_match_vectors.npz")
TARGET_HIT1, TARGET_HIT3, TARGET_NONE = 0.80, 0.92, 0.80
QUICK_VECTOR_BUDGET_S = 180.0  # --quick computes every vector only when that takes less than this
QUICK_VECTORS = 500            # ... and otherwise this many, the rest extrapolated
_TOKEN = re.compile(r"[a-z0-9]+|[\u4e00-\u9fff]+")


def label_sets(eval_dir: str, queries_file: str | None = None) -> dict[str, tuple[str, str, str]]:
    """name -> (kind, registry folder, query file), dev first."""
    sets = {"dev": ("dev", os.path.join(eval_dir, "registry"),
                    queries_file or os.path.join(eval_dir, "dev_queries.tsv"))}
    for name in sorted(os.listdir(os.path.join(HERE, "devsets"))):
        sets[name] = ("devset", os.path.join(HERE, "devsets", name, "registry"),
                      os.path.join(HERE, "devsets", name, "queries.tsv"))
    for name in sorted(os.listdir(os.path.join(HERE, "blind"))):
        sets[name] = ("blind", os.path.join(HERE, "blind", name, "registry"),
                      os.path.join(HERE, "blind", name, "queries.tsv"))
    return sets


def read_tools(registry: str) -> list[ToolDef]:
    return [parse_file(p) for p in sorted(glob.glob(os.path.join(registry, "*", "TOOL.hdlp")))]


# ---------------------------------------------------------------- the peers


def bigram_tokens(text: str) -> list[str]:
    """The peers' tokeniser: English words and CJK character bigrams."""
    out: list[str] = []
    for m in _TOKEN.findall(text.lower()):
        if m[0].isascii():
            out.append(m)
        else:
            out.extend(m[i:i + 2] for i in range(max(1, len(m) - 1)))
    return out


def doc_text(t: ToolDef) -> str:
    return " ".join([t.display, t.intent, t.why, " ".join(t.trigger_keywords)])


Ranker = Callable[[str, int], list[tuple[str, float]]]


def rank_bm25_engine(tools: list[ToolDef]) -> Ranker:
    from rank_bm25 import BM25Okapi

    names = [t.name for t in tools]
    bm = BM25Okapi([bigram_tokens(doc_text(t)) or ["_"] for t in tools])

    def rank(q: str, k: int) -> list[tuple[str, float]]:
        scores = bm.get_scores(bigram_tokens(q))
        top = scores.argsort()[::-1][:k]
        return [(names[i], float(scores[i])) for i in top]

    return rank


def bm25s_engine(tools: list[ToolDef]) -> Ranker:
    import bm25s

    names = [t.name for t in tools]
    retriever = bm25s.BM25()
    retriever.index([bigram_tokens(doc_text(t)) or ["_"] for t in tools], show_progress=False)

    def rank(q: str, k: int) -> list[tuple[str, float]]:
        toks = bigram_tokens(q) or ["_"]
        ids, scores = retriever.retrieve([toks], k=min(k, len(names)), show_progress=False, n_threads=1)
        return [(names[i], float(s)) for i, s in zip(ids[0], scores[0])]

    return rank


def embedding_engine(tools: list[ToolDef], emb: USEEmbedder) -> Ranker:
    """The model alone: cosine of the request with each tool's "display: intent"."""
    names = [t.name for t in tools]
    matrix = emb.passages([f"{t.display}: {t.intent}" for t in tools])

    def rank(q: str, k: int) -> list[tuple[str, float]]:
        sims = matrix @ emb.query(q)
        top = np.argsort(-sims)[:k]
        return [(names[i], float(sims[i])) for i in top]

    return rank


def bitong_engine(index: Index, semantic: bool = True) -> Ranker:
    def rank(q: str, k: int) -> list[tuple[str, float]]:
        return [(h.name, h.score) for h in index.match(q, k, semantic=semantic).hits]

    return rank


def at_threshold(ranked: list[list[tuple[str, float]]], th: float, positive: bool = True) -> list[MatchResult]:
    """Found when the first score reaches ``th`` (and, for BM25, is above 0: a shared term at all)."""
    return [MatchResult(bool(r) and r[0][1] >= th and (r[0][1] > 0 or not positive),
                        [Hit(n, s, ()) for n, s in r], "") for r in ranked]


def best_threshold(queries: list[Query], ranked: list[list[tuple[str, float]]],
                   positive: bool = True) -> tuple[float, Report]:
    """The threshold with the best hit@1 + none_acc on these queries (and its report)."""
    tops = sorted({r[0][1] for r in ranked if r})
    best: tuple[float, float, Report] | None = None
    for th in [-1.0, *tops, float("inf")]:
        rep = score(queries, at_threshold(ranked, th, positive))
        key = rep.hit1 + rep.none_acc
        if best is None or key > best[0]:
            best = (key, th, rep)
    assert best is not None
    return best[1], best[2]


# ---------------------------------------------------------------- the serving index


def serving_index(tools: list[ToolDef], vocabulary: Vocabulary | None, emb: USEEmbedder | None,
                  vectors: Callable[[list[Any]], dict[str, tuple[str, np.ndarray]]] | None = None) -> Index:
    """Built as the registry builds it: lexical index, then the tools' vectors, then the calibration."""
    index = Index.build(tools, vocabulary=vocabulary, embedder=emb)
    if emb is not None:
        pending = index.pending_vectors()
        got = vectors(pending) if vectors is not None else {a.name: (a.sha256, emb.passages(a.vector_texts()))
                                                             for a in pending}
        index = index.with_vectors(got)
    return calibrate(index, {t.name: t for t in tools})


class VectorStore:
    """Tool-text vectors keyed by model and text, kept between runs (benchmarks/results/, not committed)."""

    def __init__(self, emb: USEEmbedder, path: str | None = None) -> None:
        self.emb, self.path = emb, path or VECTOR_CACHE
        self.known: dict[str, np.ndarray] = {}
        self.added = 0
        try:
            with np.load(self.path, allow_pickle=False) as data:
                if str(data["model"]) == emb.model_id:
                    self.known = dict(zip(data["keys"].tolist(), data["vectors"]))
        except (OSError, KeyError, ValueError):
            pass

    @staticmethod
    def key(text: str) -> str:
        return hashlib.sha1(text.encode()).hexdigest()

    def cached(self, a: Any) -> np.ndarray | None:
        keys = [self.key(t) for t in a.vector_texts()]
        if all(k in self.known for k in keys):
            return np.stack([self.known[k] for k in keys])
        return None

    def compute(self, a: Any) -> np.ndarray:
        texts = a.vector_texts()
        vecs = self.emb.passages(texts)
        for t, v in zip(texts, vecs):
            self.known[self.key(t)] = v
        self.added += 1
        return vecs

    def save(self) -> None:
        if not self.added:
            return
        os.makedirs(os.path.dirname(self.path), exist_ok=True)
        keys = list(self.known)
        tmp = self.path + ".tmp.npz"
        np.savez(tmp, model=np.asarray(self.emb.model_id), keys=np.asarray(keys),
                 vectors=np.stack([self.known[k] for k in keys]).astype(np.float32))
        os.replace(tmp, self.path)


# ---------------------------------------------------------------- timing


def latencies(rank: Ranker, queries: list[str], before: Callable[[], None] | None = None,
              warm: list[str] | None = None) -> list[float]:
    """Seconds per query, after a warm-up pass (``before`` runs outside the timer before each query)."""
    for q in (warm if warm is not None else queries[:20]):
        rank(q, 3)
    out = []
    gc.disable()
    try:
        for q in queries:
            if before is not None:
                before()
            t0 = time.perf_counter()
            rank(q, 3)
            out.append(time.perf_counter() - t0)
    finally:
        gc.enable()
    return out


def pct(xs: list[float], p: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, int(len(s) * p))]


def ms(xs: list[float]) -> str:
    return f"p50 {pct(xs, 0.5) * 1e3:8.3f} ms   p99 {pct(xs, 0.99) * 1e3:8.3f} ms"


def import_cost() -> tuple[float, float]:
    """Seconds for a fresh interpreter to import the matcher and load the vocabulary; then to load the model."""
    code = ("import time; t=time.perf_counter(); import bitong.agent.matching as m; m.Index.build([]); "
            "m.load_vocabulary(); a=time.perf_counter()-t; t=time.perf_counter(); "
            "from bitong.agent.matching.semantic import default_embedder; e=default_embedder(); e.query('x'); "
            "print(a, time.perf_counter()-t)")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    a, b = out.stdout.split()
    return float(a), float(b)


# ---------------------------------------------------------------- the parts


def quality(sets: dict[str, tuple[str, str, str]], vocab: Vocabulary | None, emb: USEEmbedder | None,
            rows: list[dict], quick: bool = False) -> dict[str, list[ToolDef]]:
    """The table of hit@1/hit@3/none_acc/mrr on every labelled set; rows for the dev and blind sets."""
    reports: dict[str, dict[str, Report]] = {}
    notes: dict[str, dict[str, str]] = {}
    emb_ranked: dict[str, tuple[list[Query], list[list[tuple[str, float]]]]] = {}
    registries: dict[str, list[ToolDef]] = {}
    t_all = time.perf_counter()
    for name, (_kind, reg, qfile) in sets.items():
        tools = read_tools(reg)
        if not tools:
            raise SystemExit(f"no TOOL.hdlp under {reg}")
        registries[name] = tools
        queries = read_queries(qfile)
        rep: dict[str, Report] = {}
        note: dict[str, str] = {}
        t0 = time.perf_counter()
        full = serving_index(tools, vocab, emb)
        rep["bitong"] = score(queries, [full.match(q.text, 3) for q in queries])
        rep["bitong --no-semantic"] = score(queries, [full.match(q.text, 3, semantic=False) for q in queries])
        if emb is not None and not quick:  # --quick leaves --no-vocabulary out (run_all's time slice)
            bare = serving_index(tools, None, emb)
            rep["bitong --no-vocabulary"] = score(queries, [bare.match(q.text, 3) for q in queries])
        note["bitong"] = "" if full.semantic_ready else "model unavailable: lexical"
        for peer, make in (("rank_bm25", rank_bm25_engine), ("bm25s", bm25s_engine)):
            engine = make(tools)
            ranked = [engine(q.text, 3) for q in queries]
            th, best = best_threshold(queries, ranked)
            rep[f"{peer} (best threshold)"] = best
            note[f"{peer} (best threshold)"] = f"threshold {th:.2f} on this set"
            rep[f"{peer} (ranking alone)"] = score(queries, at_threshold(ranked, 0.0))
        if emb is not None:
            engine = embedding_engine(tools, emb)
            emb_ranked[name] = (queries, [engine(q.text, 3) for q in queries])
        reports[name] = rep
        notes[name] = note
        print(f"  {name}: {len(tools)} tools, {len(queries)} queries, {time.perf_counter() - t0:.1f} s", flush=True)
    if emb is not None:
        # The model alone, at a threshold picked on a different set.
        dev_th, _ = best_threshold(*emb_ranked["dev"], positive=False)
        devsets = [n for n, (kind, _, _) in sets.items() if kind == "devset"]
        pooled_q = [q for s in devsets for q in emb_ranked[s][0]]
        pooled_r = [r for s in devsets for r in emb_ranked[s][1]]
        devsets_th, _ = best_threshold(pooled_q, pooled_r, positive=False)
        for name, (queries, ranked) in emb_ranked.items():
            th, src = (devsets_th, "the devsets") if name == "dev" else (dev_th, "dev")
            reports[name]["embedding only"] = score(queries, at_threshold(ranked, th, positive=False))
            notes[name]["embedding only"] = f"cosine >= {th:.3f}, picked on {src}"

    print(f"\nquality ({time.perf_counter() - t_all:.0f} s; bitong at its default threshold, never tuned on a set; "
          f"peers at their best threshold ON the set scored; embedding only at a threshold from another set)")
    engines = list(dict.fromkeys(e for rep in reports.values() for e in rep))
    for name, rep in reports.items():
        kind = sets[name][0]
        print(f"\n  {name} ({kind}; {len(registries[name])} tools, n={next(iter(rep.values())).n})")
        print(f"    {'engine':26s} {'hit@1':>6s} {'hit@3':>6s} {'none':>6s} {'mrr':>6s}")
        for e in engines:
            if e in rep:
                r = rep[e]
                print(f"    {e:26s} {r.hit1:6.3f} {r.hit3:6.3f} {r.none_acc:6.3f} {r.mrr:6.3f}  {notes[name].get(e, '')}")
    print("\n  hit@1 / hit@3 / none_acc / mrr, every set side by side:")
    print("    " + f"{'engine':26s}" + "".join(f"{n:>24s}" for n in reports))
    for e in engines:
        cells = []
        for rep in reports.values():
            r = rep.get(e)
            cells.append(f"{r.hit1:.2f}/{r.hit3:.2f}/{r.none_acc:.2f}/{r.mrr:.2f}" if r else "-")
        print("    " + f"{e:26s}" + "".join(f"{c:>24s}" for c in cells))

    dev = reports["dev"]["bitong"]
    rows.append({"what": "dev set hit@1, bitong vs rank_bm25 (its best threshold)", "bitong": dev.hit1,
                 "peer": reports["dev"]["rank_bm25 (best threshold)"].hit1, "peer_name": "rank_bm25",
                 "target": ">= 0.92", "met": dev.hit1 >= 0.92, "note": dev.summary})
    for name, (kind, _, _) in sets.items():
        if kind == "dev":
            continue
        rep, peer = reports[name]["bitong"], reports[name]["rank_bm25 (best threshold)"]
        what = f"{'blind' if kind == 'blind' else 'development'} set {name}"
        for metric, target in (("hit1", TARGET_HIT1), ("hit3", TARGET_HIT3), ("none_acc", TARGET_NONE)):
            label = {"hit1": "hit@1", "hit3": "hit@3", "none_acc": "none_acc"}[metric]
            row = {"what": f"{what} {label}, bitong vs rank_bm25 (its best threshold on the set)",
                   "bitong": getattr(rep, metric), "peer": getattr(peer, metric), "peer_name": "rank_bm25"}
            if kind == "blind":
                row.update(target=f">= {target:.2f}", met=getattr(rep, metric) >= target)
            rows.append(row)
    return registries


def speed_and_build(real: list[ToolDef], n_tools: int, quick: bool, repeat: int, vocab: Vocabulary | None,
                    emb: USEEmbedder | None, rows: list[dict]) -> None:
    """Latency at 40 and at n_tools tools, and the build figures of the big registry."""
    big_tools = real + synthetic_tools(max(0, n_tools - len(real)))
    # What a registry state keeps: each tool with its content hash, so its stored analysis counts as fresh.
    for i, t in enumerate(big_tools):
        if not t.content_sha256:
            t.content_sha256 = f"{i:064x}"
    n = len(big_tools)
    queries = list(dict.fromkeys([*(t for q in read_queries(DEV_QUERIES) for t in [q.text]),
                                  *synthetic_queries(300)]))
    if quick:
        queries = queries[:120]
    warm = synthetic_queries(40, seed=99)  # warm-up texts, not among the timed ones
    print(f"\nbuilding: {n} tools ({len(real)} dev + synthetic); {len(queries)} distinct latency queries")

    # ---- cold lexical build
    def timed(fn: Callable[[], object]) -> tuple[float, float]:
        runs = []
        for _ in range(max(1, repeat)):
            t0 = time.perf_counter()
            fn()
            runs.append(time.perf_counter() - t0)
        return statistics.median(runs), min(runs)

    t0 = time.perf_counter()
    Index.build(big_tools, vocabulary=vocab, embedder=emb)
    first_s = time.perf_counter() - t0
    build_s, build_min = timed(lambda: Index.build(big_tools, vocabulary=vocab, embedder=emb))
    gc.collect()
    tracemalloc.start()
    lexical = Index.build(big_tools, vocabulary=vocab, embedder=emb)
    mem = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    print(f"  cold lexical index (analyse every tool): {build_s:.3f} s median of {repeat} "
          f"(fastest {build_min:.3f} s; {first_s:.3f} s the first time), {build_s / n * 1e6:.0f} us a tool; "
          f"memory {mem / 2**20:.1f} MiB (tracemalloc, tools themselves excluded)")
    rows.append({"what": f"cold lexical index build, {n} tools", "bitong": build_s, "unit": " s",
                 "target": "< 2 s", "met": build_s < 2.0})
    rows.append({"what": f"lexical index memory, {n} tools (tracemalloc)", "bitong": mem / 2**20, "unit": " MiB"})

    index = lexical
    stand_in = False
    if emb is not None:
        store = VectorStore(emb)
        pending = lexical.pending_vectors()
        have = {a.name: (a.sha256, v) for a in pending if (v := store.cached(a)) is not None}
        todo = [a for a in pending if a.name not in have]
        # Time a sample first; compute all only when that fits (always in full mode).
        sample = todo[:min(len(todo), 100)]
        t0 = time.perf_counter()
        computed = {a.name: (a.sha256, store.compute(a)) for a in sample}
        per_tool = (time.perf_counter() - t0) / max(1, len(sample))
        if not sample:  # every vector was in the cache: time 50 tools anyway, for the figure
            timing = pending[:50]
            t0 = time.perf_counter()
            for a in timing:
                emb.passages(a.vector_texts())
            per_tool = (time.perf_counter() - t0) / max(1, len(timing))
        passages = statistics.fmean(len(a.vector_texts()) for a in pending) if pending else 0.0
        projected = per_tool * len(pending)
        rest = todo[len(sample):]
        if quick and per_tool * len(rest) > QUICK_VECTOR_BUDGET_S:
            extra = rest[:max(0, QUICK_VECTORS - len(sample))]
            rest = []
            how = (f"--quick: {len(sample) + len(extra)} of {len(todo)} uncached tools computed, the total "
                   f"extrapolated")
        else:
            extra, rest = rest, []
            how = f"all {len(todo)} uncached tools computed"
        t0 = time.perf_counter()
        computed.update({a.name: (a.sha256, store.compute(a)) for a in extra})
        done = len(sample) + len(extra)
        if extra:
            per_tool = (per_tool * len(sample) + (time.perf_counter() - t0)) / done
            projected = per_tool * len(pending)
        store.save()
        missing = [a for a in pending if a.name not in have and a.name not in computed]
        if missing:
            # Stand-ins: the computed passage vectors reused, so that 10,000 tools can be served;
            # latency depends on the number of vectors, not on their values. Quality is not measured here.
            pool = np.concatenate([v for _, v in computed.values()] + [v for _, v in have.values()])
            j = 0
            for a in missing:
                k = len(a.vector_texts())
                idx = [(j + i) % len(pool) for i in range(k)]
                j += k
                computed[a.name] = (a.sha256, pool[idx])
            stand_in = True
        print(f"  vectors: {per_tool * 1e3:.1f} ms a tool ({passages:.2f} passages a tool, {max(done, 50)} timed), "
              f"projected {projected:.0f} s for all {len(pending)} ({how}; {len(have)} were in "
              f"{os.path.relpath(VECTOR_CACHE, ROOT)})"
              + (f"; the other {len(missing)} served with STAND-IN vectors (computed ones reused)" if stand_in
                 else ""))
        rows.append({"what": f"tool vectors, per tool (projected {projected:.0f} s for {len(pending)})",
                     "bitong": per_tool * 1e3, "unit": " ms",
                     "note": how if done < len(pending) else f"{done} computed"})
        t0 = time.perf_counter()
        index = lexical.with_vectors({**have, **computed})
        with_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        index = calibrate(index, {t.name: t for t in big_tools})
        cal_s = time.perf_counter() - t0
        vec_bytes = sum(len(a.vectors) for a in index.analyses())
        print(f"  with_vectors {with_s:.3f} s; calibration {cal_s:.1f} s; vectors {vec_bytes / 2**20:.1f} MiB")
        rows.append({"what": f"vector memory, {n} tools", "bitong": vec_bytes / 2**20, "unit": " MiB"})
        rows.append({"what": f"calibration, {n} tools (background, after the vectors)", "bitong": cal_s,
                     "unit": " s"})

    # ---- restart from stored analyses (with vectors), as a registry state holds them: the analyses and
    # the saved posting lists (a restart's path), and the analyses alone (a state whose postings do not fit)
    blobs = [index.analysis(t.name).to_bytes() for t in big_tools]  # type: ignore[union-attr]
    stored = list(zip(big_tools, blobs))
    saved = index.saved_postings()
    restore_s, restore_min = timed(lambda: Index.restore(stored, vocabulary=vocab, embedder=emb, saved=saved))
    rebuild_s, _ = timed(lambda: Index.restore(stored, vocabulary=vocab, embedder=emb))
    restored = Index.restore(stored, vocabulary=vocab, embedder=emb, saved=saved)
    assert restored.semantic_ready == index.semantic_ready and not restored.pending_vectors()
    assert restored.postings_restored
    print(f"  restart from stored analyses{' with vectors' if emb else ''} (Index.restore): {restore_s:.3f} s "
          f"(fastest {restore_min:.3f} s; {rebuild_s:.3f} s when the postings are built again), "
          f"{sum(map(len, blobs)) / len(blobs):.0f} bytes a tool stored; semantic ready at once: "
          f"{restored.semantic_ready}")
    rows.append({"what": f"restart from stored analyses with vectors, {n} tools", "bitong": restore_s, "unit": " s",
                 "target": "< 0.5 s", "met": restore_s < 0.5})
    rows.append({"what": f"restart from stored analyses with vectors, postings built again, {n} tools",
                 "bitong": rebuild_s, "unit": " s"})

    # ---- one changed tool
    changed = ToolDef()
    changed.CopyFrom(big_tools[min(len(big_tools) - 1, len(real) + 123)])
    times, vtimes = [], []
    for i in range(20):
        changed.intent = f"查看 第{i}版 的磁盘和日志，返回结果"
        changed.content_sha256 = f"{i:064x}"[::-1]
        t0 = time.perf_counter()
        nxt = index.updated(upsert=[changed])
        times.append(time.perf_counter() - t0)
        if emb is not None:
            t0 = time.perf_counter()
            a = nxt.analysis(changed.name)
            nxt = nxt.with_vectors({a.name: (a.sha256, emb.passages(a.vector_texts()))})  # type: ignore[union-attr]
            vtimes.append(time.perf_counter() - t0)
    assert len(nxt) == len(index)
    print(f"  re-index one changed tool: p50 {statistics.median(times) * 1e3:.2f} ms, max {max(times) * 1e3:.2f} ms"
          + (f"; its vectors then (embed + with_vectors): p50 {statistics.median(vtimes) * 1e3:.1f} ms"
             if vtimes else ""))
    rows.append({"what": f"re-index after one changed tool, {n} tools", "bitong": statistics.median(times) * 1e3,
                 "unit": " ms", "target": "< 5 ms", "met": statistics.median(times) < 0.005})
    a_s, m_s = import_cost()
    print(f"  fresh interpreter: import + vocabulary {a_s * 1e3:.0f} ms; model load + first query {m_s * 1e3:.0f} ms")

    # ---- latency
    small = serving_index(real, vocab, emb)
    sizes = ((len(real), small), (n, index))
    print(f"\nlatency, in process, one thread ({len(queries)} distinct queries; active twin {_backend.BACKEND})"
          + (f"; {n}-tool semantic figures on STAND-IN vectors" if stand_in else ""))
    lat: dict[tuple[str, int], list[float]] = {}
    if emb is not None:
        clear = emb._cache.clear
        xs = latencies(lambda q, k: [("", float(emb.query(q)[0]))], queries, before=clear, warm=warm)
        lat[("model", 0)] = xs
        print(f"  {'the model alone (one emb.query, uncached)':48s} {ms(xs)}")
        for size, idx in sizes:
            lat[("sem", size)] = latencies(bitong_engine(idx), queries, before=clear, warm=warm)
            print(f"  {f'bitong semantic, uncached, {size} tools':48s} {ms(lat[('sem', size)])}")
            for q in queries:  # the cache holds every query now
                emb.query(q)
            lat[("semc", size)] = latencies(bitong_engine(idx), queries)
            print(f"  {f'bitong semantic, cached request, {size} tools':48s} {ms(lat[('semc', size)])}")
    for twin in _backend.backends():
        for size, idx in sizes:
            xs = latencies(bitong_engine(idx.using(twin), semantic=False), queries)
            lat[(f"lex-{twin.name}", size)] = xs
            print(f"  {f'bitong lexical ({twin.name} twin), {size} tools':48s} {ms(xs)}")
    for peer, make in (("rank_bm25", rank_bm25_engine), ("bm25s", bm25s_engine)):
        for size, tools in ((len(real), real), (n, big_tools)):
            xs = latencies(make(tools), queries)
            lat[(peer, size)] = xs
            print(f"  {f'{peer}, {size} tools':48s} {ms(xs)}")

    active = f"lex-{_backend.active.name}"
    p50 = {k: pct(v, 0.5) for k, v in lat.items()}
    p99 = {k: pct(v, 0.99) for k, v in lat.items()}
    note = f"stand-in vectors at {n} tools" if stand_in else ""
    if emb is not None:
        rows.append({"what": "the model alone, one emb.query p50 (uncached)", "bitong": p50[("model", 0)] * 1e3,
                     "unit": " ms"})
        for size, _ in sizes:
            rows.append({"what": f"Match p50, semantic on, uncached request, {size} tools",
                         "bitong": p50[("sem", size)] * 1e3, "peer": p50[("rank_bm25", size)] * 1e3,
                         "peer_name": "rank_bm25", "unit": " ms", "target": "<= 10 ms (goal 2 ms)",
                         "met": p50[("sem", size)] <= 0.010, "note": note if size == n else ""})
            rows.append({"what": f"Match p99, semantic on, uncached request, {size} tools",
                         "bitong": p99[("sem", size)] * 1e3, "unit": " ms"})
            rows.append({"what": f"Match p50, semantic on, cached request, {size} tools",
                         "bitong": p50[("semc", size)] * 1e3, "unit": " ms", "target": "<= 2 ms (goal)",
                         "met": p50[("semc", size)] <= 0.002})
        rows.append({"what": f"Match p50 semantic (uncached), {n} tools / {len(real)} tools",
                     "bitong": p50[("sem", n)] / p50[("sem", len(real))], "target": "<= 2",
                     "met": p50[("sem", n)] <= 2 * p50[("sem", len(real))], "note": note})
    for size, _ in sizes:
        rows.append({"what": f"Match p50, semantic off, {size} tools", "bitong": p50[(active, size)] * 1e3,
                     "peer": p50[("bm25s", size)] * 1e3, "peer_name": "bm25s", "unit": " ms",
                     "target": "<= 0.2 ms", "met": p50[(active, size)] <= 0.0002})
        rows.append({"what": f"Match p99, semantic off, {size} tools", "bitong": p99[(active, size)] * 1e3,
                     "peer": p99[("rank_bm25", size)] * 1e3, "peer_name": "rank_bm25", "unit": " ms"})
    rows.append({"what": f"Match p50 semantic off, {n} tools / {len(real)} tools",
                 "bitong": p50[(active, n)] / p50[(active, len(real))], "target": "<= 2",
                 "met": p50[(active, n)] <= 2 * p50[(active, len(real))]})


DEV_QUERIES = os.path.join(DEFAULT_EVAL, "dev_queries.tsv")


def run(quick: bool = False, eval_dir: str | None = None, queries_file: str | None = None,
        tools: int = 10_000, repeat: int = 5) -> dict:
    """Everything above, printed as it goes; returns the figures as run_all's rows."""
    global DEV_QUERIES
    eval_dir = eval_dir or DEFAULT_EVAL
    DEV_QUERIES = queries_file or os.path.join(eval_dir, "dev_queries.tsv")
    started = time.perf_counter()
    rows: list[dict] = []
    vocab = load_vocabulary() or None
    emb = default_embedder()
    if emb is None:
        print("the model is not available here: bitong is measured lexical only")
    sets = label_sets(eval_dir, queries_file)
    print(f"quality on {len(sets)} labelled sets ({'vocabulary' if vocab else 'no vocabulary'}, "
          f"model {emb.model_id if emb else 'none'}):")
    registries = quality(sets, vocab, emb, rows, quick)
    speed_and_build(registries["dev"], tools, quick, 2 if quick else repeat, vocab, emb, rows)
    print(f"\nbench_match: {time.perf_counter() - started:.0f} s")
    return {"rows": rows}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="no --no-vocabulary column, fewer latency queries, 500 vectors extrapolated")
    ap.add_argument("--eval", default=DEFAULT_EVAL, help="the eval folder (registry/ and dev_queries.tsv)")
    ap.add_argument("--queries", help="query file for the dev set (default: EVAL/dev_queries.tsv)")
    ap.add_argument("--tools", type=int, default=10_000, help="registry size for the speed figures")
    ap.add_argument("--repeat", type=int, default=5, help="runs per build figure (median reported)")
    args = ap.parse_args(argv)
    run(quick=args.quick, eval_dir=args.eval, queries_file=args.queries, tools=args.tools, repeat=args.repeat)
    return 0


if __name__ == "__main__":
    sys.exit(main())
