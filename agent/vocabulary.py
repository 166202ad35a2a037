"""The ops vocabulary: how people phrase requests, as concepts with surface forms.

Matching compares concepts, not strings, so that 查看 / 瞧瞧 / show, or 重启 /
拉起来 / restart, count as the same word. The default vocabulary ships as
``agent/vocabularies/ops.tsv``; users extend it with files of the same format.

File format (UTF-8; blank lines and lines starting with ``#`` are skipped)::

    concept<TAB>kind<TAB>form | form | form ...

``concept`` is an id (``restart``); ``kind`` is one of

* ``obj``  a thing or topic (disk, log, container); full weight
* ``op``   an operation that says what it does by itself (backup, deploy,
  translate ...): a tool that does not name it in its display, intent,
  keywords or name is pushed away
* ``act``  an operation on a thing (create, delete, restart ...): like ``op``,
  and the thing it acts on must also be one the tool is about (its display,
  name or keywords), so "create a repository" does not go to a tool that
  creates issues in repositories
* ``look`` a generic looking verb (show, 查看); interchangeable, low weight
* ``mod``  a qualifier (recent, last, most); half weight
* ``stop`` filler that carries no meaning for matching

Forms are Chinese, English or mixed (``a 记录``); English is compared after
folding case, plurals and -ing/-ed forms. A form may belong to several
concepts. In an extension file a known concept may leave ``kind`` empty and
gains the forms; an unknown concept needs a kind. Errors raise
:class:`VocabularyError` naming file and line.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from importlib import resources

from agent.text import normalize, tokens

__all__ = ["KINDS", "Vocabulary", "VocabularyError", "default_vocabulary", "load_vocabulary"]

KINDS = ("obj", "op", "act", "look", "mod", "stop")
DEFAULT_FILE = "ops.tsv"
# English tokens of forms are encoded as characters of plane 15 (private use),
# which never occur in analysed text: agent.text only keeps [a-z0-9] and CJK.
ENCODED_BASE = 0xF0000


class VocabularyError(ValueError):
    """A vocabulary file that cannot be read; the message names file and line."""


def _deletes(word: str) -> set[str]:
    return {word[:i] + word[i + 1 :] for i in range(len(word))}


def _one_edit(a: str, b: str) -> bool:
    """Damerau distance exactly 1 (one insert, delete, substitution or swap)."""
    if a == b or abs(len(a) - len(b)) > 1:
        return False
    if len(a) == len(b):
        diff = [i for i in range(len(a)) if a[i] != b[i]]
        if len(diff) == 1:
            return True
        return len(diff) == 2 and diff[1] == diff[0] + 1 and a[diff[0]] == b[diff[1]] and a[diff[1]] == b[diff[0]]
    if len(a) > len(b):
        a, b = b, a
    return any(b[:i] + b[i + 1 :] == a for i in range(len(b)))


@dataclass(frozen=True)
class Vocabulary:
    """Concepts, their kinds and their forms, ready for longest-match lookup."""

    kinds: dict[str, str]
    forms: dict[tuple[str, ...], tuple[str, ...]]  # token sequence -> concepts
    longest: dict[str, int]  # first token -> longest form starting with it
    sources: tuple[str, ...] = ()
    _typo: dict[str, tuple[str, ...]] = field(default_factory=dict, repr=False)
    _latin: frozenset[str] = frozenset()
    # The same forms for the segmenter (agent.text): every token is one
    # character (a CJK character stays itself, an English token becomes one
    # private-use character), so that a form is a plain string and the
    # longest match is string slicing and dict lookups, not tuple building.
    codes: dict[str, str] = field(default_factory=dict, repr=False)  # English token -> its character
    encoded: dict[str, tuple[str, ...]] = field(default_factory=dict, repr=False)  # form -> "c:" features (no stop)
    fingerprint: str = ""  # hash of every (concept, kind, form): analyses made with another vocabulary are stale

    @classmethod
    def from_entries(cls, entries: Iterable[tuple[str, str, str]], sources: Sequence[str] = ()) -> "Vocabulary":
        """Build from (concept, kind, form) triples; later kinds for a concept must agree."""
        kinds: dict[str, str] = {}
        forms: dict[tuple[str, ...], list[str]] = {}
        digest = hashlib.sha256()
        for concept, kind, form in entries:
            digest.update(f"{concept}\t{kind}\t{form}\n".encode())
            kinds.setdefault(concept, kind)
            key = tuple(t for t, _, _ in tokens(form))
            if not key:
                continue
            bucket = forms.setdefault(key, [])
            if concept not in bucket:
                bucket.append(concept)
        longest: dict[str, int] = {}
        for key in forms:
            longest[key[0]] = max(longest.get(key[0], 0), len(key))
        latin = frozenset(t for key in forms for t in key if t.isascii() and t.isalpha())
        # Typos are corrected only towards meaningful words that are forms on
        # their own: "much" must not become "such", nor "signup" the "sighup"
        # of "send sighup".
        meaningful = {key[0] for key, cs in forms.items() if len(key) == 1 and key[0].isascii()
                      and key[0].isalpha() and any(kinds[c] != "stop" for c in cs)}
        typo: dict[str, list[str]] = {}
        for word in meaningful:
            if len(word) >= 4:  # shorter words have too many neighbours to guess safely
                for d in _deletes(word) | {word}:
                    typo.setdefault(d, []).append(word)
        codes = {t: chr(ENCODED_BASE + i) for i, t in
                 enumerate(sorted({t for key in forms for t in key if t[0] < "\x80"}))}
        encoded = {"".join(codes.get(t, t) for t in key): tuple("c:" + c for c in cs if kinds[c] != "stop")
                   for key, cs in forms.items()}
        return cls(kinds, {k: tuple(v) for k, v in forms.items()}, longest, tuple(sources),
                   {k: tuple(v) for k, v in typo.items()}, latin, codes, encoded,
                   digest.hexdigest()[:16])

    def knows(self, token: str) -> bool:
        """True if the token starts or occurs in some form (so it is not a typo)."""
        return token in self._latin

    def correct(self, token: str) -> str | None:
        """The one vocabulary word at edit distance 1 from an unknown English token, if unique.

        Four-letter words only get swapped letters fixed (pign -> ping): any
        other single edit turns too many real words into vocabulary words.
        """
        if len(token) < 4 or not token.isalpha():
            return None
        found = {w for d in _deletes(token) | {token} for w in self._typo.get(d, ())
                 if _one_edit(token, w) and (len(token) > 4 or sorted(token) == sorted(w))}
        return found.pop() if len(found) == 1 else None


def _parse(text: str, src: str, kinds: dict[str, str]) -> list[tuple[str, str, str]]:
    out: list[tuple[str, str, str]] = []
    for no, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip("\r\n")
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        parts = line.split("\t")
        if len(parts) != 3:
            raise VocabularyError(f"{src}:{no}: expected concept<TAB>kind<TAB>forms, got {len(parts)} fields")
        concept, kind, forms = (p.strip() for p in parts)
        if not concept:
            raise VocabularyError(f"{src}:{no}: empty concept")
        known = kinds.get(concept)
        if not kind:
            if known is None:
                raise VocabularyError(f"{src}:{no}: new concept {concept!r} needs a kind ({', '.join(KINDS)})")
            kind = known
        if kind not in KINDS:
            raise VocabularyError(f"{src}:{no}: unknown kind {kind!r} (expected one of {', '.join(KINDS)})")
        if known is not None and known != kind:
            raise VocabularyError(f"{src}:{no}: concept {concept!r} is {known!r} elsewhere, not {kind!r}")
        kinds[concept] = kind
        for form in forms.split("|"):
            form = normalize(form).strip()
            if form:
                out.append((concept, kind, form))
    return out


def load_vocabulary(extra_paths: Sequence[str] = ()) -> Vocabulary:
    """The packaged ops vocabulary plus the user's files, in order.

    Raises VocabularyError for a malformed or unreadable file.
    """
    kinds: dict[str, str] = {}
    entries = _parse(resources.files("agent").joinpath("vocabularies", DEFAULT_FILE).read_text("utf-8"),
                     DEFAULT_FILE, kinds)
    for path in extra_paths:
        try:
            with open(path, encoding="utf-8-sig") as fh:
                text = fh.read()
        except OSError as exc:
            raise VocabularyError(f"{path}: cannot read ({exc.strerror})") from None
        except UnicodeDecodeError:
            raise VocabularyError(f"{path}: not UTF-8 text") from None
        entries += _parse(text, path, kinds)
    return Vocabulary.from_entries(entries, (DEFAULT_FILE, *extra_paths))


_default: Vocabulary | None = None


def default_vocabulary() -> Vocabulary:
    """The packaged vocabulary, loaded once per process (it is immutable)."""
    global _default
    if _default is None:
        _default = load_vocabulary()
    return _default
