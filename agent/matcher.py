"""Intent to tools: the match index and the ranking (seed 000 §2 step 3).

A tool is indexed as weighted terms (see :mod:`agent.text`): concepts of the
ops vocabulary, unknown words and CJK bigrams from its display, intent,
keywords and name (full weight), its why (half) and its parameters (less), plus
slots for the values its parameters take (a path, a URL, a duration ...).

A request scores a tool by the share of the request the tool explains:
``sum(weight * idf * presence) / (sum(weight * idf) + ALPHA)`` over the
request's terms, so the score is comparable across requests and one threshold
decides ``found``. Then the ranking applies what seed 002 §2.1/§4.3 asks for:

* an operation the request names (restart, delete, renew ...) that the tool
  does not name pushes the tool away: a read-only tool never answers "drop";
* a ``non_goals`` line that explains the request at least as well as the tool's
  own description pushes the tool away, and the tool it refers to ("用 X")
  gains;
* a ``trigger_keywords`` phrase present in the request adds a fixed boost.

The index is immutable; :meth:`Index.updated` returns a new one that shares
everything the change did not touch, so the cache agent can swap snapshots.
"""

from __future__ import annotations

import heapq
import math
import re
from collections.abc import Iterable
from dataclasses import dataclass

from bitong.v1.agent_pb2 import ToolDef

from agent.text import Analyzer, Term
from agent.vocabulary import Vocabulary, default_vocabulary, load_vocabulary

__all__ = ["DEFAULT_THRESHOLD", "SUGGESTION", "Hit", "Index", "MatchResult", "Vocabulary",
           "load_vocabulary"]

SUGGESTION = "此工具尚不在仓库中，需铸渊新建"
DEFAULT_THRESHOLD = 0.4

# Field weights: how strongly a field's words say what the tool is for.
PRIMARY = 1.0   # display, intent, trigger_keywords
NAME = 0.7      # the id, split at dashes: usually a terse restatement
WHY = 0.5       # background; mentions neighbouring topics
PARAMS = 0.4    # parameter names, descriptions, enum values
ALPHA = 0.25    # keeps a one-word request from scoring a perfect 1.0

OP_MISMATCH = 0.3   # the request names an operation the tool does not do
NO_OBJECT = 0.5     # the tool shares no thing with a request that names things
OP_UNASKED = 0.85   # the tool changes state but the request asks for none
NON_GOAL = 0.35     # the request is one of the tool's non-goals
REFERRAL = 0.5      # share of a non-goal's weight passed to the tool it names
KEYWORD_BONUS = 0.08
CORE_SHARE = 0.15   # how much the share of a tool's own concepts named counts
SHORTLIST = 12      # candidates re-ranked with penalties and boosts
PRESELECT = 48      # candidates kept before the commoner words are added
COMMON_MIN = 64     # a posting list this short is always walked (small registries are exact)
COMMON_SHARE = 64   # ... otherwise a word in more than 1/64 of the tools is common

# Concepts of the vocabulary that say which values a parameter takes.
_CONCEPT_SLOT = {
    "dir": ("p:path",), "file": ("p:path",), "url": ("p:url",), "host": ("p:host",),
    "port": ("p:port",), "version": ("p:version",), "time": ("p:duration", "p:time"),
    "time_point": ("p:time",), "repo": ("p:repo",), "text": ("p:text",), "message": ("p:text",),
    "read": ("p:text",), "command": ("p:cmdline",), "line": ("p:number",), "count": ("p:number",),
    "process": ("p:number",),
}
_TARGET_SLOTS = frozenset({"p:url", "p:host", "p:port", "p:path", "p:repo", "p:version",
                           "p:duration", "p:time", "p:cmdline"})
_REFERRAL = re.compile(r"[（(]?\s*(?:用|改用|请用|use|see)\s*([a-z0-9][a-z0-9_-]*[a-z0-9])\s*[)）]?", re.I)
_NG_SPLIT = re.compile(r"[；;。]|\.\s")


@dataclass(frozen=True)
class Hit:
    """One candidate: the tool, its calibrated score and why it matched."""

    name: str
    score: float                      # 0..1, higher is better
    matched_terms: tuple[str, ...]    # the request's words that matched, for --explain


