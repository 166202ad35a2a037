"""Fit the matcher's shipped prior weights (SEMANTIC_WEIGHTS / LEXICAL_WEIGHTS in agent/match/index.py).

    python benchmarks/fit_priors.py [--eval ../shared/eval] [--candidates 8]

On the DEVELOPMENT registries only — the shared dev set and every
benchmarks/devsets/*; never the blind sets, which stay the
test of what this script produces. Each registry is built as it serves
(lexical index, vectors, its own calibration; vocabulary on); every labelled
request's candidates (``index.evidence``) give one row of evidence each,
labelled 1 when the candidate is among the request's expected tools (a NONE
request gives no ranking rows: it has no right candidate). The rows of all
sets are fitted by bitong.agent.matching.calibrate.fit (class-balanced logistic
regression, an L2 pull of strength 1 towards the weights shipped now).

Printed: the fitted weights with the model (sem=True) and without
(sem=False); a leave-one-set-out cross-validation (fit on the others, score the
one left out at the default threshold 0.5) of the shipped weights and of the fitted
ones, each used as they are and as the prior the held-out registry's own
calibration starts from (what serving does); and the dict literals to paste.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Mapping, Sequence

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(0, HERE)

from bitong.v1.agent_pb2 import ToolDef  # noqa: E402

from bitong.agent.matching import calibrate as calibrate_mod   # noqa: E402
from bitong.agent.matching import Calibration, Index, MatchResult   # noqa: E402
from bitong.agent.matching.calibrate import LEXICAL_FEATURES, SEMANTIC_FEATURES, _row, calibrate, fit   # noqa: E402
from bitong.agent.matching.evaluate import Query, Report, read_queries, score   # noqa: E402
from bitong.agent.matching.index import (  # noqa: E402
    DECISION_FEATURES,
    DECISION_SHARE,
    DEFAULT_THRESHOLD,
    LEXICAL_WEIGHTS,
    SEMANTIC_WEIGHTS,
    _logit,
    _sigmoid,
)
from bitong.agent.matching.semantic import default_embedder   # noqa: E402
from bitong.agent.matching.vocabulary import load_vocabulary   # noqa: E402
from bench_match import DEFAULT_EVAL, read_tools  # noqa: E402


def dev_sets(eval_dir: str) -> dict[str, tuple[str, str]]:
    """The development registries: name -> (registry folder, query file). No blind set, ever."""
    sets = {"dev": (os.path.join(eval_dir, "registry"), os.path.join(eval_dir, "dev_queries.tsv"))}
    for name in sorted(os.listdir(os.path.join(HERE, "devsets"))):
        folder = os.path.join(HERE, "devsets", name)
        sets[name] = (os.path.join(folder, "registry"), os.path.join(folder, "queries.tsv"))
    return sets


def serving(tools: list[ToolDef], vocabulary: object, emb: object) -> Index:
    """As the registry serves it: lexical index, then vectors, then its own calibration."""
    index = Index.build(tools, vocabulary=vocabulary, embedder=emb)  # type: ignore[arg-type]
    if emb is not None:
        index = index.with_vectors({a.name: (a.sha256, emb.passages(a.vector_texts()))  # type: ignore[attr-defined]
                                    for a in index.pending_vectors()})
    return calibrate(index, {t.name: t for t in tools})


def ranking_rows(index: Index, queries: list[Query], sem: bool, feats: Sequence[str],
                 candidates: int) -> tuple[list[list[float]], list[int]]:
    """One row per candidate of each labelled request (NONE requests give none)."""
    rows: list[list[float]] = []
    labels: list[int] = []
    for q in queries:
        if not q.expected:
            continue
        hits, _ = index.evidence(q.text, semantic=sem)
        for h in hits[:candidates]:
            rows.append(_row(h.evidence, feats))
            labels.append(1 if h.name in q.expected else 0)
    return rows, labels


def scored(index: Index, queries: list[Query], sem: bool, weights: Mapping[str, float] | None) -> Report:
    """The set's figures at threshold 0.5, with these weights as they are (None: the index's own calibration)."""
    results = []
    for q in queries:
        if weights is None:
            hits, _ = index.evidence(q.text, semantic=sem)
        else:
            hits, _ = index.evidence(q.text, semantic=sem, weights=weights, calibration=Calibration(weights))
        top = hits[:3]
        results.append(MatchResult(bool(top) and top[0].score >= DEFAULT_THRESHOLD, top, ""))
    return score(queries, results)


def with_prior(tools: list[ToolDef], lexical: Index, sem_prior: Mapping[str, float],
               lex_prior: Mapping[str, float]) -> Index:
    """The registry's own calibration, started from (and pulled towards) these priors instead of the shipped ones."""
    saved = calibrate_mod.SEMANTIC_WEIGHTS, calibrate_mod.LEXICAL_WEIGHTS
    calibrate_mod.SEMANTIC_WEIGHTS, calibrate_mod.LEXICAL_WEIGHTS = dict(sem_prior), dict(lex_prior)
    try:
        start = lexical.with_calibration(Calibration(dict(sem_prior)), Calibration(dict(lex_prior)))
        return calibrate(start, {t.name: t for t in tools})
    finally:
        calibrate_mod.SEMANTIC_WEIGHTS, calibrate_mod.LEXICAL_WEIGHTS = saved


