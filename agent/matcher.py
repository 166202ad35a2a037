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
import marshal
import pkgutil
import re
import uuid
from contextlib import contextmanager
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import NamedTuple

from bitong.v1.agent_pb2 import ToolDef

from agent import _backend
from agent.ranking import THING_SLOTS
from agent.text import Analyzer
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

# Concepts of the vocabulary that say which values a parameter takes.
_CONCEPT_SLOT = {
    "dir": ("p:path",), "file": ("p:path",), "url": ("p:url",), "host": ("p:host",),
    "port": ("p:port",), "version": ("p:version",), "time": ("p:duration", "p:time"),
    "time_point": ("p:time",), "repo": ("p:repo",), "text": ("p:text",), "message": ("p:text",),
    "read": ("p:text",), "command": ("p:cmdline",), "line": ("p:number",), "count": ("p:number",),
    "process": ("p:number",),
}
# A converter is named source-to-target: csv-to-json, md2pdf, "CSV to JSON", "Excel转CSV".
_CONVERTER = re.compile(r"^(?:.+?)(?:-to-|[ _]to[ _]|(?<=[a-z0-9])2(?=[a-z])|\s*(?:→|->|转成?)\s*)(.+)$", re.I)
_CONVERTER_HINT = re.compile(r"to|2|→|->|转", re.I)
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
_ANALYZERS: dict[tuple[str, str], Analyzer] = {}


def analysis_fingerprint(vocabulary: Vocabulary | None = None) -> str:
    """What a :class:`ToolTerms` depends on besides the tool: this code and the vocabulary."""
    vocab = vocabulary or default_vocabulary()
    return f"{_CODE_HASH}.{vocab.fingerprint}"


def _analyzer(vocabulary: Vocabulary | None, backend: _backend.Backend = _backend.active) -> Analyzer:
    """One shared Analyzer per vocabulary (and twin), so its memo of English words serves every build."""
    vocab = vocabulary or default_vocabulary()
    key = (backend.name, vocab.fingerprint)
    an = _ANALYZERS.get(key)
    if an is None or an.vocabulary is not vocab:
        an = _ANALYZERS[key] = backend.analyzer(vocab)
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
        THING_SLOTS.intersection(slots))
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


class _KnownWords:
    """English words the registry itself uses, so typo correction leaves them alone."""

    __slots__ = ("_postings",)

    def __init__(self, postings: dict[str, dict[str, float]]) -> None:
        self._postings = postings

    def __contains__(self, word: object) -> bool:
        return isinstance(word, str) and ("w:" + word) in self._postings


class Index:
    """An immutable match index over a set of tools; see the module docstring."""

    __slots__ = ("_analyzer", "_fingerprint", "_entries", "_postings", "_known", "_backend", "_ranker")

    def __init__(self, analyzer: Analyzer, fingerprint: str, entries: dict[str, ToolTerms],
                 postings: dict[str, dict[str, float]], backend: _backend.Backend = _backend.active) -> None:
        """Internal: use :meth:`build`, :meth:`build_from` or :meth:`updated`."""
        self._analyzer = analyzer
        self._fingerprint = fingerprint
        self._entries = entries
        self._postings = postings
        self._known = _KnownWords(postings)
        self._backend = backend
        kinds = _Kinds.of(analyzer.vocabulary)
        self._ranker = backend.ranker(entries, postings, kinds.ops, kinds.acts, kinds.objects)

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
        return Index(self._analyzer, self._fingerprint, entries, postings, self._backend)

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

    def using(self, backend: _backend.Backend) -> "Index":
        """This index ranked by one twin (pure or compiled; see :mod:`agent._backend`).

        Shares everything with ``self``; for the parity tests and benchmarks,
        which hold the twins to the same results in one process.
        """
        return Index(_analyzer(self.vocabulary, backend), self._fingerprint, self._entries, self._postings,
                     backend)

    def _rank(self, intent: str, top_k: int, trace: dict[str, list[str]] | None = None) -> list[Hit]:
        """The best candidates; ``trace`` (for debugging a ranking) collects each candidate's factors."""
        terms = self._analyzer.request(intent, self._known, self._entries)
        return [Hit(name, score, why) for name, score, why in self._ranker.rank(terms, top_k, trace)]
