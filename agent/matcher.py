"""Intent to tools: the match index and the ranking (seed 000 §2 step 3).

A tool is indexed as weighted terms (see :mod:`agent.text`): concepts of the
ops vocabulary, unknown words and CJK bigrams from its display, intent,
keywords and name (full weight), its why (half) and its parameters (less), plus
slots for the values its parameters take (a path, a URL, a duration ...).
That analysis (:func:`analyze` -> :class:`ToolTerms`) is the expensive part of
a build; it is plain data, keyed by the tool's bytes and the vocabulary, so a
registry can store it and :meth:`Index.restore` a snapshot without redoing it.

A request scores a tool by the share of the request the tool explains:
``sum(weight * idf * presence) / (sum(weight * idf) + ALPHA)`` over the
request's terms, so the score is comparable across requests and one threshold
decides ``found``. Then the ranking applies what seed 002 §2.1/§4.3 asks for,
action + object:

* an operation the request asks (restart, delete, renew ...) that the tool
  does not name pushes the tool away: a read-only tool never answers "drop".
  A state or a question is not asked ("关掉的 issue", "what changed"), nor
  is the text of a message or reminder ("群里说一声 nginx 重启好了");
* an ``act`` (create, delete, restart ...: see the vocabulary) must also act
  on something the tool is about: a tool that creates backups does not
  answer "新建一个数据库用户", one that restarts services not "重启物理机";
  a converter (csv-to-json) only answers for what it makes;
* a ``non_goals`` line the request falls under pushes the tool away (at
  least half of what sets the line apart from the tool is named, or it
  refuses the asked operation), and the tool it refers to ("用 X") gains
  what this one lost;
* a spelled-out command line goes to the tool that runs command lines;
* a ``trigger_keywords`` phrase present in the request adds a fixed boost.

The index is immutable; :meth:`Index.updated` returns a new one that shares
everything the change did not touch, so the cache agent can swap snapshots.
"""

from __future__ import annotations

import gc
import hashlib
import heapq
import marshal
import math
import pkgutil
import re
import uuid
from contextlib import contextmanager
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import NamedTuple

from bitong.v1.agent_pb2 import ToolDef

from agent.text import Analyzer, Term
from agent.vocabulary import Vocabulary, default_vocabulary, load_vocabulary

__all__ = ["DEFAULT_THRESHOLD", "SUGGESTION", "Hit", "Index", "MatchResult", "ToolTerms", "Vocabulary",
           "analysis_fingerprint", "analyze", "load_vocabulary"]

SUGGESTION = "此工具尚不在仓库中，需铸渊新建"
DEFAULT_THRESHOLD = 0.4

# Field weights: how strongly a field's words say what the tool is for.
PRIMARY = 1.0   # display, intent, trigger_keywords
NAME = 0.7      # the id, split at dashes: usually a terse restatement
WHY = 0.5       # background; mentions neighbouring topics
PARAMS = 0.4    # parameter names, descriptions, enum values
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
# Slots that name a thing an operation can act on (a file, a host ...), not a when or a how.
_THING_SLOTS = frozenset({"p:url", "p:host", "p:port", "p:path", "p:repo", "p:version"})
# A converter is named source-to-target: csv-to-json, md2pdf, "CSV to JSON", "Excel转CSV".
_CONVERTER = re.compile(r"^(?:.+?)(?:-to-|[ _]to[ _]|(?<=[a-z0-9])2(?=[a-z])|\s*(?:→|->|转成?)\s*)(.+)$", re.I)
_CONVERTER_HINT = re.compile(r"to|2|→|->|转", re.I)
# Objects too general to be what a request asks to convert into ("a JSON file").
_GENERIC = frozenset({"c:file", "c:dir", "c:text"})
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


