"""One request against one index: the scores, penalties and boosts of Match.

The hot path of Match, split from :mod:`agent.matcher` (which builds, stores
and updates the index and explains the ranking in its docstring) so that it
can be compiled on its own: this same source is built by Cython as
``agent._ranking``, typed by ``agent/_ranking.pxd``, and :mod:`agent._backend`
picks one of the two at import. Both give the same hits, scores and matched
terms (tests/agent/test_matcher_twins.py).

It reads only plain data: a request's terms as tuples ``(feature, surface,
weight, start, clause)`` (:meth:`agent.text.Analyzer.request`) and the
index's :class:`agent.matcher.ToolTerms`, by attribute (for a NamedTuple
that is a C getter; ``e[3]`` would go through Python's ``__getitem__``). Sums
are explicit left-to-right loops, not ``sum()``, so both twins add in the
same order on every Python version.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from agent.matcher import ToolTerms

__all__ = ["THING_SLOTS", "Ranker"]

ALPHA = 0.25    # keeps a one-word request from scoring a perfect 1.0
OP_MISMATCH = 0.3   # the request asks an operation the tool does not do, or does to other things
NO_OBJECT = 0.5     # the tool shares no thing with a request that names things
OP_UNASKED = 0.85   # the tool changes state but the request asks for none
NON_GOAL = 0.35     # the request is one of the tool's non-goals
REFERRAL = 0.5      # share of a non-goal's weight passed to the tool it names
KEYWORD_BONUS = 0.08
CMDLINE_BONUS = 0.15  # a request with a command line, for a tool that runs command lines
CORE_SHARE = 0.15   # how much the share of a tool's own concepts named counts
SHORTLIST = 12      # candidates re-ranked with penalties and boosts
PRESELECT = 48      # candidates kept before the commoner words are added
COMMON_MIN = 64     # a posting list this short is always walked (small registries are exact)
COMMON_SHARE = 64   # ... otherwise a word in more than 1/64 of the tools is common

# Slots that identify a target (not bare numbers or text), and of those the
# ones that name a thing an operation can act on (a file, a host ...), not a when or a how.
TARGET_SLOTS = frozenset({"p:url", "p:host", "p:port", "p:path", "p:repo", "p:version",
                          "p:duration", "p:time", "p:cmdline"})
THING_SLOTS = frozenset({"p:url", "p:host", "p:port", "p:path", "p:repo", "p:version"})
# Objects too general to be what a request asks to convert into ("a JSON file").
GENERIC = frozenset({"c:file", "c:dir", "c:text"})
_NOTHING: frozenset[str] = frozenset()

Request = list[tuple[str, str, float, int, int]]   # (feature, surface, weight, start, clause)
Ranked = list[tuple[str, float, tuple[str, ...]]]  # (tool, score, matched surfaces), best first


class Ranker:
    """The ranking over one index's tools; made with each Index (it only keeps references).

    ``entries`` and ``postings`` (feature -> tool -> presence) are the
    index's own and are never changed here; ``ops``, ``acts`` and
    ``objects`` are the vocabulary's operation, act and object features.
    """

    def __init__(self, entries: dict[str, "ToolTerms"], postings: dict[str, dict[str, float]],
                 ops: frozenset[str], acts: frozenset[str], objects: frozenset[str]) -> None:
        self.entries = entries
        self.postings = postings
        self.ops = ops
        self.acts = acts
        self.objects = objects
        self.n = len(entries)
        self.idf_norm = math.log(1.0 + (self.n + 0.5) / 0.5)
        self.common = max(COMMON_MIN, self.n // COMMON_SHARE)

    def rank(self, terms: Request, top_k: int, trace: dict[str, list[str]] | None = None) -> Ranked:
        """The best ``top_k`` tools for these request terms; ``trace`` (for
        debugging a ranking) collects each candidate's factors."""
        entries = self.entries
        if not terms or not entries:
            return []
        postings = self.postings
        n = self.n
        idf_norm = self.idf_norm
        mass: dict[str, float] = {}      # feature -> weight * idf
        surface: dict[str, str] = {}
        for f, sf, weight, _, _ in terms:
            p = postings.get(f)
            df = len(p) if p is not None else 0
            m = weight * (0.35 + 0.65 * math.log(1.0 + (n - df + 0.5) / (df + 0.5)) / idf_norm)
            prev = mass.get(f, 0.0)
            if m > prev:
                mass[f] = m
                if f not in surface:
                    surface[f] = sf
        total = 0.0
        for m in mass.values():
            total += m
        denom = total + ALPHA
        acc = self._accumulate(mass, top_k)
        if not acc:
            return []
        objects = self.objects
        acts = self.acts
        asked = frozenset(mass)
        asked_ops = self.ops & asked
        if asked_ops & acts:
            pairs, heads = _pairs(terms, acts, objects)
        else:
            pairs, heads = {}, {}
        into = _into(terms, objects) if "c:convert" in asked_ops else None
        # The things a request names: concepts of kind obj, unknown words and
        # bigrams, and the slots that identify a target (not bare numbers or text).
        content = [f for f in mass if f in objects or f in TARGET_SLOTS]
        cmdline = "p:cmdline" in mass
        in_cmd: set[str] = set()
        if cmdline:
            # The words of a spelled-out command line are what to run: a tool
            # that runs command lines explains them all ("apt install nginx").
            spans = [(start, start + len(sf) + 2) for f, sf, _, start, _ in terms if f == "p:cmdline"]
            for f, _, _, start, _ in terms:
                for a, b in spans:
                    if a <= start < b:
                        in_cmd.add(f)
                        break
        scores: dict[str, float] = {}
        fits: dict[str, float] = {}
        referred: dict[str, float] = {}
        if trace is not None:
            trace["request"] = ([f"{f}={m:.2f}" for f, m in mass.items()]
                                + [f"{f}->{sorted(o)}" for f, o in heads.items()])
        for name, raw in acc:
            e = entries[name]
            weights, e_ops, non_goals, core = e.weights, e.ops, e.non_goals, e.core
            done = asked_ops & e_ops if asked_ops and e_ops else _NOTHING
            s = raw / denom
            if trace is not None:
                trace[name] = [f"base {s:.3f}"]
            fit = _op_fit(e_ops, e.things, e.outputs, asked_ops, done, acts, pairs, into)
            runs_cmd = cmdline and "p:cmdline" in weights
            if runs_cmd:
                # A request that spells out a command line asks to run it (seed
                # 000 rule: shell-exec needs a command); whatever the command does.
                missing = 0.0
                for f in in_cmd:
                    missing += mass[f] * (1.0 - weights.get(f, 0.0))
                s += missing / denom + CMDLINE_BONUS
                fit = 1.0
            fits[name] = fit
            s *= fit
            if core:
                # Of two tools that explain the request equally, prefer the one
                # the request says more about: "用户" is user-list's whole point
                # and one column of process-list.
                named = 0
                for f in core:
                    if f in asked:
                        named += 1
                s *= 1.0 - CORE_SHARE + CORE_SHARE * named / len(core)
            if trace is not None:
                trace[name].append(f"ops {fit:.2f} +core {s:.3f}")
            if content and not done:
                # Nothing the request names, and none of its operations: "drop the
                # table" is not an HTTP request because HTTP has DELETE.
                for f in content:
                    if f in weights:
                        break
                else:
                    s *= NO_OBJECT
            if non_goals and not runs_cmd:
                hit = self._refused(name, e_ops, non_goals, done, asked, asked_ops, heads)
                if hit is not None:
                    shared, refers_to = hit
                    before = s
                    s *= NON_GOAL
                    if refers_to and refers_to != name:
                        # The named tool gains at most what this one gave up.
                        given = 0.0
                        for f in shared:
                            given += mass[f]
                        bonus = min(before - s, REFERRAL * given / denom)
                        referred[refers_to] = max(referred.get(refers_to, 0.0), bonus)
                    if trace is not None:
                        trace[name].append(f"non-goal -> {refers_to or '-'}")
            for kw in e.keywords:
                if kw <= asked:
                    s += KEYWORD_BONUS
                    break
            if trace is not None:
                trace[name].append(f"final {s:.3f}")
            scores[name] = s
        for name, bonus in referred.items():
            e = entries.get(name)
            if e is None:
                continue
            if name not in scores:  # outside the shortlist: score it plainly
                weights, e_ops = e.weights, e.ops
                done = asked_ops & e_ops if asked_ops and e_ops else _NOTHING
                fits[name] = _op_fit(e_ops, e.things, e.outputs, asked_ops, done, acts, pairs, into)
                explained = 0.0
                for f, m in mass.items():
                    explained += m * weights.get(f, 0.0)
                scores[name] = fits[name] * explained / denom
            if fits[name] == 1.0:  # a referral does not override the tool's own misfit
                scores[name] += bonus
        # Best first, ties by name (descending), as tuples compare: no key function.
        best = sorted([(s, name) for name, s in scores.items()], reverse=True)
        hits: Ranked = []
        for s, name in best[:top_k]:
            if s <= 0.0:
                break
            weights = entries[name].weights
            why: list[str] = []
            for f in mass:
                if f in weights:
                    sf = surface[f]
                    if sf and sf not in why:
                        why.append(sf)
            hits.append((name, round(min(1.0, s), 4), tuple(why)))
        return hits

    def _accumulate(self, mass: dict[str, float], top_k: int) -> list[tuple[str, float]]:
        """The shortlist: (tool, raw score) of the best candidates, raw being the sum of mass * presence.

        Words most tools share (服务器, show) have long posting lists and low
        idf. Rarer words are walked first; a common word is then walked only
        if they found fewer than top_k candidates, and otherwise added to the
        best candidates alone. A tool that shares nothing but common words
        with the request is then left out, which costs nothing in practice:
        its score would sit far below any threshold.
        """
        postings = self.postings
        order: list[tuple[int, str]] = []
        for f in mass:
            p = postings.get(f)
            if p:
                order.append((len(p), f))
        if not order:
            return []
        order.sort()
        # Scores are kept divided by the first word's mass, so that its posting
        # list is copied in C instead of multiplied in Python; scaled back below.
        first = order[0][1]
        unit = mass[first]
        acc: dict[str, float] = dict(postings[first])
        deferred: list[tuple[str, float]] = []
        common = self.common
        for size, f in order[1:]:
            m = mass[f] / unit
            if size > common and len(acc) >= top_k:
                deferred.append((f, m))
                continue
            p = postings[f]
            for name, w in p.items():
                prev = acc.get(name, 0.0)
                acc[name] = prev + m * w
        if deferred:
            if len(acc) > PRESELECT:
                acc = dict(_top(acc, PRESELECT))
            entries = self.entries
            for name in acc:
                weights = entries[name].weights
                for f, m in deferred:
                    present = weights.get(f)
                    if present:
                        acc[name] += m * present
        return [(name, s * unit) for name, s in _top(acc, max(SHORTLIST, top_k))]

    def _refused(self, name: str, e_ops: frozenset[str], non_goals: tuple, done: frozenset[str],
                 asked: frozenset[str], asked_ops: frozenset[str],
                 heads: dict[str, frozenset[str]]) -> tuple[frozenset[str], str] | None:
        """The first non-goal line the request falls under: (the shared features, the tool it names).

        A line with operations applies when the request asks one of them
        that the tool does not do at all, or asks it for the things the line
        names; a line without operations ("不查数据库里的订单") applies to a
        request that asks none of the tool's operations and names
        at least half of the things that set the line apart from the tool, one of them
        a topic (display or name) of the tool the line sends such requests to.
        """
        for ng_ops, distinct, feats, refers_to in non_goals:
            if ng_ops:
                shared_ops = ng_ops & asked_ops
                if not shared_ops:
                    continue
                if not shared_ops <= e_ops:
                    return feats & asked, refers_to
                targets: set[str] | frozenset[str] = set()
                for f in shared_ops:
                    targets |= heads.get(f, asked)
            elif done:
                continue
            else:
                targets = asked
            named = distinct & targets
            if not distinct or 2 * len(named) < len(distinct):
                continue
            other = self.entries.get(refers_to) if refers_to != name else None
            if other is not None and named.isdisjoint(other.core):
                continue  # "最后几行" is not "日志的最后几行": log-tail's own topic is not named
            return feats & asked, refers_to
        return None