def literal(name: str, w: Mapping[str, float], feats: Sequence[str]) -> str:
    """``NAME = {...}`` in the order of the features, two decimals, wrapped as in index.py."""
    items = [f'"{k}": {round(w[k], 2)}' for k in ("bias", *feats)]
    lines, line = [], f"{name} = {{"
    indent = " " * (len(name) + 4)
    for i, item in enumerate(items):
        piece = item + ("}" if i == len(items) - 1 else ", ")
        if len(line) + len(piece) > 118:
            lines.append(line.rstrip())
            line = indent
        line += piece
    lines.append(line)
    return "\n".join(lines)


def fmt(rep: Report) -> str:
    return f"{rep.hit1:.3f}/{rep.hit3:.3f}/{rep.none_acc:.3f}"



Served = tuple[frozenset[str], list[str], dict[str, float]]   # expected tools, the best three, the best's evidence


def decision_evidence(data: Mapping[str, tuple[list[ToolDef], list[Query], Index, Index]],
                      ) -> tuple[dict[str, list[Served]], dict[tuple[str, str], list[dict[str, float]]]]:
    """Each set's requests as served, and (registry, other set) -> the best candidate's evidence when the
    other set's tool requests are asked of that registry (off-topic: each is a NONE there)."""
    served: dict[str, list[Served]] = {}
    off: dict[tuple[str, str], list[dict[str, float]]] = {}
    for name, (_, queries, _, index) in data.items():
        served[name] = []
        for q in queries:
            hits, _ = index.evidence(q.text)
            best = dict(hits[0].evidence, score=hits[0].score) if hits else {}   # the score as served
            served[name].append((frozenset(q.expected), [h.name for h in hits[:3]], best))
        for other, (_, others, _, _) in data.items():
            if other != name:
                # about as many as the registries' own NONE requests
                asked = [index.evidence(q.text)[0] for q in others[::7] if q.expected]
                off[(name, other)] = [dict(hits[0].evidence) for hits in asked if hits]
    return served, off


def decision_model(served: Mapping[str, list[Served]], off: Mapping[tuple[str, str], list[dict[str, float]]],
                   names: Sequence[str], strength: float) -> dict[str, float]:
    """The decision model: the best candidate of each labelled request as served, 1 when it is a right
    tool, 0 for a NONE request (a wrong best tool gives no row); plus off-topic requests. Without those
    the model learns that a candidate far ahead of the others is right, even when every candidate is far
    from the request."""
    rows: list[list[float]] = []
    labels: list[int] = []
    for name in names:
        for expected, best, evidence in served[name]:
            if best and (not expected or best[0] in expected):
                rows.append(_row(evidence, DECISION_FEATURES))
                labels.append(1 if expected else 0)
        for other in names:
            for evidence in off.get((name, other), []):
                rows.append(_row(evidence, DECISION_FEATURES))
                labels.append(0)
    return fit(rows, labels, {"bias": 0.0}, DECISION_FEATURES, strength=strength)