class ToolTerms(NamedTuple):
    """What the index keeps of one tool: the expensive, per-tool part of a build.

    Made by :func:`analyze`; plain strings, floats, dicts, tuples and
    frozensets, so :meth:`to_bytes` is one ``marshal`` call and a registry can
    store it next to the tool and skip the analysis on restart. ``sha256`` (the
    tool's ``content_sha256``) and ``fingerprint`` (this matcher's code and the
    vocabulary, see :func:`analysis_fingerprint`) say what it was made from:
    :meth:`fresh_for` refuses it for any other tool bytes or vocabulary.
    """

    name: str
    sha256: str
    fingerprint: str
    weights: dict[str, float]            # feature -> presence 0..1 (the field weights above)
    ops: frozenset[str]                  # operation features (op and act) the tool names
    keywords: tuple[frozenset[str], ...]
    non_goals: tuple[tuple[frozenset[str], frozenset[str], frozenset[str], str], ...]
    # ^ a line each: (its operations, the things it names that the tool is not
    #   about, all its features, the tool it refers to or "")
    core: frozenset[str]                 # the things and operations its display and name name
    things: frozenset[str]               # what it acts on: objects of display/name/keywords, target slots
    outputs: frozenset[str]              # what a converter makes: "json" of csv-to-json / "CSV to JSON"

    def fresh_for(self, tool: ToolDef, vocabulary: Vocabulary | None = None) -> bool:
        """True if this is the analysis of exactly these tool bytes with this vocabulary and code.

        A tool without ``content_sha256`` (not read from a file) never matches.
        """
        return (bool(self.sha256) and self.sha256 == tool.content_sha256 and self.name == tool.name
                and self.fingerprint == analysis_fingerprint(vocabulary))

    @classmethod
    def load(cls, data: bytes, tool: ToolDef, vocabulary: Vocabulary | None = None) -> "ToolTerms | None":
        """The stored analysis of ``tool`` if ``data`` holds a fresh one, else None (analyse the tool).

        Never raises for bad data: empty, corrupt, older-format and stale
        analyses are all simply not used.
        """
        if not data:
            return None
        try:
            terms = cls.from_bytes(data)
        except ValueError:
            return None
        return terms if terms.fresh_for(tool, vocabulary) else None

    def to_bytes(self) -> bytes:
        """A compact, versioned encoding for a registry state (see :meth:`from_bytes`)."""
        return _FORMAT + marshal.dumps(tuple(self), 4)

    @classmethod
    def from_bytes(cls, data: bytes) -> "ToolTerms":
        """Decode :meth:`to_bytes`; raises ValueError for anything else (treat it as absent)."""
        if not data.startswith(_FORMAT):
            raise ValueError("not a bitong tool analysis of this format")
        try:
            fields = marshal.loads(memoryview(data)[len(_FORMAT):])
        except Exception as exc:  # marshal raises EOFError, ValueError, TypeError ... on bad bytes
            raise ValueError(f"corrupt tool analysis: {exc}") from None
        if type(fields) is not tuple or len(fields) != _FIELDS or type(fields[3]) is not dict:
            raise ValueError("corrupt tool analysis")
        return tuple.__new__(cls, fields)


_FORMAT = b"bt3\0"  # ToolTerms.to_bytes layout; bump with the field list
_FIELDS = len(ToolTerms._fields)


def _code_hash() -> str:
    """The analysis code's own bytes: a changed matcher never trusts an old analysis."""
    digest = hashlib.sha256(_FORMAT)
    for mod in ("matcher.py", "text.py", "vocabulary.py"):
        try:
            data = pkgutil.get_data("agent", mod)
        except OSError:
            data = None
        # Unreadable source: a per-process token, so that no stored analysis is trusted.
        digest.update(data if data is not None else uuid.uuid4().bytes)
    return digest.hexdigest()[:16]


_CODE_HASH = _code_hash()
_ANALYZERS: dict[str, Analyzer] = {}


def analysis_fingerprint(vocabulary: Vocabulary | None = None) -> str:
    """What a :class:`ToolTerms` depends on besides the tool: this code and the vocabulary."""
    vocab = vocabulary or default_vocabulary()
    return f"{_CODE_HASH}.{vocab.fingerprint}"


def _analyzer(vocabulary: Vocabulary | None) -> Analyzer:
    """One shared Analyzer per vocabulary, so its memo of short texts serves every build."""
    vocab = vocabulary or default_vocabulary()
    an = _ANALYZERS.get(vocab.fingerprint)
    if an is None or an.vocabulary is not vocab:
        an = _ANALYZERS[vocab.fingerprint] = Analyzer(vocab)
    return an


def analyze(tool: ToolDef, vocabulary: Vocabulary | None = None) -> ToolTerms:
    """The per-tool part of indexing (see :class:`ToolTerms`); pure, so it can be cached."""
    return _analyze(tool, _analyzer(vocabulary), analysis_fingerprint(vocabulary))


