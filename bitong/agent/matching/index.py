"""Intent to tools: the match index, the evidence for each candidate, and the found decision.

For each request the index gathers evidence for the tools that could fit:

* lexical: the share of the request a tool explains (BM25F presences over
  its fields; :mod:`bitong.agent.matching.lexical`), and its margin over the next tool;
* semantic: the cosine between the request and the tool's text in a
  multilingual embedding (:mod:`bitong.agent.matching.semantic`), as a z-score against
  the whole registry (how much this tool stands out for this request) and
  its margin over the next tool;
* a ``trigger_keywords`` phrase present in the request;
* ``non_goals``: a request closer to one of the tool's non-goal lines than to
  the tool (by meaning), or naming what sets the line apart from the tool
  (by words), pushes the tool away; a tool the line refers to ("用 X")
  gains.

The shipped weights (fitted across development registries) rank the
candidates; the registry's own calibration (:mod:`bitong.agent.matching.calibrate`:
pseudo-requests made from the tools' texts, never from eval queries) turns
the same evidence into a probability-like score. One threshold on the first
candidate's score decides ``found``.

The index is immutable: :meth:`Index.updated` returns a new one sharing what
the change did not touch, :meth:`Index.with_vectors` one with more tool
vectors (computed off the request path by the cache agent). Until every tool
has its vectors, the index ranks lexically, with the lexical calibration.
"""

from __future__ import annotations

import bisect
import functools
import hashlib
import marshal
import math
import pkgutil
import re
import uuid
import zlib
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import NamedTuple

from bitong.agent.matching.lazy_numpy import np

from bitong.v1.agent_pb2 import ToolDef

from bitong.agent.matching import _backend
from bitong.agent.matching.analysis import Terms, normalize, stem
from bitong.agent.matching.lexical import ALPHA, OOV_FACTOR
from bitong.agent.matching.semantic import DIM, Embedder, negation_stripped
from bitong.agent.matching.vocabulary import Vocabulary

__all__ = ["DEFAULT_THRESHOLD", "ROUGH", "SUGGESTION", "Calibration", "Hit", "Index", "MatchResult",
           "StoredAnalyses", "ToolAnalysis", "analysis_fingerprint", "analyze", "rough_analysis"]

SUGGESTION = "此工具尚不在仓库中，需铸渊新建"
DEFAULT_THRESHOLD = 0.5

_REFERRAL = re.compile(r"[（(]?\s*(?:用|改用|请用|请使用|使用|use|see|try)\s*([a-z0-9][a-z0-9_-]*[a-z0-9])\s*[)）]?", re.I)
_NG_SPLIT = re.compile(r"[；;。\n]|\.\s")
_LATIN = re.compile(r"[a-z0-9]+")
_CANDIDATES = 24   # candidates taken from each side (lexical, semantic) before scoring
# The model's cosines of unrelated texts, as a prior (request x tool over the
# development registries: mean 0.04-0.12, deviation 0.07-0.10); the other
# cosine scales below are in units of its deviation.
_PRIOR_MU, _PRIOR_SIGMA, _PRIOR_N = 0.08, 0.085, 12.0
_GAP_CLIP = 1.4 * _PRIOR_SIGMA    # a margin over the next tool counts up to this
_NG_PUSH = 0.3 * _PRIOR_SIGMA     # a request this much closer to a non-goal line than to its tool is pushed


@dataclass(frozen=True)
class Hit:
    """One candidate: the tool, its calibrated score and why it matched."""

    name: str
    score: float                      # 0..1, higher is better
    matched_terms: tuple[str, ...]    # the request's words that matched, for --explain
    evidence: Mapping[str, float] = field(default_factory=dict, compare=False)


@dataclass(frozen=True)
class MatchResult:
    """The answer to one intent.

    ``hits`` holds the best candidates whether or not ``found``: below the
    threshold they explain a near miss to a tool author (a caller answering
    an agent sends none when not found). ``explanation`` says, in words, why
    the answer is what it is.
    """

    found: bool
    hits: list[Hit]
    suggestion: str
    explanation: str = ""
    missing_terms: tuple[str, ...] = ()


class Calibration(NamedTuple):
    """The weights of the evidence (logit units) and score = sigmoid(scale * logit + shift).

    Fitted per registry by :mod:`bitong.agent.matching.calibrate`; ``samples`` is how
    many pseudo-requests it was fitted on (0: the prior, as shipped).
    """

    weights: Mapping[str, float]
    scale: float = 1.0
    shift: float = 0.0
    samples: int = 0
    # Each tool's mean similarity to the registry's own requests (hubness): a
    # tool written in the registry's main language is close to every request
    # in it, one written in another language far from all. Half of it is
    # taken off its similarity (CSLS), so a Chinese request finds an English tool.
    hub: Mapping[str, float] = {}


class ToolAnalysis(NamedTuple):
    """What the index keeps of one tool: plain data, stored by the registry next to the tool.

    ``sha256`` and ``fingerprint`` (this code and the vocabulary) say what it
    was made from; ``vectors`` is float32 bytes (the tool text, then each
    non-goal line) for ``vectors_model``, or empty until computed.
    """

    name: str
    sha256: str
    fingerprint: str
    weights: dict[str, float]                              # term -> presence 0..1
    keywords: tuple[tuple[str, tuple[str, ...]], ...]       # (normalized phrase, its English words)
    non_goals: tuple[tuple[tuple[str, ...], str, str], ...]  # (distinct terms, referred tool, text)
    sem_text: str                                          # what the model reads of the tool
    title: tuple[str, ...] = ()                            # the words of its display, name and keywords
    vectors: bytes = b""
    vectors_model: str = ""

    def to_bytes(self) -> bytes:
        """The format, the fields but the vectors (marshal, length first), then the model id and the
        vectors as they are: a restart reads the vectors (:meth:`stored_vectors`) without decoding the rest."""
        head = marshal.dumps(tuple(self)[:-2], 4)
        model = self.vectors_model.encode()
        return b"".join((_FORMAT, len(head).to_bytes(4, "little"), head, len(model).to_bytes(2, "little"), model,
                         self.vectors))

    @classmethod
    def from_bytes(cls, data: bytes) -> ToolAnalysis:
        """Decode :meth:`to_bytes`; raises ValueError for anything else (treat it as absent)."""
        tail = _tail(data)
        if tail is None:
            raise ValueError("not a bitong tool analysis of this format")
        n = int.from_bytes(data[4:8], "little")
        try:
            fields = marshal.loads(memoryview(data)[8:8 + n])
        except Exception as exc:  # marshal raises EOFError, ValueError, TypeError ... on bad bytes
            raise ValueError(f"corrupt tool analysis: {exc}") from None
        if type(fields) is not tuple or len(fields) != len(cls._fields) - 2 or type(fields[3]) is not dict:
            raise ValueError("corrupt tool analysis")
        model, at = tail
        if (len(data) - at) % (4 * DIM):
            raise ValueError("corrupt tool analysis: its vectors are cut short")
        return tuple.__new__(cls, (*fields, bytes(data[at:]), model))

    @staticmethod
    def stored_vectors(data: bytes, model: str) -> np.ndarray | None:
        """The vectors :meth:`to_bytes` wrote for ``model`` (rows of DIM), without decoding the analysis;
        None when there are none for it (or the bytes are not an analysis)."""
        tail = _tail(data)
        if tail is None or tail[0] != model:
            return None
        vecs = np.frombuffer(data, dtype=np.float32, offset=tail[1]) if (len(data) - tail[1]) % 4 == 0 else None
        if vecs is None or not vecs.size or vecs.size % DIM:
            return None
        return vecs.reshape(-1, DIM).copy()   # (a copy: the rest of the analysis is not kept for it)

    def fresh_for(self, tool: ToolDef, fingerprint: str) -> bool:
        return bool(self.sha256) and self.sha256 == tool.content_sha256 and self.name == tool.name \
            and self.fingerprint == fingerprint

    def vector_texts(self) -> list[str]:
        """The texts to embed, in the order of ``vectors``: the tool, then its non-goal lines."""
        return [self.sem_text, *(negation_stripped(text) for _, _, text in self.non_goals)]


_FORMAT = b"bt6\0"


