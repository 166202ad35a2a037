"""An optional vocabulary: concepts with their surface forms, joined on top of the words.

Matching works from the tools' own texts and general language knowledge
(:mod:`bitong.agent.matching.analysis`); a vocabulary only adds product knowledge, that
查看 / 瞧瞧 / show or 重启 / 拉起来 / restart name the same thing. The packaged
one (``agent/vocabularies/ops.tsv``) is about servers and repositories; a
user's files extend it, and ``--no-vocabulary`` runs without any. A concept
is a term *added* to the words it was found in, never a replacement, so it
can join synonyms but not merge two things the words tell apart.

File format (UTF-8; blank lines and ``#`` lines skipped)::

    concept<TAB>kind<TAB>form | form | form ...

``kind`` is ``obj``, ``op``, ``act``, ``look``, ``mod`` (a concept term) or
``stop`` (forms that are filler in this domain). An extension file may leave
``kind`` empty for a known concept, which then gains forms. Errors raise
:class:`VocabularyError` naming file and line.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterator, Sequence
from importlib import resources

from bitong.agent.matching import _backend
from bitong.agent.matching.analysis import normalize, stem

_stem = _backend.active.stem   # a request's words, by the twin that analyses them (the same stems)

__all__ = ["KINDS", "Vocabulary", "VocabularyError", "default_vocabulary", "load_vocabulary"]

KINDS = ("obj", "op", "act", "look", "mod", "stop")
DEFAULT_FILE = "ops.tsv"
_MAX_CJK = 8     # longest Chinese form looked up
_MAX_WORDS = 4   # longest English form, in words


_CJK_RUN = re.compile("[\u3400-\u9fff\uf900-\ufaff]+")
_LATIN = re.compile("[a-z0-9]+", re.I)


class VocabularyError(ValueError):
    """A vocabulary file that cannot be read; the message names file and line."""


def _is_cjk(ch: str) -> bool:
    return "\u3400" <= ch <= "\u9fff" or "\uf900" <= ch <= "\ufaff"


class Vocabulary:
    """Forms to concepts; immutable. ``concepts(text)`` is what the analysis calls."""

    __slots__ = ("kinds", "sources", "fingerprint", "_cjk", "_latin", "_first", "_prefixes", "_latin_first")

    def __init__(self, entries: Sequence[tuple[str, str, str]], sources: Sequence[str]) -> None:
        self.kinds: dict[str, str] = {}
        self.sources = tuple(sources)
        self._cjk: dict[str, set[str]] = {}
        self._latin: dict[tuple[str, ...], set[str]] = {}
        digest = hashlib.sha256()
        for concept, kind, form in entries:
            digest.update(f"{concept}\t{kind}\t{form}\n".encode())
            self.kinds[concept] = kind
            if kind == "stop":
                continue
            if all(_is_cjk(ch) for ch in form):
                self._cjk.setdefault(form, set()).add(concept)
            else:
                words = tuple(stem(w) for w in _latin_words(form))
                if words and len(words) <= _MAX_WORDS:
                    self._latin.setdefault(words, set()).add(concept)
                elif not words:
                    continue
        self.fingerprint = digest.hexdigest()[:16]
        # the longest form starting with each character: most characters start none
        self._first: dict[str, int] = {}
        for form in self._cjk:
            self._first[form[0]] = max(self._first.get(form[0], 0), len(form))
        # every beginning of a Chinese form: a stretch that begins none grows into none
        self._prefixes = frozenset(form[:k] for form in self._cjk for k in range(1, len(form) + 1))
        # the most words of an English form starting with each word: most words start none
        self._latin_first: dict[str, int] = {}
        for words in self._latin:
            self._latin_first[words[0]] = max(self._latin_first.get(words[0], 0), len(words))

    def __len__(self) -> int:
        return len(self.kinds)

    def concepts(self, text: str) -> Iterator[str]:
        """Every concept one of whose forms occurs in ``text`` (already normalized)."""
        return iter(self.find(text)[0])

    def find(self, text: str) -> tuple[list[str], set[int]]:
        """The concepts in ``text`` (normalized), and the positions its Chinese forms of 2+ characters cover.

        A covered stretch is understood through its concept, so the analysis
        does not also count its characters as words no tool has.
        """
        seen: set[str] = set()
        covered: set[int] = set()
        cjk = self._cjk
        first = self._first
        prefixes = self._prefixes
        for m in _CJK_RUN.finditer(text):
            s, start = m.group(), m.start()
            for i in range(len(s)):
                longest = first.get(s[i])
                if longest is None:
                    continue
                for j in range(i + 1, min(len(s), i + longest) + 1):
                    piece = s[i:j]
                    if piece not in prefixes:
                        break
                    hit = cjk.get(piece)
                    if hit:
                        seen.update(hit)
                        if j - i >= 2:
                            covered.update(range(start + i, start + j))
        words = [_stem(w) for w in _latin_words(text)]
        latin = self._latin
        latin_first = self._latin_first
        for i in range(len(words)):
            longest = latin_first.get(words[i])
            if longest is None:
                continue
            for j in range(i + 1, min(len(words), i + longest) + 1):
                hit = latin.get(tuple(words[i:j]))
                if hit:
                    seen.update(hit)
        return sorted(seen), covered


def _latin_words(text: str) -> list[str]:
    return _LATIN.findall(text)


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


def load_vocabulary(extra_paths: Sequence[str] = (), *, packaged: bool = True) -> Vocabulary:
    """The packaged ops vocabulary (unless ``packaged=False``) plus the user's files, in order.

    Raises VocabularyError for a malformed or unreadable file.
    """
    kinds: dict[str, str] = {}
    entries: list[tuple[str, str, str]] = []
    sources: list[str] = []
    if packaged:
        text = resources.files("bitong.agent.matching").joinpath("vocabularies", DEFAULT_FILE).read_text("utf-8")
        entries += _parse(text, DEFAULT_FILE, kinds)
        sources.append(DEFAULT_FILE)
    for path in extra_paths:
        try:
            with open(path, encoding="utf-8-sig") as fh:
                text = fh.read()
        except OSError as exc:
            raise VocabularyError(f"{path}: cannot read ({exc.strerror})") from None
        except UnicodeDecodeError:
            raise VocabularyError(f"{path}: not UTF-8 text") from None
        entries += _parse(text, path, kinds)
        sources.append(path)
    return Vocabulary(entries, sources)


_default: Vocabulary | None = None


def default_vocabulary() -> Vocabulary:
    """The packaged vocabulary, loaded once per process (it is immutable)."""
    global _default
    if _default is None:
        _default = load_vocabulary()
    return _default