def _analyze(tool: ToolDef, an: Analyzer, fingerprint: str) -> ToolTerms:
    kinds = _Kinds.of(an.vocabulary)
    # Every text of the tool goes through the segmenter in one call (see
    # Analyzer.features_many); ``texts`` is laid out as the comments say.
    keywords_in = list(tool.trigger_keywords)
    display_text, name = tool.display, tool.name
    texts = [display_text, tool.intent, name.replace("-", " ").replace("_", " "), tool.why,
             *keywords_in]                                    # 0..3, then the keywords
    params = []
    slots: set[str] = set()
    schema = tool.params_schema
    for pname in schema:  # not .items(): that iterates in Python, a lookup per key anyway
        spec = schema[pname]
        values = [v.string_value for v in spec.enum if v.string_value]
        if spec.HasField("default") and spec.default.string_value:
            values.append(spec.default.string_value)  # "root", "main", "staging"
        params.append((len(texts), 2 + len(values)))
        texts += [pname.replace("_", " "), spec.description, *values]   # name, description, values
        # What values it takes, from the spec itself.
        for norm in spec.normalize:
            if norm == "path":
                slots.add("p:path")
            elif norm.startswith("duration"):
                slots.add("p:duration")
        if spec.type in ("integer", "number"):
            slots.add("p:number")
        elif spec.pattern.startswith("^http"):
            slots.add("p:url")
    refs = []
    ng_at = len(texts)
    for item in tool.non_goals:
        for line in _NG_SPLIT.split(item):                    # then one text per non-goal line
            found = _REFERRAL.findall(line)
            refs.append(found[-1].lower() if found else "")
            texts.append(_REFERRAL.sub(" ", line))
    out_at = len(texts)
    for label in (display_text, name):                        # then what a converter makes
        m = _CONVERTER.match(label) if _CONVERTER_HINT.search(label) else None
        if m:
            texts.append(m.group(1).replace("-", " ").replace("_", " "))
    feats = an.features_many(texts)
    display, intent, named, why = feats[0], feats[1], feats[2], feats[3]

    primary_feats = display + intent
    keywords = []
    for kw_feats in feats[4:4 + len(keywords_in)]:
        primary_feats += kw_feats
        if kw_feats:
            keywords.append(frozenset(kw_feats))
    param_feats: list[str] = []
    for at, count in params:
        for pf in feats[at:at + count]:
            param_feats += pf
    for f in kinds.slotted.intersection(param_feats):
        slots.update(_CONCEPT_SLOT[f[2:]])
    # Weakest field first: a feature keeps the weight of the strongest field naming it.
    weights = dict.fromkeys(param_feats, PARAMS)
    weights.update(dict.fromkeys(why, WHY))
    weights.update(dict.fromkeys(named, NAME))
    weights.update(dict.fromkeys(primary_feats, PRIMARY))
    weights.update(dict.fromkeys(slots, 1.0))
    title = display + named
    things = kinds.objects.intersection(title + [f for kw in keywords for f in kw]).union(
        _THING_SLOTS.intersection(slots))
    non_goals = []
    outputs = kinds.objects.intersection(f for fs in feats[out_at:] for f in fs)
    for ng, ref in zip(feats[ng_at:out_at], refs):
        if ng:
            non_goals.append((kinds.ops.intersection(ng), kinds.content.intersection(ng).difference(things),
                              frozenset(ng), ref))
    return ToolTerms(
        tool.name, tool.content_sha256, fingerprint, weights,
        kinds.ops.intersection(primary_feats + named), tuple(keywords), tuple(non_goals),
        kinds.core.intersection(title), things, outputs)


def _checked(terms: ToolTerms, fingerprint: str) -> ToolTerms:
    if terms.fingerprint != fingerprint:
        raise ValueError(f"stale analysis of tool {terms.name!r}: made for {terms.fingerprint}, "
                         f"not {fingerprint}; analyse the tool again")
    return terms


@contextmanager
def _gc_paused() -> Iterator[None]:
    """No cyclic GC while a build allocates its ~100k acyclic objects.

    Each collection would rescan the growing index for nothing; an eighth of
    the build time goes there otherwise. Re-enabled (if it was on) on exit.
    """
    was_on = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_on:
            gc.enable()