def _tail(data: bytes) -> tuple[str, int] | None:
    """(the vectors' model id, where the vectors start) of a :meth:`ToolAnalysis.to_bytes`, or None."""
    if len(data) < 10 or not data.startswith(_FORMAT):
        return None
    at = 8 + int.from_bytes(data[4:8], "little")
    if at + 2 > len(data):
        return None
    m = int.from_bytes(data[at:at + 2], "little")
    if at + 2 + m > len(data):
        return None
    try:
        return bytes(data[at + 2:at + 2 + m]).decode(), at + 2 + m
    except UnicodeDecodeError:
        return None


class StoredAnalyses:
    """Tools' analyses kept as their stored bytes, each decoded when a request first reads it.

    A restart of 10,000 tools would spend more on decoding every analysis
    than on the rest of its start; a match reads a few dozen. Used as the
    index's ``dict`` of analyses (the methods the index calls). Requests read
    it from several threads: a read never iterates a dict another read may
    add to (a tool decoded twice at once is decoded twice, no more).
    """

    __slots__ = ("_raw", "_cache", "_added")

    def __init__(self, raw: dict[str, tuple[str, Callable[[], bytes]]], cache: dict[str, ToolAnalysis] | None = None,
                 added: dict[str, ToolAnalysis] | None = None) -> None:
        # name -> (its sha256, what reads its ToolAnalysis.to_bytes()), in the index's order: the bytes stay
        # where the registry's state holds them, not copied
        self._raw = raw
        self._cache = cache if cache is not None else {}   # the stored ones decoded so far
        self._added = added if added is not None else {}   # set since (an edit): never among the stored ones

    def __getitem__(self, name: str) -> ToolAnalysis:
        a = self._added.get(name)
        if a is None:
            a = self._cache.get(name)
            if a is None:
                a = self._cache[name] = ToolAnalysis.from_bytes(self._raw[name][1]())
        return a

    def get(self, name: str, default: ToolAnalysis | None = None) -> ToolAnalysis | None:
        return self[name] if name in self else default

    def __contains__(self, name: object) -> bool:
        return name in self._raw or name in self._added

    def __len__(self) -> int:
        return len(self._raw) + len(self._added)

    def __iter__(self) -> Iterator[str]:
        yield from self._raw
        yield from self._added

    def keys(self) -> Iterator[str]:
        return iter(self)

    def values(self) -> Iterator[ToolAnalysis]:
        return (self[name] for name in self)

    def items(self) -> Iterator[tuple[str, ToolAnalysis]]:
        return ((name, self[name]) for name in self)

    def copy(self) -> StoredAnalyses:
        return StoredAnalyses(dict(self._raw), dict(self._cache), dict(self._added))

    def pop(self, name: str, default: ToolAnalysis | None = None) -> ToolAnalysis | None:
        a = self.get(name, default)
        self._raw.pop(name, None)
        self._cache.pop(name, None)
        self._added.pop(name, None)
        return a

    def __setitem__(self, name: str, a: ToolAnalysis) -> None:
        self._raw.pop(name, None)   # its stored bytes are another analysis now
        self._cache.pop(name, None)
        self._added[name] = a

    def decoded(self) -> Iterable[ToolAnalysis]:
        """The analyses set since the restore (the others are the stored ones, full analyses all)."""
        return self._added.values()

    def vectors(self, model: str) -> Iterator[tuple[str, np.ndarray]]:
        """Each tool's stored vectors for ``model``; the stored analyses are not decoded for them."""
        for name, (_sha, read) in list(self._raw.items()):
            a = self._cache.get(name)
            vecs = ToolAnalysis.stored_vectors(read(), model) if a is None else _vectors_of(a, model)
            if vecs is not None:
                yield name, vecs
        for name, a in list(self._added.items()):
            vecs = _vectors_of(a, model)
            if vecs is not None:
                yield name, vecs

    def stored(self, name: str) -> tuple[str, bytes]:
        """(sha256, the analysis as stored), without decoding it (KeyError: not indexed)."""
        got = self._raw.get(name)
        if got is None:
            a = self._added[name]
            return a.sha256, a.to_bytes()
        return got[0], got[1]()


_Entries = dict[str, ToolAnalysis] | StoredAnalyses
_INDEX_FORMAT = "bitong-index-1"


def _code_hash() -> str:
    digest = hashlib.sha256(_FORMAT)
    for mod in ("index.py", "analysis.py", "lexical.py"):
        try:
            data = pkgutil.get_data("bitong.agent.matching", mod)
        except OSError:
            data = None
        digest.update(data if data is not None else uuid.uuid4().bytes)
    return digest.hexdigest()[:16]


_CODE_HASH = _code_hash()


def analysis_fingerprint(vocabulary: Vocabulary | None) -> str:
    """What an analysis depends on besides the tool: this code and the vocabulary (if any)."""
    return f"{_CODE_HASH}.{vocabulary.fingerprint if vocabulary is not None else 'none'}"


def _words(text: str) -> tuple[str, ...]:
    return tuple(stem(w) for w in _LATIN.findall(text))


_SHARED_TEXT = 64  # texts this short (names, parameter descriptions) recur across tools: analysed once a build


def analyze(tool: ToolDef, vocabulary: Vocabulary | None = None,
            backend: _backend.Backend = _backend.active, shared: dict[str, Terms] | None = None) -> ToolAnalysis:
    """The per-tool part of indexing; pure, so it can be stored and reused.

    ``shared`` is a memo of short texts' terms across the tools of one build
    (read only once made: a registry's tools repeat their parameters).
    """
    concepts = vocabulary.find if vocabulary is not None else None
    an = backend.terms
    memo: dict[str, Terms] = {}
    common = shared if shared is not None else {}

    def t(text: str) -> Terms:
        got = memo.get(text)
        if got is None:
            got = common.get(text)
            if got is None:
                got = an(text, concepts) if text else {}
                if len(text) <= _SHARED_TEXT:
                    common[text] = got
            memo[text] = got
        return got

    params: Terms = {}
    slots: Terms = {}
    for pname in tool.params_schema:
        spec = tool.params_schema[pname]
        for slot in _slots(pname, spec):
            slots[slot] = 1.0
        for text in (pname.replace("_", " "), spec.description,
                     *(v.string_value for v in spec.enum if v.string_value)):
            for term, w in t(text).items():
                params[term] = max(params.get(term, 0.0), w)
    keywords: Terms = {}
    for kw in tool.trigger_keywords:
        for term, w in t(kw).items():
            keywords[term] = max(keywords.get(term, 0.0), w)
    # Background fields keep their words and bigrams; single characters and
    # pinyin (recall, typos) come from the fields that say what the tool is.
    params = {term: w for term, w in params.items() if term[0] not in "uy"}
    why = {term: w for term, w in t(tool.why).items() if term[0] not in "uy"}
    fields = [("display", t(tool.display)), ("intent", t(tool.intent)), ("keywords", keywords),
              ("name", t(tool.name.replace("-", " ").replace("_", " "))), ("why", why), ("params", params),
              ("slots", slots)]
    weights = backend.presences(fields)
    strong = {term for term, p in weights.items() if p >= 0.3}
    non_goals = []
    for item in tool.non_goals:
        for line in _NG_SPLIT.split(item):
            line = line.strip()
            if not line:
                continue
            refs = _REFERRAL.findall(line)
            ref = refs[-1].lower() if refs else ""
            text = _REFERRAL.sub(" ", line).strip()
            distinct = tuple(sorted(term for term in t(text) if term not in strong and term[0] in "wzbc"))
            non_goals.append((distinct, ref, text or line))
    kw_forms = tuple((normalize(kw).strip(), _words(normalize(kw))) for kw in tool.trigger_keywords if kw.strip())
    sem = f"{tool.display}: {tool.intent}"
    if tool.trigger_keywords:
        sem += " (" + ", ".join(tool.trigger_keywords) + ")"
    title = tuple(sorted({term for text in (tool.display, tool.name.replace("-", " "), *tool.trigger_keywords)
                          for term in t(text) if term[0] in "wzc"}))
    return ToolAnalysis(tool.name, tool.content_sha256, analysis_fingerprint(vocabulary), weights,
                        kw_forms, tuple(non_goals), sem, title)