@dataclass(frozen=True)
class MatchResult:
    """The answer to one intent.

    ``hits`` holds the best candidates (at most top_k, best first) whether or
    not ``found``: below the threshold they explain a near miss to a tool
    author; a caller that answers an agent should send none when not found.
    """

    found: bool
    hits: list[Hit]
    suggestion: str  # SUGGESTION when found is False, else ""


@dataclass(frozen=True, slots=True)
class _NonGoal:
    features: frozenset[str]
    refers_to: str  # the tool the line sends such requests to, or ""


@dataclass(frozen=True, slots=True)
class _Entry:
    """What the index keeps of one tool."""

    tool: ToolDef
    weights: dict[str, float]       # feature -> presence 0..1
    primary: frozenset[str]         # features of display/intent/keywords/name
    ops: frozenset[str]             # operation concepts the tool names
    keywords: tuple[frozenset[str], ...]
    non_goals: tuple[_NonGoal, ...]
    core: frozenset[str]            # the things and operations its display and name name
    refusals: frozenset[str]        # every feature of every non-goal, to skip most checks


def _entry(tool: ToolDef, an: Analyzer) -> _Entry:
    weights: dict[str, float] = {}
    primary: set[str] = set()

    def add(terms: list[Term], w: float, is_primary: bool = False) -> None:
        for t in terms:
            if t.feature.startswith("u:"):
                continue  # a lone unknown character is too weak to index
            if weights.get(t.feature, 0.0) < w:
                weights[t.feature] = w
            if is_primary:
                primary.add(t.feature)

    keywords = []
    title = an.text(tool.display) + an.text(tool.name.replace("-", " ").replace("_", " "))
    for text in (tool.display, tool.intent):
        add(an.text(text), PRIMARY, True)
    for kw in tool.trigger_keywords:
        terms = an.text(kw)
        add(terms, PRIMARY, True)
        feats = frozenset(t.feature for t in terms if not t.feature.startswith("u:"))
        if feats:
            keywords.append(feats)
    add(an.text(tool.name.replace("-", " ").replace("_", " ")), NAME, True)
    add(an.text(tool.why), WHY)
    for pname, spec in tool.params_schema.items():
        values = [v.string_value for v in spec.enum if v.string_value]
        if spec.HasField("default") and spec.default.string_value:
            values.append(spec.default.string_value)  # "root", "main", "staging"
        terms = an.text(" ".join([pname.replace("_", " "), spec.description, *values]))
        add(terms, PARAMS)
        slots = {s for t in terms for s in _CONCEPT_SLOT.get(t.feature[2:], ())}
        if "path" in spec.normalize:
            slots.add("p:path")
        if any(n.startswith("duration") for n in spec.normalize):
            slots.add("p:duration")
        if spec.pattern.startswith("^http"):
            slots.add("p:url")
        if spec.type in ("integer", "number"):
            slots.add("p:number")
        for slot in slots:
            weights[slot] = 1.0
    kinds = an.vocabulary.kinds
    ops = frozenset(f[2:] for f in primary if f.startswith("c:") and kinds.get(f[2:]) == "op")
    non_goals = []
    for item in tool.non_goals:
        for line in _NG_SPLIT.split(item):
            refs = _REFERRAL.findall(line)
            feats = frozenset(t.feature for t in an.text(_REFERRAL.sub(" ", line))
                              if not t.feature.startswith(("u:", "p:")))
            if feats:
                non_goals.append(_NonGoal(feats, refs[-1].lower() if refs else ""))
    core = frozenset(t.feature for t in title
                     if t.feature.startswith("c:") and kinds.get(t.feature[2:]) in ("obj", "op"))
    refusals = frozenset().union(*(ng.features for ng in non_goals))
    return _Entry(tool, weights, frozenset(primary), ops, tuple(keywords), tuple(non_goals), core,
                  refusals)


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


class _KnownWords:
    """English words the registry itself uses, so typo correction leaves them alone."""

    __slots__ = ("_postings",)

    def __init__(self, postings: dict[str, dict[str, float]]) -> None:
        self._postings = postings

    def __contains__(self, word: object) -> bool:
        return isinstance(word, str) and ("w:" + word) in self._postings


