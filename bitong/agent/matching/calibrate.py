"""Per-registry calibration: the weights of the evidence, fitted on pseudo-requests from the tools' own texts.

One absolute cut-off cannot fit every registry: shares and similarities run
higher where tools are few and far apart than where they are many and close.
So each registry fits its own weights, without any eval query, on requests it
makes from its own tools:

* a tool's ``intent`` asked as a request, scored against the tool seen
  without its intent (its other fields, and a vector of its display and
  keywords): a paraphrase of what the tool does. The tool is a positive;
  the other candidates are negatives (ranking);
* the same request with the tool left out of the registry: its best
  remaining candidate is a negative (a request for a tool that is not
  there, in the registry's own domain: the hardest ``found: false``);
* its ``why`` asked as a request: positive for the tool, negatives as above;
* each ``non_goals`` line asked as a request: a negative for the tool.

A weighted logistic regression (Newton steps, an L2 pull towards the
shipped weights so that a small registry keeps sensible ones) gives the
weights, one set with the model and one lexical. It runs in the cache
agent's background thread, after the vectors.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from bitong.v1.agent_pb2 import ToolDef

from bitong.agent.matching.index import LEXICAL_WEIGHTS, SEMANTIC_WEIGHTS, Calibration, Hit, Index, analyze

__all__ = ["MAX_TOOLS", "calibrate", "fit"]

MAX_TOOLS = 120     # tools sampled for pseudo-requests; enough to fit nine weights
PRIOR_STRENGTH = 4.0
# Features whose raw values are small (differences of cosines): scaled so the prior pulls them alike.
_SCALE = {"gap": 20.0, "ng_sem": 20.0}
_SIGN = {"ng_lex": -1.0, "ng_sem": -1.0, "op_miss": -1.0}
SEMANTIC_FEATURES = ("share", "wshare", "tcov", "op_miss", "lrank", "lgap", "kw", "ng_lex", "z", "gap", "srank", "ng_sem", "ref")
LEXICAL_FEATURES = ("share", "wshare", "tcov", "op_miss", "lrank", "lgap", "kw", "ng_lex", "ref")


def _row(e: Mapping[str, float], names: Sequence[str]) -> list[float]:
    return [1.0] + [_SIGN.get(f, 1.0) * e.get(f, 0.0) * _SCALE.get(f, 1.0) for f in names]


def fit(rows: list[list[float]], labels: list[int], prior: Mapping[str, float], names: Sequence[str],
        strength: float | None = None) -> dict[str, float]:
    """Weights (in the index's raw units) of a class-balanced logistic regression with an L2 pull to ``prior``."""
    x = np.asarray(rows, dtype=np.float64)
    y = np.asarray(labels, dtype=np.float64)
    pos = max(float(y.sum()), 1.0)
    neg = max(float(len(y) - y.sum()), 1.0)
    sw = np.where(y > 0, len(y) / (2 * pos), len(y) / (2 * neg))
    theta0 = np.asarray([prior["bias"]] + [prior.get(f, 0.0) / _SCALE.get(f, 1.0) for f in names])
    theta = theta0.copy()
    reg = np.full(len(theta), PRIOR_STRENGTH if strength is None else strength)

    def loss(t: np.ndarray) -> float:
        z = x @ t
        return float(np.sum(sw * (np.logaddexp(0.0, z) - y * z)) + 0.5 * np.sum(reg * (t - theta0) ** 2))

    current = loss(theta)
    for _ in range(50):
        p = 1.0 / (1.0 + np.exp(-np.clip(x @ theta, -30, 30)))
        grad = x.T @ (sw * (p - y)) + reg * (theta - theta0)
        hess = (x * (sw * p * (1 - p))[:, None]).T @ x + np.diag(reg)
        step = np.linalg.solve(hess, grad)
        t = 1.0
        while t > 1e-4:  # damped Newton: never a step that makes the fit worse
            candidate = theta - t * step
            value = loss(candidate)
            if value <= current:
                break
            t *= 0.5
        else:
            break
        theta, improved = candidate, current - value
        current = value
        if improved < 1e-9:
            break
    out = {"bias": float(theta[0])}
    for i, f in enumerate(names, start=1):
        out[f] = float(theta[i]) * _SCALE.get(f, 1.0)
    for f, v in prior.items():
        out.setdefault(f, v)
    return out


def _sample(names: list[str]) -> list[str]:
    if len(names) <= MAX_TOOLS:
        return names
    step = len(names) / MAX_TOOLS
    return [names[int(i * step)] for i in range(MAX_TOOLS)]


def _held_out(tool: ToolDef) -> ToolDef:
    copy = ToolDef()
    copy.CopyFrom(tool)
    copy.intent = ""
    return copy


def calibrate(index: Index, tools: Mapping[str, ToolDef]) -> Index:
    """The index with weights fitted on this registry's own pseudo-requests (see the module docstring).

    Semantic weights only when the index is :attr:`~Index.semantic_ready`.
    A registry too small to say anything (fewer than 3 tools) keeps the prior.
    """
    names = sorted(n for n in tools if n in index)
    if len(names) < 3:
        return index
    sample = _sample(names)
    semantic = index.semantic_ready and index.embedder is not None
    emb = index.embedder
    asks: list[tuple[str, str, str]] = []   # (request, tool, kind)
    for name in sample:
        tool = tools[name]
        if tool.intent.strip():
            asks.append((tool.intent, name, "intent"))
        if len(tool.why.strip()) >= 4:
            asks.append((tool.why, name, "why"))
        a = index.analysis(name)
        if a is not None:
            for _, _, text in a.non_goals[:2]:
                asks.append((text, name, "non_goal"))
    held = {name: analyze(_held_out(tools[name]), index.vocabulary) for name in sample}
    qvecs: list[np.ndarray | None] = [None] * len(asks)
    hvecs: dict[str, np.ndarray] = {}
    if semantic and emb is not None:
        for i, (text, _, _) in enumerate(asks):
            qvecs[i] = emb.query(text)
        texts = [f"{tools[n].display}" + (" (" + ", ".join(tools[n].trigger_keywords) + ")"
                                          if tools[n].trigger_keywords else "") for n in sample]
        for n, v in zip(sample, emb.passages(texts)):
            hvecs[n] = v

    if semantic and emb is not None:
        # The registry's own requests as a background: each tool's mean similarity to them (see Calibration.hub).
        background = [v for v, (_, _, kind) in zip(qvecs, asks) if v is not None and kind != "non_goal"]
        if background:
            names_with = [n for n in names if index.has_vectors(n)]
            tool_vecs = np.stack([index.tool_vector(n) for n in names_with])
            hubs = (np.stack(background) @ tool_vecs.T).mean(axis=0)
            hub = {n: float(h) for n, h in zip(names_with, hubs)}
            index = index.with_calibration(index.calibration._replace(hub=hub))

    def examples(sem: bool, feats: Sequence[str]) -> tuple[list[list[float]], list[int]]:
        rows: list[list[float]] = []
        labels: list[int] = []

        def add(hit: Hit, label: int) -> None:
            rows.append(_row(hit.evidence, feats))
            labels.append(label)

        for (text, name, kind), qv in zip(asks, qvecs):
            if kind == "non_goal":
                hits, _ = index.evidence(text, semantic=sem, query_vector=qv)
                for h in hits[:3]:
                    if h.name == name:
                        add(h, 0)
                continue
            ho = (held[name], hvecs[name]) if kind == "intent" and sem and name in hvecs else None
            if kind == "intent" and not sem:
                ho = (held[name], np.zeros(0))
            hits, _ = index.evidence(text, semantic=sem, query_vector=qv, held_out=ho)
            others = 0
            for h in hits[:6]:
                if h.name == name:
                    add(h, 1)
                elif others < 3:
                    add(h, 0)
                    others += 1
            loo, _ = index.evidence(text, semantic=sem, query_vector=qv, exclude=name)
            if loo:
                add(loo[0], 0)
        return rows, labels

    lex_rows, lex_labels = examples(False, LEXICAL_FEATURES)
    lexical = index.lexical_calibration
    if sum(lex_labels) >= 3:
        lexical = Calibration(fit(lex_rows, lex_labels, LEXICAL_WEIGHTS, LEXICAL_FEATURES), samples=len(lex_rows))
    full = index.calibration
    if semantic:
        rows, labels = examples(True, SEMANTIC_FEATURES)
        if sum(labels) >= 3:
            full = Calibration(fit(rows, labels, SEMANTIC_WEIGHTS, SEMANTIC_FEATURES), samples=len(rows),
                               hub=index.calibration.hub)
    return index.with_calibration(full, lexical)