ROUGH = "rough"   # the fingerprint of a rough analysis: no index or state takes it for a full one


def rough_analysis(tool: ToolDef, backend: _backend.Backend = _backend.active,
                   shared: dict[str, Terms] | None = None) -> ToolAnalysis:
    """A tool's words and bigrams only (:func:`bitong.agent.matching.analysis.rough_terms`), over the fields
    that say what it is (not ``why``, nor non-goals): what a cold start of thousands of tools serves on
    until their analyses are in."""
    an = backend.rough_terms
    memo = shared if shared is not None else {}

    def t(text: str) -> Terms:
        got = memo.get(text)
        if got is None:
            got = memo[text] = an(text) if text else {}
        return got

    params: Terms = {}
    slots: Terms = {}
    for pname in tool.params_schema:
        spec = tool.params_schema[pname]
        for slot in _slots(pname, spec):
            slots[slot] = 1.0
        for text in (pname.replace("_", " "), spec.description):
            for term, w in t(text).items():
                params[term] = max(params.get(term, 0.0), w)
    keywords: Terms = {}
    for kw in tool.trigger_keywords:
        for term, w in t(kw).items():
            keywords[term] = max(keywords.get(term, 0.0), w)
    fields = [("display", t(tool.display)), ("intent", t(tool.intent)), ("keywords", keywords),
              ("name", t(tool.name.replace("-", " ").replace("_", " "))), ("params", params), ("slots", slots)]
    kw_forms = tuple((normalize(kw).strip(), _words(normalize(kw))) for kw in tool.trigger_keywords if kw.strip())
    sem = f"{tool.display}: {tool.intent}"
    if tool.trigger_keywords:
        sem += " (" + ", ".join(tool.trigger_keywords) + ")"
    title = tuple(sorted({term for text in (tool.display, tool.name.replace("-", " "), *tool.trigger_keywords)
                          for term in t(text) if term[0] == "w"}))
    return ToolAnalysis(tool.name, tool.content_sha256, ROUGH, backend.presences(fields), kw_forms, (), sem, title)


_SLOT_NAMES = (("cmd", "cmdline"), ("command", "cmdline"), ("script", "cmdline"), ("url", "url"), ("uri", "url"), ("endpoint", "url"), ("host", "host"), ("ip", "host"),
               ("addr", "host"), ("domain", "host"), ("email", "email"), ("mail", "email"), ("version", "version"),
               ("path", "path"), ("dir", "path"), ("folder", "path"), ("file", "file"))


@functools.lru_cache(maxsize=4096)
def _name_slots(name: str) -> frozenset[str]:
    """The slots a parameter's (lowercase) name says; registries repeat their parameter names."""
    parts = name.split("_")
    return frozenset("p:" + slot for part, slot in _SLOT_NAMES
                     if part in parts or name.endswith(part) or name.startswith(part))


def _slots(pname: str, spec: object) -> set[str]:
    """The kinds of value a parameter takes (``p:path``...), from its schema: what a request's values meet."""
    out = set(_name_slots(pname.lower()))
    normalize_rules = getattr(spec, "normalize", ())
    if "path" in normalize_rules:
        out.update(("p:path", "p:file"))
    if getattr(spec, "pattern", "").startswith("^http"):
        out.add("p:url")
    if "p:path" in out:
        out.add("p:file")
    return out


def _sigmoid(x: float) -> float:
    if x >= 0:
        return 1.0 / (1.0 + math.exp(-x))
    e = math.exp(x)
    return e / (1.0 + e)


# The weights of the evidence, in logit units: the prior every registry's
# calibration starts from and is pulled towards (agent/match/calibrate.py).
# Fitted once, by benchmarks/fit_priors.py, on development registries of three
# domains (ops, office, an English plugin store) that are not the eval sets;
# each registry then refits them on its own pseudo-requests.
SEMANTIC_WEIGHTS = {"bias": -1.35, "share": 4.76, "wshare": -0.92, "tcov": 2.07, "op_miss": 0.41, "lrank": 1.56,
                    "lgap": 8.43, "kw": 0.53, "ng_lex": 6.67, "z": 0.78, "gap": 13.44, "srank": 0.99, "ng_sem": 7.8,
                    "ref": -0.13}
LEXICAL_WEIGHTS = {"bias": -0.84, "share": 4.91, "wshare": -2.42, "tcov": 2.29, "op_miss": 0.44, "lrank": 2.86,
                   "lgap": 12.71, "kw": 1.31, "ng_lex": 3.44, "ref": 1.47}

# The shipped decision model: how likely the candidate is the right tool and
# not a near miss, read against the other candidates. Fitted by
# benchmarks/fit_priors.py on the development registries' labelled requests
# (the best candidate of each: right tool or NONE); blended with the
# registry's own calibration, DECISION_SHARE of it (chosen on the
# development sets, left out one at a time).
DECISION_FEATURES = ("s1", "d12", "p1", "z", "cos", "share", "wshare", "tcov", "kw", "gap", "lgap", "ng_sem",
                     "ng_lex", "op_miss")
DECISION_WEIGHTS = {"bias": -2.38, "s1": 0.65, "d12": -0.36, "p1": 2.6, "z": -0.73, "cos": 7.4, "share": 2.12,
                    "wshare": 1.2, "tcov": -3.04, "kw": 0.0, "gap": 4.43, "lgap": 0.81, "ng_sem": 12.4,
                    "ng_lex": 6.18, "op_miss": 1.24}
DECISION_SHARE = 0.7


def _vectors_of(a: ToolAnalysis, model: str) -> np.ndarray | None:
    """A decoded analysis's vectors for ``model``, one row for the tool and one for each non-goal line."""
    if not a.vectors or a.vectors_model != model:
        return None
    vecs = np.frombuffer(a.vectors, dtype=np.float32)
    return vecs.reshape(-1, DIM) if vecs.size == DIM * (1 + len(a.non_goals)) else None


def _reader(data: bytes | Callable[[], bytes]) -> Callable[[], bytes]:
    return data if callable(data) else (lambda: data)


def _near_updated(near: dict[str, list[str]], before: Mapping[str, object], after: Mapping[str, object],
                  touched: Iterable[str]) -> dict[str, list[str]]:
    """``near`` (lexical.near_words of ``before``) for ``after``, where only ``touched`` terms came or went:
    an edit costs the words it adds or removes, not the registry's vocabulary."""
    gone = [t[2:] for t in touched if t[0] == "w" and len(t) >= 6 and t in before and t not in after]
    new = [t[2:] for t in touched if t[0] == "w" and len(t) >= 6 and t not in before and t in after]
    if not gone and not new:
        return near
    out = dict(near)   # the lists are never changed in place: this index's stay as they are
    for word in gone:
        for i in range(len(word)):
            key = word[:i] + word[i + 1:]
            kept = [w for w in out.get(key, ()) if w != word]
            if kept:
                out[key] = kept
            else:
                out.pop(key, None)
    for word in new:
        for key in dict.fromkeys(word[:i] + word[i + 1:] for i in range(len(word))):
            out[key] = [*out.get(key, ()), word]
    return out


def _postings(entries: Mapping[str, ToolAnalysis]) -> dict[str, dict[str, float]]:
    """Term -> {tool: presence}, the tools in the order of ``entries``."""
    postings: dict[str, dict[str, float]] = {}
    for name, e in entries.items():
        for term, p in e.weights.items():
            plist = postings.get(term)
            if plist is None:
                postings[term] = {name: p}
            else:
                plist[name] = p
    return postings