class Index:
    """An immutable match index over a set of tools; see the module docstring."""

    __slots__ = ("_analyzer", "_entries", "_postings", "_known", "_idf_norm")

    def __init__(self, analyzer: Analyzer, entries: dict[str, _Entry],
                 postings: dict[str, dict[str, float]]) -> None:
        """Internal: use :meth:`build` or :meth:`updated`."""
        self._analyzer = analyzer
        self._entries = entries
        self._postings = postings
        self._known = _KnownWords(postings)
        n = len(entries)
        self._idf_norm = math.log(1.0 + (n + 0.5) / 0.5)

    @classmethod
    def build(cls, tools: Iterable[ToolDef], *, vocabulary: Vocabulary | None = None) -> "Index":
        """Index these tools; a later tool with the same name replaces an earlier one."""
        an = Analyzer(vocabulary or default_vocabulary())
        entries: dict[str, _Entry] = {}
        for tool in tools:
            entries[tool.name] = _entry(tool, an)
        postings: dict[str, dict[str, float]] = {}
        for name, e in entries.items():
            for f, w in e.weights.items():
                postings.setdefault(f, {})[name] = w
        return cls(an, entries, postings)

    def updated(self, upsert: Iterable[ToolDef] = (), remove: Iterable[str] = ()) -> "Index":
        """A new Index with these tools replaced/added/removed; self stays valid and unchanged.

        Cost is proportional to the changed tools: only the posting lists they
        touch are copied, everything else is shared with this index.
        """
        entries = dict(self._entries)
        postings = dict(self._postings)
        copied: set[str] = set()

        def own(f: str) -> dict[str, float]:
            if f not in copied:
                copied.add(f)
                postings[f] = dict(postings.get(f, ()))
            return postings[f]

        def drop(name: str) -> None:
            old = entries.pop(name, None)
            if old is None:
                return
            for f in old.weights:
                p = own(f)
                p.pop(name, None)
                if not p:
                    del postings[f]
                    copied.discard(f)

        for name in remove:
            drop(name)
        for tool in upsert:
            drop(tool.name)
            e = _entry(tool, self._analyzer)
            entries[tool.name] = e
            for f, w in e.weights.items():
                own(f)[tool.name] = w
        return Index(self._analyzer, entries, postings)

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, name: object) -> bool:
        return name in self._entries

    def match(self, intent: str, top_k: int = 3, *, threshold: float | None = None) -> MatchResult:
        """The best ``top_k`` tools for ``intent``; ``found`` if the first clears ``threshold``."""
        limit = DEFAULT_THRESHOLD if threshold is None else threshold
        hits = self._rank(intent, max(top_k, 1))[:top_k] if top_k > 0 else []
        found = bool(hits) and hits[0].score >= limit
        return MatchResult(found, hits, "" if found else SUGGESTION)

    # ---------------------------------------------------------------- ranking

    def _accumulate(self, mass: dict[str, float], top_k: int) -> dict[str, float]:
        """The shortlist: raw scores (sum of mass * presence) of the best candidates.

        Words most tools share (服务器, show) have long posting lists and low
        idf. Rarer words are walked first; a common word is then walked only
        if they found fewer than top_k candidates, and otherwise added to the
        best candidates alone. A tool that shares nothing but common words
        with the request is then left out, which costs nothing in practice:
        its score would sit far below any threshold.
        """
        postings = self._postings
        common = max(COMMON_MIN, len(self._entries) // COMMON_SHARE)
        order = sorted((len(p), f) for f in mass if (p := postings.get(f)))
        if not order:
            return {}
        # Scores are kept divided by the first word's mass, so that its posting
        # list is copied in C instead of multiplied in Python; scaled back below.
        unit = mass[order[0][1]]
        acc: dict[str, float] = dict(postings[order[0][1]])
        deferred: list[tuple[str, float]] = []
        for size, f in order[1:]:
            m = mass[f] / unit
            if size > common and len(acc) >= top_k:
                deferred.append((f, m))
                continue
            get = acc.get
            for name, w in postings[f].items():
                acc[name] = get(name, 0.0) + m * w
        if deferred:
            if len(acc) > PRESELECT:
                acc = dict(_top(acc, PRESELECT))
            entries = self._entries
            for name in acc:
                weights = entries[name].weights
                for f, m in deferred:
                    w = weights.get(f)
                    if w:
                        acc[name] += m * w
        return {name: s * unit for name, s in _top(acc, max(SHORTLIST, top_k))}

    @staticmethod
    def _non_goals(e: _Entry, name: str, s: float, mass: dict[str, float], asked: frozenset[str],
                   asked_ops: frozenset[str], denom: float, referred: dict[str, float]) -> float:
        """Push a tool away from a request that is one of its non-goals (seed 002 §4.3)."""
        for ng in e.non_goals:
            shared = ng.features & asked
            if not shared:
                continue
            refuses_op = any(f[2:] in asked_ops and f[2:] not in e.ops for f in shared)
            # A non-goal that repeats what the tool is about decides nothing;
            # it applies when it names something more the request also names
            # and explains the request at least as well as the tool does.
            beyond = shared - e.primary
            ng_mass = sum(mass[f] for f in shared)
            pos_mass = sum(m for f, m in mass.items() if f in e.primary)
            if refuses_op or (beyond and ng_mass >= pos_mass):
                if ng.refers_to and ng.refers_to != name:
                    referred[ng.refers_to] = max(referred.get(ng.refers_to, 0.0),
                                                 REFERRAL * ng_mass / denom)
                return s * NON_GOAL
        return s

    def _rank(self, intent: str, top_k: int) -> list[Hit]:
        terms = self._analyzer.query(intent, self._known)
        if not terms or not self._entries:
            return []
        postings = self._postings
        n = len(self._entries)
        kinds = self._analyzer.vocabulary.kinds
        mass: dict[str, float] = {}      # feature -> weight * idf
        surface: dict[str, str] = {}
        for t in terms:
            p = postings.get(t.feature)
            df = len(p) if p else 0
            idf = 0.35 + 0.65 * math.log(1.0 + (n - df + 0.5) / (df + 0.5)) / self._idf_norm
            m = t.weight * idf
            if m > mass.get(t.feature, 0.0):
                mass[t.feature] = m
                surface.setdefault(t.feature, t.surface)
        denom = sum(mass.values()) + ALPHA
        acc = self._accumulate(mass, top_k)
        if not acc:
            return []
        asked_ops = frozenset(f[2:] for f in mass if f.startswith("c:") and kinds.get(f[2:]) == "op")
        # The things a request names: concepts of kind obj, unknown words and
        # bigrams, and the slots that identify a target (not bare numbers or text).
        content = [f for f in mass if (f.startswith("c:") and kinds.get(f[2:]) == "obj")
                   or f.startswith(("w:", "b:")) or f in _TARGET_SLOTS]
        shortlist = acc.items()
        asked = frozenset(mass)
        scores: dict[str, float] = {}
        referred: dict[str, float] = {}
        for name, raw in shortlist:
            e = self._entries[name]
            s = raw / denom
            if asked_ops:
                if not asked_ops & e.ops:
                    s *= OP_MISMATCH
            elif e.ops:
                s *= OP_UNASKED
            if e.core:
                # Of two tools that explain the request equally, prefer the one
                # the request says more about: "用户" is user-list's whole point
                # and one column of process-list.
                s *= 1.0 - CORE_SHARE + CORE_SHARE * len(e.core & asked) / len(e.core)
            if content and e.weights.keys().isdisjoint(content):
                s *= NO_OBJECT  # "drop the table" is not an HTTP request because HTTP has DELETE
            if not e.refusals.isdisjoint(asked):
                s = self._non_goals(e, name, s, mass, asked, asked_ops, denom, referred)
            if e.keywords and any(kw <= asked for kw in e.keywords):
                s += KEYWORD_BONUS
            scores[name] = s
        for name, bonus in referred.items():
            if name in self._entries:
                if name not in scores:  # outside the shortlist: score it plainly
                    w = self._entries[name].weights
                    scores[name] = sum(m * w.get(f, 0.0) for f, m in mass.items()) / denom
                scores[name] += bonus
        best = heapq.nlargest(top_k, scores.items(), key=lambda kv: (kv[1], kv[0]))
        hits = []
        for name, s in best:
            if s <= 0.0:
                break
            w = self._entries[name].weights
            why = tuple(dict.fromkeys(surface[f] for f in mass if f in w and surface[f]))
            hits.append(Hit(name, round(min(1.0, s), 4), why))
        return hits