def _top(acc: dict[str, float], k: int) -> list[tuple[str, float]]:
    """The k best (name, score) pairs, unordered; ties at the cut in insertion order.

    Sorting the bare floats and filtering runs in C; heapq.nlargest with a key
    calls back into Python for every candidate.
    """
    if len(acc) <= k:
        return list(acc.items())
    cut = sorted(acc.values(), reverse=True)[k - 1]
    out = [(name, s) for name, s in acc.items() if s > cut]
    room = k - len(out)
    for name, s in acc.items():
        if room <= 0:
            break
        if s == cut:
            out.append((name, s))
            room -= 1
    return out


def _op_fit(e_ops: frozenset[str], things: frozenset[str], outputs: frozenset[str], asked_ops: frozenset[str],
            done: frozenset[str], acts: frozenset[str], pairs: dict[str, frozenset[str]], into: str | None) -> float:
    """1.0, or the penalty for doing none of the request's operations or doing them to other things."""
    if not asked_ops:
        return OP_UNASKED if e_ops else 1.0
    if not done:
        return OP_MISMATCH
    if into is not None and outputs and into not in outputs:
        return OP_MISMATCH  # "转成 csv" is not what csv-to-json makes
    for f in done:
        # An op (backup, translate) says what it does; an act (create,
        # restart) needs its thing: a tool that creates issues does not
        # answer "create a repository".
        if f not in acts:
            return 1.0
        on = pairs.get(f)
        if not on or not on.isdisjoint(things):
            return 1.0
    return OP_MISMATCH