def decided(served: list[Served], weights: Mapping[str, float] | None) -> tuple[float, float, float]:
    """hit@1 / hit@3 / none_acc at the default threshold, with the shipped decision blend and ``weights``."""
    h1 = h3 = n_in = n_none = right_none = 0
    for expected, best, evidence in served:
        if not best:
            score = 0.0   # no candidate at all
        elif weights is None:
            score = evidence["score"]
        else:
            score = DECISION_SHARE * _sigmoid(_logit(weights, evidence)) + (1.0 - DECISION_SHARE) * evidence["calibrated"]
        found = score >= DEFAULT_THRESHOLD
        if not expected:
            n_none += 1
            right_none += not found
        else:
            n_in += 1
            h1 += found and best[0] in expected
            h3 += found and any(b in expected for b in best)
    return h1 / max(n_in, 1), h3 / max(n_in, 1), right_none / max(n_none, 1)


def fit_decision(data: Mapping[str, tuple[list[ToolDef], list[Query], Index, Index]],
                 strength: float) -> dict[str, float]:
    """The decision model on every set, after a leave-one-set-out check against the shipped one."""
    served, off = decision_evidence(data)
    names = list(data)
    print(f"\ndecision model, leave-one-set-out at threshold {DEFAULT_THRESHOLD} (hit@1/hit@3/none_acc)")
    print(f"    {'held out':9s} {'shipped':>18s} {'fitted on the others':>22s}")
    sums = {"shipped": [0.0, 0.0, 0.0], "fitted": [0.0, 0.0, 0.0]}
    for held in names:
        w = decision_model(served, off, [n for n in names if n != held], strength)
        shipped, fitted_ = decided(served[held], None), decided(served[held], w)
        for k, r in (("shipped", shipped), ("fitted", fitted_)):
            sums[k] = [a + b / len(names) for a, b in zip(sums[k], r)]
        print(f"    {held:9s} {'{:.3f}/{:.3f}/{:.3f}'.format(*shipped):>18s} "
              f"{'{:.3f}/{:.3f}/{:.3f}'.format(*fitted_):>22s}")
    print(f"    {'mean':9s} {'{:.3f}/{:.3f}/{:.3f}'.format(*sums['shipped']):>18s} "
          f"{'{:.3f}/{:.3f}/{:.3f}'.format(*sums['fitted']):>22s}")
    return decision_model(served, off, names, strength)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--eval", default=DEFAULT_EVAL, help="the shared eval folder (registry/ and dev_queries.tsv)")
    ap.add_argument("--candidates", type=int, default=8, help="candidates per request that give rows")
    ap.add_argument("--strength", type=float, default=1.0, help="L2 pull towards the shipped weights")
    ap.add_argument("--decision-strength", type=float, default=0.05, help="L2 pull of the decision model towards 0")
    args = ap.parse_args(argv)
    started = time.perf_counter()
    vocab = load_vocabulary() or None
    emb = default_embedder()
    if emb is None:
        print("the model is not available: only the lexical weights can be fitted")
    sets = dev_sets(args.eval)
    data: dict[str, tuple[list[ToolDef], list[Query], Index, Index]] = {}
    for name, (reg, qfile) in sets.items():
        tools = read_tools(reg)
        queries = read_queries(qfile)
        lexical = Index.build(tools, vocabulary=vocab, embedder=emb)
        if emb is not None:
            lexical = lexical.with_vectors({a.name: (a.sha256, emb.passages(a.vector_texts()))
                                            for a in lexical.pending_vectors()})
        index = calibrate(lexical, {t.name: t for t in tools})
        data[name] = (tools, queries, lexical, index)
        print(f"{name}: {len(tools)} tools, {len(queries)} queries "
              f"({sum(not q.expected for q in queries)} NONE)", flush=True)

    modes = [(True, SEMANTIC_FEATURES, SEMANTIC_WEIGHTS, "SEMANTIC_WEIGHTS"),
             (False, LEXICAL_FEATURES, LEXICAL_WEIGHTS, "LEXICAL_WEIGHTS")]
    if emb is None:
        modes = modes[1:]
    rows_of: dict[tuple[str, bool], tuple[list[list[float]], list[int]]] = {}
    for name, (_, queries, _, index) in data.items():
        for sem, feats, _, _ in modes:
            rows_of[(name, sem)] = ranking_rows(index, queries, sem, feats, args.candidates)

    def fitted(sem: bool, names: Sequence[str]) -> dict[str, float]:
        feats, prior = (SEMANTIC_FEATURES, SEMANTIC_WEIGHTS) if sem else (LEXICAL_FEATURES, LEXICAL_WEIGHTS)
        rows = [r for n in names for r in rows_of[(n, sem)][0]]
        labels = [y for n in names for y in rows_of[(n, sem)][1]]
        return fit(rows, labels, prior, feats, strength=args.strength)

    final: dict[bool, dict[str, float]] = {}
    print(f"\nfitted on {', '.join(data)} (top {args.candidates} candidates of each labelled request, "
          f"strength {args.strength}):")
    for sem, feats, prior, _label in modes:
        w = fitted(sem, list(data))
        final[sem] = w
        n_rows = sum(len(rows_of[(n, sem)][1]) for n in data)
        n_pos = sum(sum(rows_of[(n, sem)][1]) for n in data)
        print(f"  sem={sem}: {n_rows} rows ({n_pos} positive)")
        print(f"    {'feature':8s} {'shipped':>8s} {'fitted':>8s}")
        for f in ("bias", *feats):
            print(f"    {f:8s} {prior.get(f, 0.0):8.2f} {w[f]:8.2f}")

    print(f"\nleave-one-set-out cross-validation, hit@1/hit@3/none_acc at threshold {DEFAULT_THRESHOLD}")
    print("  (fixed: the weights used as they are; +calibration: as the prior the held-out registry's own")
    print("   calibration starts from, which is how a registry serves)")
    for sem, _feats, prior, _label in modes:
        print(f"  sem={sem}")
        print(f"    {'held out':9s} {'shipped fixed':>18s} {'shipped +calib':>18s} {'fitted fixed':>18s} "
              f"{'fitted +calib':>18s}")
        sums: dict[str, list[Report]] = {}
        for held in data:
            tools, queries, lexical, index = data[held]
            w = fitted(sem, [n for n in data if n != held])
            other = LEXICAL_WEIGHTS if sem else SEMANTIC_WEIGHTS  # the other mode's prior: it does not score here
            cal_idx = with_prior(tools, lexical, w if sem else other, w if not sem else other)
            reps = {"shipped fixed": scored(index, queries, sem, prior),
                    "shipped +calib": scored(index, queries, sem, None),
                    "fitted fixed": scored(index, queries, sem, w),
                    "fitted +calib": scored(cal_idx, queries, sem, None)}
            for k, r in reps.items():
                sums.setdefault(k, []).append(r)
            print(f"    {held:9s} " + " ".join(f"{fmt(r):>18s}" for r in reps.values()), flush=True)
        mean = {k: (sum(r.hit1 for r in v) / len(v), sum(r.hit3 for r in v) / len(v),
                    sum(r.none_acc for r in v) / len(v)) for k, v in sums.items()}
        print(f"    {'mean':9s} " + " ".join(f"{'{:.3f}/{:.3f}/{:.3f}'.format(*m):>18s}" for m in mean.values()))

    decision: dict[str, float] = {}
    if emb is not None:
        decision = fit_decision(data, args.decision_strength)

    print("\nto paste into bitong/agent/matching/index.py (fitted on every development set):")
    for sem, feats, _, label in modes:
        print(literal(label, final[sem], feats))
    if decision:
        print(literal("DECISION_WEIGHTS", decision, DECISION_FEATURES))
    print(f"\nfit_priors: {time.perf_counter() - started:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