class Index:
    """An immutable match index over a set of tools; see the module docstring."""

    __slots__ = ("_vocabulary", "_fingerprint", "_entries", "_postings", "_embedder", "_vectors",
                 "_matrix", "_names", "_hubs", "_hub_mean", "_consts", "_near", "_signed_cal", "_backend", "calibration",
                 "lexical_calibration")

    def __init__(self, vocabulary: Vocabulary | None, entries: _Entries,
                 postings: dict[str, dict[str, float]], embedder: Embedder | None,
                 vectors: dict[str, np.ndarray], backend: _backend.Backend,
                 calibration: Calibration | None = None, lexical_calibration: Calibration | None = None) -> None:
        """Internal: use :meth:`build`, :meth:`restore`, :meth:`updated`, :meth:`with_vectors` or
        :meth:`with_embedder`."""
        self._vocabulary = vocabulary
        self._fingerprint = analysis_fingerprint(vocabulary)
        self._entries = entries
        self._postings = postings
        self._embedder = embedder
        self._vectors = vectors
        self._backend = backend
        self._matrix: np.ndarray | None = None
        self._names: list[str] = []
        self._hubs: np.ndarray | None = None
        self._hub_mean: float | None = None
        self._consts: dict[str, _ToolConsts] = {}   # what a match reads of each tool, made when first asked
        self._signed_cal: tuple[_Signed, _Signed] | None = None   # the calibrations' weights, signed (semantic, lexical)
        # the known words under their deletions (lexical.near_words), made when a request first has a typo
        self._near: dict[str, list[str]] | None = None
        self.calibration = calibration or Calibration(SEMANTIC_WEIGHTS)
        self.lexical_calibration = lexical_calibration or Calibration(LEXICAL_WEIGHTS)

    # ------------------------------------------------------------ building

    @classmethod
    def build(cls, tools: Iterable[ToolDef | ToolAnalysis], *, vocabulary: Vocabulary | None = None,
              embedder: Embedder | None = None, backend: _backend.Backend | None = None) -> Index:
        """Index these tools (or their stored analyses, used as they are); a later name replaces an earlier one.

        ``embedder`` enables semantic matching once the tools' vectors are
        there (stored analyses may carry them; :meth:`with_vectors` adds them).
        """
        be = backend or _backend.active
        fp = analysis_fingerprint(vocabulary)
        entries: dict[str, ToolAnalysis] = {}
        shared: dict[str, Terms] = {}
        for item in tools:
            if isinstance(item, ToolAnalysis):
                if item.fingerprint != fp:
                    raise ValueError(f"stale analysis of tool {item.name!r}: analyse the tool again")
                entries[item.name] = item
            else:
                entries[item.name] = analyze(item, vocabulary, be, shared)
        index = cls(vocabulary, entries, _postings(entries), embedder, {}, be)
        index._vectors = index._stored_vectors(entries.values())
        return index

    @classmethod
    def rough(cls, tools: Iterable[ToolDef], *, embedder: Embedder | None = None,
              made: Mapping[str, ToolAnalysis] | None = None) -> Index:
        """These tools indexed by their words and bigrams only (:func:`rough_analysis`): a cold start of
        thousands of tools serves on it while :meth:`build` makes the full index in the background.

        Without a vocabulary: a request's words a vocabulary knows would become
        concepts, which a rough analysis does not have. :meth:`updated` analyses
        what changes meanwhile in full (without the vocabulary too); :meth:`saved_postings`
        saves none of it. ``made``: rough analyses already made (by a first scan shared over the cores),
        by tool name; one made for other bytes is made again.
        """
        be = _backend.active
        shared: dict[str, Terms] = {}
        made = made or {}

        def of(tool: ToolDef) -> ToolAnalysis:
            a = made.get(tool.name)
            return a if a is not None and a.sha256 == tool.content_sha256 else rough_analysis(tool, be, shared)

        entries = {tool.name: of(tool) for tool in tools}
        return cls(None, entries, _postings(entries), embedder, {}, be)

    @classmethod
    def restore(cls, stored: Iterable[tuple[ToolDef, bytes | Callable[[], bytes]]], *,
                vocabulary: Vocabulary | None = None,
                embedder: Embedder | None = None, saved: bytes = b"") -> Index:
        """Index tools next to their stored analyses: a restart. Stale or broken ones are redone; never raises for them.

        Each analysis is its bytes, or what reads them when needed (the registry's
        state holds them: they are not copied). ``saved`` is :meth:`saved_postings`
        of the index that was stored: when
        it holds exactly these tools at these contents, analysed by this code,
        its posting lists are taken as they are and each analysis is decoded
        only when a request reads it. Otherwise (or when it is broken) every
        analysis is decoded and checked, and the postings are built again.
        """
        fp = analysis_fingerprint(vocabulary)
        pairs = list(stored)
        if saved:
            index = cls._from_saved(pairs, vocabulary, fp, saved)
            if index is not None:
                if embedder is not None:   # its stored vectors, read without decoding the analyses
                    index._embedder = embedder
                    index._vectors = index._stored_vectors(index._entries)
                return index
        items: list[ToolDef | ToolAnalysis] = []
        for tool, stored_bytes in pairs:
            a = None
            data = stored_bytes() if callable(stored_bytes) else stored_bytes
            if data:
                try:
                    a = ToolAnalysis.from_bytes(data)
                except ValueError:
                    a = None
            items.append(a if a is not None and a.fresh_for(tool, fp) else tool)
        return cls.build(items, vocabulary=vocabulary, embedder=embedder)

    @classmethod
    def _from_saved(cls, pairs: list[tuple[ToolDef, bytes | Callable[[], bytes]]], vocabulary: Vocabulary | None,
                    fp: str,
                    saved: bytes) -> Index | None:
        """The stored index as it was, or None when ``saved`` does not describe these tools' analyses."""
        if len(saved) < 4 or zlib.crc32(saved[4:]) != int.from_bytes(saved[:4], "little"):
            return None
        try:
            tag, fingerprint, order, check, postings = marshal.loads(memoryview(saved)[4:])
        except Exception:  # marshal raises EOFError, ValueError, TypeError ... on bad bytes
            return None
        if tag != _INDEX_FORMAT or fingerprint != fp or type(order) is not tuple or type(postings) is not dict \
                or len(order) != len(pairs):
            return None
        by_name = {tool.name: (tool.content_sha256, _reader(data)) for tool, data in pairs}
        raw: dict[str, tuple[str, Callable[[], bytes]]] = {}
        crc = 0
        for name, sha in order:   # the stored index's order: the order of its posting lists
            got = by_name.get(name)
            if got is None or not sha or got[0] != sha:
                return None
            data = got[1]()
            if not data.startswith(_FORMAT):
                return None
            raw[name] = got
            crc = zlib.crc32(data, crc)
        if len(raw) != len(by_name) or crc != check:   # a damaged analysis is found now, not by a request
            return None
        return cls(vocabulary, StoredAnalyses(raw), postings, None, {}, _backend.active)

    def saved_postings(self) -> bytes:
        """The posting lists and what they index, for :meth:`restore` (``saved``): a restart need not
        rebuild them from every tool's analysis."""
        entries = self._entries
        decoded = entries.values() if isinstance(entries, dict) else entries.decoded()
        if any(a.fingerprint != self._fingerprint for a in decoded):
            return b""   # rough analyses among them: a restart analyses those again, and builds the postings
        order = []
        crc = 0
        for name in self._entries:
            sha, data = self.stored_analysis(name)
            order.append((name, sha))
            crc = zlib.crc32(data, crc)
        # Presences are multiples of 1/QUANTUM: written as one object each (and references to it), they are
        # read back without making a float per posting (half the time to load, and less memory).
        shared: dict[float, float] = {}
        postings = {term: {name: shared.setdefault(p, p) for name, p in plist.items()}
                    for term, plist in self._postings.items()}
        payload = marshal.dumps((_INDEX_FORMAT, self._fingerprint, tuple(order), crc, postings), 4)
        return zlib.crc32(payload).to_bytes(4, "little") + payload

    def stored_analysis(self, name: str) -> tuple[str, bytes]:
        """One tool's (sha256, analysis) as the registry stores it, never decoded for it (KeyError: not indexed)."""
        entries = self._entries
        if isinstance(entries, StoredAnalyses):
            return entries.stored(name)
        a = entries[name]
        return a.sha256, a.to_bytes()

    def _stored_vectors(self, analyses: Iterable[ToolAnalysis] | _Entries) -> dict[str, np.ndarray]:
        if self._embedder is None:
            return {}
        model = self._embedder.model_id
        if isinstance(analyses, StoredAnalyses):
            return dict(analyses.vectors(model))
        out: dict[str, np.ndarray] = {}
        for a in analyses.values() if isinstance(analyses, dict) else analyses:
            vecs = _vectors_of(a, model)
            if vecs is not None:
                out[a.name] = vecs
        return out

    def with_embedder(self, embedder: Embedder) -> Index:
        """This index with a model: the tools' stored vectors for it serve at once, the others are pending
        (the analyses are not decoded, nor the posting lists built again)."""
        index = self._same_words(Index(self._vocabulary, self._entries, self._postings, embedder, {}, self._backend,
                                       self.calibration, self.lexical_calibration))
        index._vectors = index._stored_vectors(self._entries)
        return index

    def updated(self, upsert: Iterable[ToolDef | ToolAnalysis] = (), remove: Iterable[str] = ()) -> Index:
        """A new Index with these tools replaced, added or removed; ``self`` stays valid and unchanged.

        Costs what the changed tools touch: only the posting lists whose entry for them changed are copied.
        """
        entries = self._entries.copy()   # (stored analyses stay undecoded)
        postings = dict(self._postings)
        vectors = dict(self._vectors)
        copied: set[str] = set()
        touched: set[str] = set()   # every term whose posting list was copied (some since removed)

        def own(term: str) -> dict[str, float]:
            if term not in copied:
                copied.add(term)
                touched.add(term)
                postings[term] = dict(postings.get(term, ()))
            return postings[term]

        def drop(name: str, keep: Mapping[str, float] | None = None) -> None:
            # keep: the tool's new weights; a posting that stays as it was is not copied
            old = entries.pop(name, None)
            vectors.pop(name, None)
            if old is None:
                return
            for term, p in old.weights.items():
                if keep is not None and keep.get(term) == p:
                    continue
                plist = own(term)
                plist.pop(name, None)
                if not plist:
                    del postings[term]
                    copied.discard(term)

        for name in remove:
            drop(name)
        upserted: list[ToolAnalysis] = []
        shared: dict[str, Terms] = {}
        for item in upsert:
            if isinstance(item, ToolAnalysis):
                if item.fingerprint != self._fingerprint:
                    raise ValueError(f"stale analysis of tool {item.name!r}: analyse the tool again")
                a = item
            else:
                a = analyze(item, self._vocabulary, self._backend, shared)
            before = entries.get(a.name)
            drop(a.name, a.weights)
            entries[a.name] = a
            upserted.append(a)
            for term, p in a.weights.items():
                if before is None or before.weights.get(term) != p:
                    own(term)[a.name] = p
        index = Index(self._vocabulary, entries, postings, self._embedder, vectors, self._backend,
                      self.calibration, self.lexical_calibration)
        index._vectors.update(index._stored_vectors(a for a in upserted if a.name not in vectors))
        if self._near is not None:
            index._near = _near_updated(self._near, self._postings, postings, touched)
        return index

    def with_vectors(self, computed: Mapping[str, tuple[str, np.ndarray]],
                     calibration: Calibration | None = None,
                     lexical_calibration: Calibration | None = None) -> Index:
        """A new Index with these tools' vectors ({name: (sha256, vectors)}), for the tools still at that sha."""
        if self._embedder is None:
            return self
        entries = self._entries.copy()
        vectors = dict(self._vectors)
        model = self._embedder.model_id
        for name, (sha, vecs) in computed.items():
            a = entries.get(name)
            if a is None or a.sha256 != sha or vecs.shape != (1 + len(a.non_goals), DIM):
                continue
            vecs = np.ascontiguousarray(vecs, dtype=np.float32)
            entries[name] = a._replace(vectors=vecs.tobytes(), vectors_model=model)
            vectors[name] = vecs
        return self._same_words(Index(self._vocabulary, entries, self._postings, self._embedder, vectors,
                                      self._backend, calibration or self.calibration,
                                      lexical_calibration or self.lexical_calibration))

    def with_calibration(self, calibration: Calibration | None = None,
                         lexical_calibration: Calibration | None = None) -> Index:
        return self._same_words(Index(self._vocabulary, self._entries, self._postings, self._embedder, self._vectors,
                                      self._backend, calibration or self.calibration,
                                      lexical_calibration or self.lexical_calibration))

    def _same_words(self, index: Index) -> Index:
        """``index`` (made from this one's posting lists) with this one's typo map: the same words, made once."""
        if index._postings is self._postings:
            index._near = self._near
        return index

    def using(self, backend: _backend.Backend) -> Index:
        """This index, analysed and ranked by one twin (for the parity tests and benchmarks)."""
        return self._same_words(Index(self._vocabulary, self._entries, self._postings, self._embedder, self._vectors,
                                      backend, self.calibration, self.lexical_calibration))

    # ------------------------------------------------------------ reading

    @property
    def postings_restored(self) -> bool:
        """True when the posting lists came from :meth:`saved_postings` (or this index was derived from
        one that did): a restore that had to rebuild them says its state should be written again."""
        return isinstance(self._entries, StoredAnalyses)

    @property
    def fingerprint(self) -> str:
        return self._fingerprint

    @property
    def vocabulary(self) -> Vocabulary | None:
        return self._vocabulary

    @property
    def embedder(self) -> Embedder | None:
        return self._embedder

    @property
    def semantic_ready(self) -> bool:
        """True when every tool has its vectors, so requests are compared by meaning too."""
        return self._embedder is not None and bool(self._entries) and len(self._vectors) == len(self._entries)

    def pending_vectors(self) -> list[ToolAnalysis]:
        """The tools whose vectors are still to be computed."""
        if self._embedder is None:
            return []
        return [a for name, a in self._entries.items() if name not in self._vectors]

    def has_vectors(self, name: str) -> bool:
        return name in self._vectors

    def tool_vector(self, name: str) -> np.ndarray:
        """The embedding of a tool's text (KeyError before its vectors are in)."""
        vector: np.ndarray = self._vectors[name][0]
        return vector

    def analysis(self, name: str) -> ToolAnalysis | None:
        return self._entries.get(name)

    def analyses(self) -> Iterable[ToolAnalysis]:
        return self._entries.values()

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, name: object) -> bool:
        return name in self._entries

    # ------------------------------------------------------------ matching

    def _matrix_names(self) -> tuple[np.ndarray, list[str]]:
        if self._matrix is None:
            names = sorted(self._vectors)
            self._names = names
            self._matrix = (np.stack([self._vectors[n][0] for n in names]) if names
                            else np.zeros((0, DIM), dtype=np.float32))
        return self._matrix, self._names

    def _hub_vector(self, names: list[str], hub: Mapping[str, float]) -> np.ndarray:
        if self._hubs is None or len(self._hubs) != len(names):
            default = float(np.mean(list(hub.values()))) if hub else 0.0
            self._hubs = np.asarray([hub.get(n, default) for n in names], dtype=np.float32)
        return self._hubs

    def _signed(self, semantic: bool) -> _Signed:
        got = self._signed_cal
        if got is None:
            got = self._signed_cal = (_Signed.of(self.calibration.weights), _Signed.of(self.lexical_calibration.weights))
        return got[0] if semantic else got[1]

    def prepare_typos(self) -> None:
        """Make the typo map now (the cache agent does, off the request path): the first request with a
        typo would otherwise pay for it (~0.1 s at 10,000 tools). Indexes updated from this one keep it."""
        if self._near is None:
            self._near = self._backend.near_words(self._postings)

    @property
    def typos_ready(self) -> bool:
        return self._near is not None

    def _typos(self, q: Mapping[str, float]) -> dict[str, list[str]] | None:
        """The index's known words by their deletions, when the request has an unknown word that may be a typo."""
        near = self._near
        if near is None:
            postings = self._postings
            if any(t[0] == "w" and len(t) >= 6 and t not in postings for t in q):
                near = self._near = self._backend.near_words(postings)
        return near

    def _cos(self, name: str, vec: np.ndarray, qv: np.ndarray) -> float:
        hub = self.calibration.hub
        c = float(vec @ qv)
        if hub:
            h = hub.get(name)
            if h is None:  # a tool newer than the calibration: the registry's mean hubness
                if self._hub_mean is None:
                    self._hub_mean = float(np.mean(list(hub.values())))
                h = self._hub_mean
            c -= 0.5 * h
        return c

    def match(self, intent: str, top_k: int = 3, *, threshold: float | None = None,
              semantic: bool = True, allowed: Callable[[str], bool] | None = None) -> MatchResult:
        """The best ``top_k`` tools for ``intent``; ``found`` if the first clears ``threshold``.

        ``allowed`` (a caller's policy) drops the tools it says no to before
        the best are chosen, so a caller is offered only tools it may call.
        """
        limit = DEFAULT_THRESHOLD if threshold is None else threshold
        hits, missing = self._scored(intent, semantic, None, "", None, None, None, max(top_k, 0), allowed)
        found = bool(hits) and hits[0].score >= limit
        shown = tuple(_readable(missing))
        return MatchResult(found, hits, "" if found else SUGGESTION,
                           _explain(found, hits, shown, limit), shown)

    def evidence(self, intent: str, *, semantic: bool = True, query_vector: np.ndarray | None = None,
                 exclude: str = "", held_out: tuple[ToolAnalysis, np.ndarray] | None = None,
                 weights: Mapping[str, float] | None = None, calibration: Calibration | None = None,
                 ) -> tuple[list[Hit], list[str]]:
        """Every candidate with its score and evidence, best first, and the request's terms no tool has.

        The keyword arguments serve the calibration (:mod:`bitong.agent.matching.calibrate`):
        a precomputed request vector, a tool left out (a request for a tool
        the registry lacks), a tool seen through one of its fields less
        (``held_out``: its analysis and vector without that field), and
        other weights.
        """
        return self._scored(intent, semantic, query_vector, exclude, held_out, weights, calibration, None, None)

    def _scored(self, intent: str, semantic: bool, query_vector: np.ndarray | None, exclude: str,
                held_out: tuple[ToolAnalysis, np.ndarray] | None, weights: Mapping[str, float] | None,
                calibration: Calibration | None, top: int | None, allowed: Callable[[str], bool] | None,
                ) -> tuple[list[Hit], list[str]]:
        """:meth:`evidence` (``top`` None: every candidate), or Match's answer: the best ``top`` tools that
        ``allowed`` lets through, the same hits as the first ``top`` of :meth:`evidence` that it lets through.

        A request has a few dozen candidates and Match shows three: only those get a score, a decision
        and their matched words spelled out. Lexically, a candidate's rank is its cheap evidence (its
        share, its lexical rank and margin, a keyword, its title) plus evidence that can only lower it
        (its words' share, a non-goal it names), so a candidate whose cheap part already ranks under
        the third best is never looked at further. With the model, the decision reads every
        candidate's rank (its softmax share), so every rank is computed; only the scores are not.
        """
        n = len(self._entries)
        if n == 0:
            return [], []
        vocab = self._vocabulary
        q = self._backend.terms(intent, vocab.find if vocab is not None else None)
        acc, total, missing, walked = self._backend.scores(q, self._postings, n, self._typos(q))
        held_terms: list[str] | None = None
        gone = exclude or (held_out[0].name if held_out is not None else "")
        if gone:
            # A registry without that tool (or that field) would not know the
            # words only it has: they count as unknown, as a real request's do.
            oov = self._backend.idf(n, 0) * OOV_FACTOR
            for term, qw in q.items():
                plist = self._postings.get(term)
                if plist is not None and len(plist) == 1 and gone in plist and (
                        exclude or term not in held_out[0].weights):  # type: ignore[index]
                    total += qw * (oov - self._backend.idf(n, 1))
        if exclude:
            acc.pop(exclude, None)
        if held_out is not None:
            ho = held_out[0]
            mass = 0.0
            terms = []
            for term, qw in q.items():
                p = ho.weights.get(term)
                plist = self._postings.get(term)
                if p and plist:
                    mass += qw * self._backend.idf(n, len(plist)) * p
                    terms.append(term)
            acc[ho.name] = mass
            held_terms = terms
        lex_top = self._backend.best(acc, _CANDIDATES)
        share = _Share(acc, total)
        lex_rank = {name: i for i, name in enumerate(lex_top)}
        # The same share over the request's words alone (English words, Chinese
        # words, concepts, values): bigram and character noise left out.
        idf = self._backend.idf
        postings = self._postings
        oov_idf = idf(n, 0) * OOV_FACTOR
        word_total = ALPHA
        word_terms: list[tuple[str, float]] = []
        for term, qw in q.items():
            if term[0] in "wzcp":
                plist = postings.get(term)
                weight = qw * (idf(n, len(plist)) if plist else oov_idf)
                word_total += weight
                if plist:
                    word_terms.append((term, weight))

        use_sem = semantic and self.semantic_ready and self._embedder is not None and bool(intent.strip())
        cos: dict[str, float] = {}
        qv: np.ndarray | None = None
        mu = sigma = 0.0
        if use_sem:
            assert self._embedder is not None
            qv = query_vector if query_vector is not None else self._embedder.query(intent)
            matrix, names = self._matrix_names()
            sims = matrix @ qv
            hub = self.calibration.hub
            prior_mu = _PRIOR_MU
            if hub:
                hubs = self._hub_vector(names, hub)
                sims = sims - 0.5 * hubs
                prior_mu -= 0.5 * float(hubs.mean()) if len(hubs) else 0.0
            m = len(names)
            mu_q = float(sims.mean())
            var_q = float(sims.var())
            mu = (m * mu_q + _PRIOR_N * prior_mu) / (m + _PRIOR_N)
            sigma = math.sqrt((m * var_q + _PRIOR_N * _PRIOR_SIGMA ** 2) / (m + _PRIOR_N))
            if m > _CANDIDATES:  # the best few, in order, without sorting the whole registry
                top_sem = np.argpartition(-sims, _CANDIDATES)[:_CANDIDATES]
                top_sem = top_sem[np.argsort(-sims[top_sem])]
            else:
                top_sem = np.argsort(-sims)
            for i in top_sem.tolist():
                cos[names[i]] = float(sims[i])
            for name in lex_top:
                if name not in cos and name in self._vectors:
                    cos[name] = self._cos(name, self._vectors[name][0], qv)
            cos.pop(exclude, None)
            if held_out is not None:
                cos[held_out[0].name] = self._cos(held_out[0].name, held_out[1], qv)
        candidates = [c for c in dict.fromkeys([*lex_top, *cos]) if c != exclude]
        sem_rank = {name: i for i, name in enumerate(sorted(cos, key=cos.__getitem__, reverse=True))}
        if not candidates:
            return [], missing

        # Operations the request asks for, where a vocabulary says which concepts are operations:
        # a tool that names none of them is asked for something it does not do.
        asked_ops: list[str] = []
        if vocab is not None:
            kinds = vocab.kinds
            asked_ops = [t for t in q if t[0] == "c" and kinds.get(t[2:]) in ("op", "act")]
        w = weights or (self.calibration.weights if use_sem else self.lexical_calibration.weights)
        cal = calibration or (self.calibration if use_sem else self.lexical_calibration)
        norm_intent = normalize(intent)
        q_words = set(_words(norm_intent))
        # the best two shares (all a margin reads): the lexical top's first two, when it has two
        best_share = [share.get(c, 0.0) for c in lex_top[:2]] if len(lex_top) >= 2 else \
            sorted((share.get(c, 0.0) for c in candidates), reverse=True)
        best_cos = sorted((cos.get(c, 0.0) for c in candidates), reverse=True) if use_sem else []
        entries = self._entries
        consts = self._consts
        q_hashes = {hash(t) for t in q}
        hub_of = self.calibration.hub
        ng_floor = max(sigma, 0.5 * _PRIOR_SIGMA)

        def const(name: str, a: ToolAnalysis) -> _ToolConsts:
            got = consts.get(name)
            if got is None:  # the index is immutable: once per tool
                title = tuple((i, idf(n, len(postings[t]))) for i, t in enumerate(a.title) if t in postings)
                refers = any(ref and ref in entries and ref != name for _, ref, _ in a.non_goals)
                vecs = self._vectors.get(name)
                got = consts[name] = _ToolConsts(sum(v for _, v in title), title, refers,
                                                 vecs[1:] if vecs is not None and len(vecs) > 1 else None,
                                                 0.5 * hub_of.get(name, 0.0),
                                                 frozenset(hash(t) for line in a.non_goals for t in line[0]))
            return got

        def cheap(name: str, a: ToolAnalysis) -> tuple[float, float, float, float, float, float]:
            """The evidence a few lookups give: share, lexical margin, keyword, title coverage, lexical rank, op miss."""
            mass = acc.get(name)
            s = 0.0 if mass is None else mass / total
            other_s = best_share[1] if s == best_share[0] and len(best_share) > 1 else best_share[0]
            lgap = max(-0.3, min(0.3, s - other_s))
            kw = 0.0
            for form, words in a.keywords:
                if (form and form in norm_intent) or (words and q_words.issuperset(words)):
                    kw = 1.0
                    break
            # How much of the tool's own title the request names: long requests do not dilute it.
            c = consts.get(name) or const(name, a)
            title = a.title
            tnamed = 0.0
            for i, v in c.title:
                if title[i] in q:
                    tnamed += v
            tcov = tnamed / c.title_mass if c.title_mass > 0 else 0.0
            # the lexical rank counts only where there is lexical evidence to rank by
            lrank = min(1.0, s / 0.1) / (1.0 + lex_rank.get(name, _CANDIDATES))
            op_miss = 1.0 if asked_ops and not any(op in a.weights for op in asked_ops) else 0.0
            return s, lgap, kw, tcov, lrank, op_miss

        def ng_lexical(name: str, a: ToolAnalysis) -> tuple[float, int]:
            """The largest share of the request one of the tool's non-goal lines names by its own words, and that line."""
            ng_lex = 0.0
            ng_line = -1
            if (consts.get(name) or const(name, a)).ng_hashes.isdisjoint(q_hashes):
                return ng_lex, ng_line   # no line names a word of the request
            for i, (distinct, _ref, _text) in enumerate(a.non_goals):
                mass = 0.0
                for term in distinct:
                    qw = q.get(term)
                    if qw is not None:
                        plist = postings.get(term)
                        mass += qw * (idf(n, len(plist)) if plist else oov_idf)
                if mass / total > ng_lex:
                    ng_lex, ng_line = mass / total, i
            return ng_lex, ng_line

        def full(name: str, known: tuple[float, float, float, float, float, float] | None = None,
                 ng: tuple[float, int] | None = None) -> tuple[dict[str, float], str, float]:
            """Every piece of a candidate's evidence, and the tool one of its non-goals refers to (and how strongly)."""
            a = entries[name]
            s, lgap, kw, tcov, lrank, op_miss = known or cheap(name, a)
            ng_lex, ng_line = ng or ng_lexical(name, a)
            ng_sem = 0.0
            wmass = 0.0
            for term, weight in word_terms:
                p = postings[term].get(name)
                if p:
                    wmass += weight * p
            if held_out is not None and name == held_out[0].name:
                wmass = sum(weight * held_out[0].weights.get(term, 0.0) for term, weight in word_terms)
            wshare = wmass / word_total
            e = {"share": s, "wshare": wshare, "tcov": tcov, "lrank": lrank, "lgap": lgap, "kw": kw, "ng_lex": ng_lex,
                 "op_miss": op_miss}

            if use_sem and qv is not None:
                c = cos.get(name)
                if c is None:
                    c = self._cos(name, self._vectors[name][0], qv) if name in self._vectors else mu
                z = (c - mu) / ng_floor
                other_c = best_cos[1] if c == best_cos[0] and len(best_cos) > 1 else best_cos[0]
                gap = max(-_GAP_CLIP, min(_GAP_CLIP, c - other_c))
                tc = consts.get(name) or const(name, a)
                if tc.ng_vectors is not None:
                    ng_cos = tc.ng_vectors @ qv - tc.half_hub
                    j = int(ng_cos.argmax())
                    ng_sem = max(0.0, float(ng_cos[j]) - c)
                    if ng_sem > 0 and ng_line < 0:
                        ng_line = j
                srank = 1.0 / (1.0 + sem_rank.get(name, _CANDIDATES))
                e.update(cos=c, z=z, gap=gap, ng_sem=ng_sem, srank=srank)
            push = max(ng_lex / 0.1, ng_sem / _NG_PUSH)
            ref, r = "", 0.0
            if ng_line >= 0 and push >= 1.0:
                ref = a.non_goals[ng_line][1]
                if ref and ref in entries and ref != name:
                    r = min(push, 3.0) / 3.0
                else:
                    ref = ""
                e["ng_line"] = float(ng_line)
            return e, ref, r

        # The shipped weights rank (fitted across registries, they rank best); the
        # registry's calibrated weights say how sure the answer is, and so decide found.
        prior = SEMANTIC_WEIGHTS if use_sem else LEXICAL_WEIGHTS
        order = weights or prior
        # the same sums as _logit, with the signs read once: the shipped and this index's own weights
        rank_of = _SIGNED_PRIORS[id(prior)].logit if weights is None else functools.partial(_logit, order)
        logit_of = self._signed(use_sem).logit if weights is None and calibration is None \
            else functools.partial(_logit, w)
        ev: dict[str, dict[str, float]] = {}
        referred: dict[str, float] = {}
        rank: dict[str, float] = {}
        lexical_cut = (top is not None and top > 0 and not use_sem and weights is None and calibration is None
                       and not exclude and held_out is None and _LEXICAL_CUT)
        if not lexical_cut:
            for name in candidates:
                e, ref, r = full(name)
                ev[name] = e
                if ref:
                    referred[ref] = max(referred.get(ref, 0.0), r)
            for ref, r in referred.items():
                if ref not in ev:  # a referred tool that had no evidence of its own
                    ev[ref] = {"share": share.get(ref, 0.0)}
                ev[ref]["ref"] = r
            for name, e in ev.items():
                rank[name] = rank_of(e)
        else:
            assert top is not None
            # A referral raises another tool's rank, so the candidates that can refer are read first
            # (without a meaning, a line refers when the request names its words: ng_lex >= 0.1).
            ngs: dict[str, tuple[float, int]] = {}
            for name in candidates:
                a = entries[name]
                if (consts.get(name) or const(name, a)).refers:
                    ng = ngs[name] = ng_lexical(name, a)
                    if ng[1] >= 0 and ng[0] / 0.1 >= 1.0:
                        ref = a.non_goals[ng[1]][1]
                        if ref and ref in entries and ref != name:
                            referred[ref] = max(referred.get(ref, 0.0), min(ng[0] / 0.1, 3.0) / 3.0)
            cand_set = set(candidates)
            for ref, r in referred.items():
                if ref not in cand_set:  # a referred tool that had no evidence of its own
                    ev[ref] = {"share": share.get(ref, 0.0), "ref": r}
                    rank[ref] = rank_of(ev[ref])
            coef = _COEFFICIENTS
            c_share, c_tcov, c_lrank = coef.get("share", 0.0), coef.get("tcov", 0.0), coef.get("lrank", 0.0)
            c_lgap, c_kw, c_op, c_ref = coef.get("lgap", 0.0), coef.get("kw", 0.0), coef.get("op_miss", 0.0), \
                coef.get("ref", 0.0)
            # The bound before reading a tool at all: its keyword and title at their best, no operation missed.
            unread = max(c_kw, 0.0) + max(c_tcov, 0.0) + max(c_op, 0.0)
            bias = order.get("bias", 0.0)
            top_s = best_share[0]
            second_s = best_share[1] if len(best_share) > 1 else top_s
            bound: list[tuple[float, str]] = []
            for name in candidates:
                if allowed is not None and not allowed(name):
                    continue
                s = share.get(name, 0.0)
                lgap = max(-0.3, min(0.3, s - (second_s if s == top_s else top_s)))
                lrank = min(1.0, s / 0.1) / (1.0 + lex_rank.get(name, _CANDIDATES))
                bound.append((bias + c_share * s + c_lrank * lrank + c_lgap * lgap + c_ref * referred.get(name, 0.0)
                              + unread, name))
            bound.sort(key=lambda b: -b[0])
            kept: list[float] = []   # the exact ranks so far, best first
            for ub, name in bound:
                if len(kept) >= top and ub < kept[top - 1] - _BOUND_SLACK:
                    break   # its rank is at most ub: under the top'th already found, and so is every next one
                known = cheap(name, entries[name])
                s, lgap, kw, tcov, lrank, op_miss = known
                ub = (bias + c_share * s + c_tcov * tcov + c_lrank * lrank + c_lgap * lgap + c_kw * kw
                      + c_op * op_miss + c_ref * referred.get(name, 0.0))
                if len(kept) >= top and ub < kept[top - 1] - _BOUND_SLACK:
                    continue
                e, _, _ = full(name, known, ngs.get(name))
                if name in referred:
                    e["ref"] = referred[name]
                ev[name] = e
                r = rank[name] = rank_of(e)
                bisect.insort(kept, r, key=lambda x: -x)

        # How sure: the registry's own calibration, blended with the shipped decision
        # model, which reads a candidate against the others (its rank logit, its margin,
        # its share of the ranking's softmax) beside its evidence. Serving only: the
        # calibration and fit_priors pass their own weights and read the evidence.
        decide = use_sem and weights is None and calibration is None
        if decide:
            ranks = sorted(rank.values(), reverse=True)
            norm = sum(math.exp(r - ranks[0]) for r in ranks)
        best = sorted(rank, key=lambda nm: (-rank[nm], nm))
        if top is not None:
            best = [nm for nm in best if allowed is None or allowed(nm)][:top]
        hits = []
        for i, name in enumerate(best):
            e = ev[name]
            e["logit"] = logit_of(e)
            r = e["rank"] = rank[name]
            score = _sigmoid(cal.scale * e["logit"] + cal.shift)
            if decide:
                other = ranks[1] if r == ranks[0] and len(ranks) > 1 else ranks[0]
                e["s1"] = r
                e["d12"] = r - other if len(ranks) > 1 else 1.0
                e["p1"] = math.exp(r - ranks[0]) / norm
                e["decision"] = _SIGNED_DECISION.logit(e)
                e["calibrated"] = score
                score = DECISION_SHARE * _sigmoid(e["decision"]) + (1.0 - DECISION_SHARE) * score
            # the matched words, for the candidates a caller can be shown (top_k is at most 20)
            if i < _SHOWN_HITS:
                words = held_terms if held_terms is not None and name == gone else \
                    self._backend.matched(walked, acc, name)
                shown = tuple(_readable(words))
            else:
                shown = ()
            hits.append(Hit(name, round(score, 4), shown, e))
        return hits, missing