class _Kinds:
    """Features of a vocabulary by role, as sets, so an analysis intersects instead of looping."""

    __slots__ = ("ops", "acts", "objects", "content", "core", "slotted")
    _cache: dict[int, tuple[Vocabulary, "_Kinds"]] = {}

    def __init__(self, vocabulary: Vocabulary) -> None:
        kinds = vocabulary.kinds
        self.ops = frozenset("c:" + c for c, k in kinds.items() if k in ("op", "act"))
        self.acts = frozenset("c:" + c for c, k in kinds.items() if k == "act")
        self.objects = frozenset("c:" + c for c, k in kinds.items() if k == "obj")
        self.content = frozenset("c:" + c for c, k in kinds.items() if k in ("obj", "mod"))
        self.core = frozenset("c:" + c for c, k in kinds.items() if k in ("obj", "op", "act"))
        self.slotted = frozenset("c:" + c for c in _CONCEPT_SLOT)

    @classmethod
    def of(cls, vocabulary: Vocabulary) -> "_Kinds":
        hit = cls._cache.get(id(vocabulary))
        if hit is None or hit[0] is not vocabulary:
            hit = cls._cache[id(vocabulary)] = (vocabulary, cls(vocabulary))
        return hit[1]


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

    __slots__ = ("_analyzer", "_fingerprint", "_entries", "_postings", "_known", "_idf_norm")

    def __init__(self, analyzer: Analyzer, fingerprint: str, entries: dict[str, ToolTerms],
                 postings: dict[str, dict[str, float]]) -> None:
        """Internal: use :meth:`build`, :meth:`build_from` or :meth:`updated`."""
        self._analyzer = analyzer
        self._fingerprint = fingerprint
        self._entries = entries
        self._postings = postings
        self._known = _KnownWords(postings)
        n = len(entries)
        self._idf_norm = math.log(1.0 + (n + 0.5) / 0.5)

    @classmethod
    def build(cls, tools: Iterable[ToolDef], *, vocabulary: Vocabulary | None = None) -> "Index":
        """Index these tools; a later tool with the same name replaces an earlier one."""
        return cls.build_from(tools, vocabulary=vocabulary)

    @classmethod
    def build_from(cls, items: Iterable[ToolDef | ToolTerms], *,
                   vocabulary: Vocabulary | None = None) -> "Index":
        """Index tools, each given as itself or as its analysis (:func:`analyze`, :meth:`ToolTerms.load`).

        An analysis is used as it is: a restart that kept them skips the
        expensive part of a build. Raises ValueError for an analysis made
        with another vocabulary or matcher version; that it belongs to the
        current bytes of its tool is the caller's check (``ToolTerms.load``).
        """
        an = _analyzer(vocabulary)
        fp = analysis_fingerprint(an.vocabulary)
        entries: dict[str, ToolTerms] = {}
        with _gc_paused():
            for item in items:
                e = _checked(item, fp) if isinstance(item, ToolTerms) else _analyze(item, an, fp)
                entries[e.name] = e
            postings: dict[str, dict[str, float]] = {}
            for name, e in entries.items():
                for f, w in e.weights.items():
                    p = postings.get(f)
                    if p is None:
                        postings[f] = {name: w}
                    else:
                        p[name] = w
        return cls(an, fp, entries, postings)

    @classmethod
    def restore(cls, stored: Iterable[tuple[ToolDef, bytes]], *,
                vocabulary: Vocabulary | None = None) -> "Index":
        """Index tools next to their stored analyses (``ToolTerms.to_bytes``): a restart.

        Each analysis is used only if it is fresh for its tool (same
        ``content_sha256``, vocabulary and matcher; see :meth:`ToolTerms.load`);
        a missing, corrupt or stale one is redone from the tool. Never raises
        for bad stored bytes.
        """
        fp = analysis_fingerprint(vocabulary)
        items: list[ToolDef | ToolTerms] = []
        with _gc_paused():  # decoding makes ~10 containers a tool; collecting them halves the speed
            for tool, data in stored:
                terms = None
                if data:
                    try:
                        terms = ToolTerms.from_bytes(data)
                    except ValueError:
                        pass
                ok = (terms is not None and terms.fingerprint == fp and terms.sha256
                      and terms.sha256 == tool.content_sha256 and terms.name == tool.name)
                items.append(terms if ok else tool)  # type: ignore[arg-type]
            return cls.build_from(items, vocabulary=vocabulary)

    @property
    def fingerprint(self) -> str:
        """The :func:`analysis_fingerprint` every analysis in this index carries."""
        return self._fingerprint

    @property
    def vocabulary(self) -> Vocabulary:
        return self._analyzer.vocabulary

    def analysis(self, name: str) -> ToolTerms | None:
        """The analysis of one indexed tool, to persist with it (``None`` if not indexed)."""
        return self._entries.get(name)

    def updated(self, upsert: Iterable[ToolDef | ToolTerms] = (), remove: Iterable[str] = ()) -> "Index":
        """A new Index with these tools replaced/added/removed; self stays valid and unchanged.

        ``upsert`` takes tools, or analyses of them (checked as in
        :meth:`build_from`). Cost is proportional to the changed tools:
        only the posting lists they touch are copied, everything else is
        shared with this index.
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
        for item in upsert:
            if isinstance(item, ToolTerms):
                e = _checked(item, self._fingerprint)
            else:
                e = _analyze(item, self._analyzer, self._fingerprint)
            drop(e.name)
            entries[e.name] = e
            for f, w in e.weights.items():
                own(f)[e.name] = w
        return Index(self._analyzer, self._fingerprint, entries, postings)

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
    def _pairs(terms: list[Term], acts: frozenset[str], objects: frozenset[str]
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
        things = [t for t in terms if t.feature in objects or t.feature in _THING_SLOTS]
        around: dict[str, set[str]] = {}
        ahead: dict[str, set[str]] = {}
        for t in terms:
            if t.feature not in acts:
                continue
            same = [o for o in things if o.clause == t.clause]
            around.setdefault(t.feature, set()).update(o.feature for o in same or things)
            after = [o for o in same if o.start > t.start] or same or things
            ahead.setdefault(t.feature, set()).update(o.feature for o in after)
        return ({f: frozenset(v) for f, v in around.items()}, {f: frozenset(v) for f, v in ahead.items()})

    @staticmethod
    def _into(terms: list[Term], objects: frozenset[str]) -> str | None:
        """What a conversion request asks for: the last specific thing after "转成 / convert"
        (a format the vocabulary knows, or an unknown word: "转成 xml")."""
        at = next((t for t in terms if t.feature == "c:convert"), None)
        if at is None:
            return None
        after = [t.feature for t in terms if t.clause == at.clause and t.start > at.start
                 and (t.feature in objects or t.feature[0] == "w") and t.feature not in _GENERIC]
        return after[-1] if after else None

    @staticmethod
    def _op_fit(e: ToolTerms, asked_ops: frozenset[str], acts: frozenset[str],
                pairs: dict[str, frozenset[str]], into: str | None) -> float:
        """1.0, or the penalty for doing none of the request's operations or doing them to other things."""
        if not asked_ops:
            return OP_UNASKED if e.ops else 1.0
        done = asked_ops & e.ops
        if not done:
            return OP_MISMATCH
        if into is not None and e.outputs and into not in e.outputs:
            return OP_MISMATCH  # "转成 csv" is not what csv-to-json makes
        for f in done:
            # An op (backup, translate) says what it does; an act (create,
            # restart) needs its thing: a tool that creates issues does not
            # answer "create a repository".
            if f not in acts or not pairs.get(f) or not pairs[f].isdisjoint(e.things):
                return 1.0
        return OP_MISMATCH

    def _refused(self, e: ToolTerms, asked: frozenset[str], asked_ops: frozenset[str],
                 heads: dict[str, frozenset[str]]) -> tuple[frozenset[str], str] | None:
        """The first non-goal line the request falls under: (the shared features, the tool it names).

        A line with operations applies when the request asks one of them
        that the tool does not do at all, or asks it for the things the line
        names; a line without operations ("不查数据库里的订单") applies to a
        request that asks none of the tool's operations and names
        at least half of the things that set the line apart from the tool, one of them
        a topic (display or name) of the tool the line sends such requests to.
        """
        done = asked_ops & e.ops
        for ng_ops, distinct, feats, refers_to in e.non_goals:
            if ng_ops:
                shared_ops = ng_ops & asked_ops
                if not shared_ops:
                    continue
                if not shared_ops <= e.ops:
                    return feats & asked, refers_to
                targets = frozenset().union(*(heads.get(f, asked) for f in shared_ops))
            elif done:
                continue
            else:
                targets = asked
            named = distinct & targets
            if not distinct or 2 * len(named) < len(distinct):
                continue
            other = self._entries.get(refers_to) if refers_to != e.name else None
            if other is not None and named.isdisjoint(other.core):
                continue  # "最后几行" is not "日志的最后几行": log-tail's own topic is not named
            return feats & asked, refers_to
        return None

    def _rank(self, intent: str, top_k: int, trace: dict[str, list[str]] | None = None) -> list[Hit]:
        """The best candidates; ``trace`` (for debugging a ranking) collects each candidate's factors."""
        terms = self._analyzer.query(intent, self._known, self._entries)
        if not terms or not self._entries:
            return []
        postings = self._postings
        n = len(self._entries)
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
        kinds = _Kinds.of(self._analyzer.vocabulary)
        asked = frozenset(mass)
        asked_ops = kinds.ops & asked
        pairs, heads = self._pairs(terms, kinds.acts, kinds.objects) if asked_ops & kinds.acts else ({}, {})
        into = self._into(terms, kinds.objects) if "c:convert" in asked_ops else None
        # The things a request names: concepts of kind obj, unknown words and
        # bigrams, and the slots that identify a target (not bare numbers or text).
        content = [f for f in mass if f in kinds.objects or f in _TARGET_SLOTS]
        cmdline = "p:cmdline" in mass
        if cmdline:
            # The words of a spelled-out command line are what to run: a tool
            # that runs command lines explains them all ("apt install nginx").
            spans = [(t.start, t.start + len(t.surface) + 2) for t in terms if t.feature == "p:cmdline"]
            in_cmd = {t.feature for t in terms if any(a <= t.start < b for a, b in spans)}
        scores: dict[str, float] = {}
        fits: dict[str, float] = {}
        referred: dict[str, float] = {}
        if trace is not None:
            trace["request"] = ([f"{f}={m:.2f}" for f, m in mass.items()]
                                + [f"{f}->{sorted(o)}" for f, o in heads.items()])
        for name, raw in acc.items():
            e = self._entries[name]
            s = raw / denom
            if trace is not None:
                trace[name] = [f"base {s:.3f}"]
            fit = fits[name] = self._op_fit(e, asked_ops, kinds.acts, pairs, into)
            runs_cmd = cmdline and "p:cmdline" in e.weights
            if runs_cmd:
                # A request that spells out a command line asks to run it (seed
                # 000 rule: shell-exec needs a command); whatever the command does.
                w = e.weights
                s += sum(mass[f] * (1.0 - w.get(f, 0.0)) for f in in_cmd) / denom + CMDLINE_BONUS
                fit = fits[name] = 1.0
            s *= fit
            if e.core:
                # Of two tools that explain the request equally, prefer the one
                # the request says more about: "用户" is user-list's whole point
                # and one column of process-list.
                s *= 1.0 - CORE_SHARE + CORE_SHARE * len(e.core & asked) / len(e.core)
            if trace is not None:
                trace[name].append(f"ops {fit:.2f} +core {s:.3f}")
            if content and not (asked_ops & e.ops) and e.weights.keys().isdisjoint(content):
                # Nothing the request names, and none of its operations: "drop the
                # table" is not an HTTP request because HTTP has DELETE.
                s *= NO_OBJECT
            if e.non_goals and not runs_cmd:
                hit = self._refused(e, asked, asked_ops, heads)
                if hit is not None:
                    shared, refers_to = hit
                    before = s
                    s *= NON_GOAL
                    if refers_to and refers_to != name:
                        # The named tool gains at most what this one gave up.
                        bonus = min(before - s, REFERRAL * sum(mass[f] for f in shared) / denom)
                        referred[refers_to] = max(referred.get(refers_to, 0.0), bonus)
                    if trace is not None:
                        trace[name].append(f"non-goal -> {refers_to or '-'}")
            if e.keywords and any(kw <= asked for kw in e.keywords):
                s += KEYWORD_BONUS
            if trace is not None:
                trace[name].append(f"final {s:.3f}")
            scores[name] = s
        for name, bonus in referred.items():
            e = self._entries.get(name)
            if e is None:
                continue
            if name not in scores:  # outside the shortlist: score it plainly
                w = e.weights
                fits[name] = self._op_fit(e, asked_ops, kinds.acts, pairs, into)
                scores[name] = fits[name] * sum(m * w.get(f, 0.0) for f, m in mass.items()) / denom
            if fits[name] == 1.0:  # a referral does not override the tool's own misfit
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
