"""Per-registry calibration: weights fitted on pseudo-requests made of the registry's own texts."""

from __future__ import annotations

import numpy as np

from bitong.agent.matching import Index
from bitong.agent.matching.calibrate import LEXICAL_FEATURES, calibrate, fit
from bitong.agent.matching.index import LEXICAL_WEIGHTS

from .registry import tool, tools


def test_fit_recovers_the_weights_that_made_the_labels() -> None:
    rng = np.random.default_rng(7)
    names = ("share", "kw")
    true = {"bias": -2.0, "share": 6.0, "kw": 1.5}
    rows, labels = [], []
    for _ in range(4000):
        share, kw = float(rng.random()), float(rng.random() < 0.3)
        p = 1 / (1 + np.exp(-(true["bias"] + true["share"] * share + true["kw"] * kw)))
        rows.append([1.0, share, kw])
        labels.append(int(rng.random() < p))
    got = fit(rows, labels, {"bias": 0.0, "share": 0.0, "kw": 0.0}, names, strength=1e-3)
    # class-balanced: the bias moves by log(neg/pos); the slopes are what the labels say
    assert abs(got["share"] - true["share"]) < 0.8 and abs(got["kw"] - true["kw"]) < 0.5


def test_a_strong_prior_keeps_its_weights_on_little_data() -> None:
    got = fit([[1.0, 0.9, 0.0], [1.0, 0.1, 0.0]], [1, 0], LEXICAL_WEIGHTS, ("share", "kw"), strength=1e6)
    assert abs(got["share"] - LEXICAL_WEIGHTS["share"]) < 1e-3 and abs(got["bias"] - LEXICAL_WEIGHTS["bias"]) < 1e-3


def test_each_registry_gets_its_own_weights_from_its_own_texts() -> None:
    a = tools()
    b = [tool(f"svc-{i}", f"服务{i}状态", f"查看第{i}号服务是否在运行") for i in range(8)]
    cal_a = calibrate(Index.build(a), {t.name: t for t in a}).lexical_calibration
    cal_b = calibrate(Index.build(b), {t.name: t for t in b}).lexical_calibration
    assert cal_a.samples > 0 and cal_b.samples > 0
    assert set(cal_a.weights) >= set(LEXICAL_FEATURES)
    assert cal_a.weights != cal_b.weights


def test_a_registry_too_small_to_say_anything_keeps_the_prior() -> None:
    two = tools()[:2]
    index = Index.build(two)
    assert calibrate(index, {t.name: t for t in two}) is index
    assert index.lexical_calibration.samples == 0 and dict(index.lexical_calibration.weights) == LEXICAL_WEIGHTS


def test_calibration_is_consistent_with_its_own_pseudo_requests() -> None:
    ts = tools()
    index = calibrate(Index.build(ts), {t.name: t for t in ts})
    # a tool's own intent, asked as a request, is found and goes to the tool
    hits = sum(index.match(t.intent, 1).found and index.match(t.intent, 1).hits[0].name == t.name for t in ts)
    assert hits >= len(ts) - 2