# The lexical evidence the bound of a candidate's rank reads, and the evidence (each >= 0) that costs a
# loop per candidate: the bound leaves it out, which is sound while it counts against a tool.
_CHEAP_LEXICAL = frozenset({"share", "tcov", "lrank", "lgap", "kw", "op_miss", "ref"})
_COSTLY_LEXICAL = ("wshare", "ng_lex")
_BOUND_SLACK = 1e-9  # a bound and the exact rank add the same terms in another order


def _only_lowers(order: Mapping[str, float], costly: Iterable[str]) -> bool:
    """True when ``order`` weighs only the evidence the bound knows, and each of ``costly`` counts against a tool."""
    known = _CHEAP_LEXICAL.union(costly)
    return all(f == "bias" or f in known for f in order) and \
        all((-order.get(f, 0.0) if f in _NEGATIVE else order.get(f, 0.0)) <= 0.0 for f in costly)


_SHOWN = 24  # terms shown to a person; a long request is not explained word by word
_SHOWN_HITS = 20  # candidates whose matched terms are spelled out (Match's top_k is at most 20)


class _Share:
    """A tool's share of the request, computed when asked (a big registry matches thousands a little)."""

    __slots__ = ("_acc", "_total")

    def __init__(self, acc: dict[str, float], total: float) -> None:
        self._acc = acc
        self._total = total

    def get(self, name: str, default: float = 0.0) -> float:
        mass = self._acc.get(name)
        return default if mass is None else mass / self._total