def _pairs(terms: Request, acts: frozenset[str], objects: frozenset[str]
           ) -> tuple[dict[str, frozenset[str]], dict[str, frozenset[str]]]:
    """For each act of the request, the things it acts on (seed 002 §4.3: action + object).

    First, every object of its clause, before it ("把 redis 容器停掉", "在
    a.txt 末尾加一行") or after it ("重启一下卡死的 nginx"); in a clause
    without any, every object of the request ("nginx 卡住了，重启一下").
    A tool that does the act must be about one of these. Second, what it
    makes or hits: the objects right after it ("给 X 仓库提个 bug" makes
    a bug, "create a repository on forgejo" a repository), else those
    before it; a non-goal that refuses the act for some things is about these.
    """
    things: list[tuple[str, int, int]] = []  # (feature, start, clause)
    for f, _, _, start, clause in terms:
        if f in objects or f in THING_SLOTS:
            things.append((f, start, clause))
    around: dict[str, set[str]] = {}
    ahead: dict[str, set[str]] = {}
    for f, _, _, start, clause in terms:
        if f not in acts:
            continue
        same = [o for o in things if o[2] == clause]
        near = around.setdefault(f, set())
        for o in same or things:
            near.add(o[0])
        after = [o for o in same if o[1] > start] or same or things
        hit = ahead.setdefault(f, set())
        for o in after:
            hit.add(o[0])
    return ({f: frozenset(v) for f, v in around.items()}, {f: frozenset(v) for f, v in ahead.items()})


def _into(terms: Request, objects: frozenset[str]) -> str | None:
    """What a conversion request asks for: the last specific thing after "转成 / convert"
    (a format the vocabulary knows, or an unknown word: "转成 xml")."""
    for f, _, _, at, clause in terms:
        if f == "c:convert":
            break
    else:
        return None
    last = None
    for f, _, _, start, c in terms:
        if (c == clause and start > at and (f in objects or f[0] == "w") and f not in GENERIC):
            last = f
    return last