_NEGATIVE = frozenset({"ng_lex", "ng_sem", "op_miss"})  # evidence against a tool


class _ToolConsts(NamedTuple):
    """What matching reads of a tool that depends on the index alone: made once per tool an index matches."""

    title_mass: float                        # the idf mass of its title's words
    # each title word the index knows (its place in ToolAnalysis.title, not the word: a reference more would
    # change how marshal writes the posting lists' words, and so saved_postings' bytes), with its idf
    title: tuple[tuple[int, float], ...]
    refers: bool                             # a non-goal line names another tool of the index
    ng_vectors: np.ndarray | None            # its non-goal lines' vectors (None: none, or no vectors yet)
    half_hub: float                          # half its hubness (taken off its similarities)
    ng_hashes: frozenset[int]                # the hashes of its non-goal lines' terms: none in a request, no push


class _Signed(NamedTuple):
    """A weight mapping read once for the request path: each feature's signed weight, and the bias."""

    coef: dict[str, float]
    bias: float

    @classmethod
    def of(cls, w: Mapping[str, float]) -> _Signed:
        return cls({f: (-v if f in _NEGATIVE else v) for f, v in w.items() if f != "bias"}, w.get("bias", 0.0))

    def logit(self, e: Mapping[str, float]) -> float:
        """:func:`_logit` (the same additions in the same order, so the same float)."""
        coef = self.coef
        total = self.bias
        for feature, value in e.items():
            c = coef.get(feature)
            if c is not None:
                total += c * value
        return total


def _logit(w: Mapping[str, float], e: Mapping[str, float]) -> float:
    """The weighted sum of one candidate's evidence (features it lacks count as 0)."""
    total = w.get("bias", 0.0)
    for feature, value in e.items():
        weight = w.get(feature)
        if weight is not None and feature != "bias":
            total += -weight * value if feature in _NEGATIVE else weight * value
    return total


_SIGNED_PRIORS = {id(LEXICAL_WEIGHTS): _Signed.of(LEXICAL_WEIGHTS), id(SEMANTIC_WEIGHTS): _Signed.of(SEMANTIC_WEIGHTS)}
_COEFFICIENTS = _SIGNED_PRIORS[id(LEXICAL_WEIGHTS)].coef
_LEXICAL_CUT = _only_lowers(LEXICAL_WEIGHTS, _COSTLY_LEXICAL)   # the shipped weights allow the cut (else: no cut)
_SIGNED_DECISION = _Signed.of(DECISION_WEIGHTS)


def _readable(terms: Iterable[str]) -> list[str]:
    """Terms as a person reads them: words, Chinese words and concepts, then bigrams no word covers."""
    out: list[str] = []
    seen: set[str] = set()
    chars: set[str] = set()
    bigrams: list[str] = []
    for term in terms:
        kind, _, text = term.partition(":")
        if kind in ("w", "z", "c"):
            shown = text if kind != "c" else f"<{text}>"
            if shown not in seen:
                seen.add(shown)
                out.append(shown)
                chars.update(text)
        elif kind == "b" and len(bigrams) < _SHOWN:
            bigrams.append(text)
        if len(out) >= _SHOWN:
            return out
    for text in bigrams:
        if not (text[0] in chars and text[1] in chars) and text not in seen:
            seen.add(text)
            out.append(text)
    return out[:_SHOWN]


def _explain(found: bool, hits: list[Hit], missing: tuple[str, ...], limit: float) -> str:
    if not hits:
        return "no registered tool shares a word or a meaning with the request"
    best = hits[0]
    e = best.evidence
    parts = [f"best {best.name} at {best.score:.2f} ({'at or above' if found else 'under'} the threshold {limit:.2f})"]
    facts = [f"explains {e.get('share', 0.0):.0%} of the request's words"]
    if "z" in e:
        facts.append(f"meaning z={e['z']:.1f} over the registry")
    if "decision" in e:
        facts.append(f"the decision model says {_sigmoid(e['decision']):.2f} and this registry's "
                     f"calibration {e.get('calibrated', 0.0):.2f}")
    if e.get("kw"):
        facts.append("a trigger keyword matched")
    if "ng_line" in e:
        facts.append("pushed away by one of its non_goals")
    if e.get("ref"):
        facts.append("a non_goal of another tool refers here")
    parts.append(", ".join(facts))
    if missing:
        parts.append("no tool has the words: " + ", ".join(missing[:8]))
    if len(hits) > 1:
        parts.append("next: " + ", ".join(f"{h.name} {h.score:.2f}" for h in hits[1:3]))
    return "; ".join(parts)
