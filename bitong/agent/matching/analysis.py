"""Text to weighted terms, the same way for a tool's texts and a caller's request.

General language knowledge only, no list tuned to a corpus:

* English: words of letters and digits, case, plurals and -ing/-ed folded
  (``w:``); pure numbers are parameters, not words, and are dropped; a
  short list of function words is dropped.
* Chinese: each run of CJK characters gives its words, as a general
  dictionary segmenter cuts them (rjieba, ``z:``), its character bigrams
  (``b:``, recall when the segmenter and the author disagree) and its
  characters (``u:``, weak recall for paraphrases such as 拼成 / 拼接);
  particles and pronouns are dropped.
* Pinyin: each character bigram also stands as its toneless pinyin
  (``y:``), so a phone's homophone typo (退宽 for 退款) still meets the
  word it meant.
* Concepts of an optional vocabulary (``c:``) are added on top, never
  instead of the words, so a vocabulary can join synonyms but cannot
  merge two things the words tell apart.

A term's weight says how much it counts in a request (see ``QUERY_WEIGHT``).
"""

from __future__ import annotations

import json
import os
import re
import unicodedata
from collections.abc import Callable
from importlib import util as importlib_util

__all__ = ["QUERY_WEIGHT", "Terms", "normalize", "pinyin_of", "rough_terms", "stem", "terms"]

Terms = dict[str, float]

# How much one term of a request counts, by kind: words decide, bigrams and
# pinyin support them, single characters and concepts only help recall.
QUERY_WEIGHT = {"w": 1.0, "z": 1.0, "b": 0.5, "y": 0.3, "u": 0.2, "c": 0.6}

_CJK = "\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff"
_RUN = re.compile(rf"[a-z0-9]+|[{_CJK}]+")
_IS_CJK = re.compile(rf"[{_CJK}]")

# Function words of English: articles, pronouns, auxiliaries, prepositions,
# politeness. They carry no tool's meaning in any domain.
_EN_STOP = frozenset("""
a an the this that these those it its i me my mine we us our you your he him his she her they them their
is are was were be been being am do does did done have has had can could would should will shall may might must
of in on at to for from with by about into onto over under as than then so if or and but nor not no yes
what which who whom whose where when why how there here now just also too very really please pls kindly
hey hi hello thanks thank ok okay let lets want wanna need some any all each every much many more most
s t d ll re ve m
""".split())
# Chinese particles, pronouns and request filler, as characters and words.
_ZH_STOP_CHARS = frozenset("的了吗呢吧啊呀么嘛哦哈呗啦嗯着过我你您他她它们这那个是在和与及或就都也还要想请帮给把被让将从对能会该些啥哪么")
_ZH_STOP_WORDS = frozenset("""
一下 一个 一些 什么 怎么 怎样 如何 可以 能不能 能否 是否 是不是 有没有 帮忙 麻烦 我们 你们 他们 这个 那个 这些 那些
哪些 哪个 现在 已经 还是 或者 然后 而且 但是 因为 所以 如果 的话 时候 东西 一点 一点儿 这里 那里 这边 那边 咱们
请问 帮我 给我 一共 马上 赶紧 顺便 看看 一样 这样 那样 需要 想要 能够 应该 好的 谢谢 你好
""".split())

# Short words whose final "s" is not a plural: stripping it would merge them.
_NO_STEM = frozenset({"https", "dns", "ssl", "tls", "xls", "aws", "ops", "status", "always", "alias", "redis",
                      "kubernetes", "analysis", "this", "its", "is", "was", "has", "does", "yes", "less",
                      "process", "access", "address", "success", "class", "news", "gas", "bus", "plus",
                      "canvas", "series", "species", "bias", "atlas", "thesis", "basis", "axis", "virus"})


def normalize(text: str) -> str:
    """Fold full-width forms to half-width (NFKC) and case, so ＰＤＦ, Pdf and pdf agree."""
    return unicodedata.normalize("NFKC", text).lower()


def stem(word: str) -> str:
    """Fold an English word's plural and -ing/-ed forms so both sides compare equal.

    Not a linguistic stemmer: it maps a word and its usual variants to one
    key, and it is applied to tools and requests alike.
    """
    w = word
    if len(w) <= 3 or not w.isalpha() or w in _NO_STEM:
        return w
    for suffix in ("ing", "ed"):
        if w.endswith(suffix) and len(w) - len(suffix) >= 3:
            w = w[: -len(suffix)]
            if len(w) >= 3 and w[-1] == w[-2] and w[-1] not in "lsz":
                w = w[:-1]  # running -> run, stopped -> stop
            break
    else:
        if w.endswith("ies") and len(w) > 4:
            w = w[:-3] + "y"
        elif w.endswith(("sses", "ches", "shes", "xes", "zes")):
            w = w[:-2]
        elif w.endswith("s") and not w.endswith(("ss", "us", "is")):
            w = w[:-1]
    if len(w) > 3 and w.endswith("e"):
        w = w[:-1]  # change / changed / changes share "chang"
    return w


# ---------------------------------------------------------------- pinyin

_TONELESS = str.maketrans("āáǎàēéěèīíǐìōóǒòūúǔùǖǘǚǜüńňǹḿ", "aaaaeeeeiiiioooouuuuvvvvvnnnm")
_pinyin: dict[str, str] | None = None


def _load_pinyin() -> dict[str, str]:
    """Character -> toneless first reading, from pypinyin's table (its JSON, without importing the package)."""
    table: dict[str, str] = {}
    spec = importlib_util.find_spec("pypinyin")
    folders = list(spec.submodule_search_locations or []) if spec is not None else []
    for folder in folders:
        try:
            with open(os.path.join(folder, "pinyin_dict.json"), encoding="utf-8") as fh:
                raw = json.load(fh)
        except (OSError, ValueError):
            continue
        for code, readings in raw.items():
            table[chr(int(code))] = readings.split(",", 1)[0].translate(_TONELESS)
        break
    return table


def pinyin_of(char: str) -> str:
    """The toneless pinyin of one character ('' if unknown, or without pypinyin installed)."""
    global _pinyin
    if _pinyin is None:
        _pinyin = _load_pinyin()
    return _pinyin.get(char, "")


# ---------------------------------------------------------------- segmentation

_cut: Callable[[str], list[str]] | None = None


def _segmenter() -> Callable[[str], list[str]]:
    """rjieba's cut when installed (a general dictionary), else no words: bigrams carry Chinese alone."""
    global _cut
    if _cut is None:
        try:
            import rjieba
            _cut = rjieba.cut
        except ImportError:  # pragma: no cover - rjieba is a dependency; kept for a stripped install
            _cut = lambda run: []  # noqa: E731
    return _cut


def _add(out: Terms, term: str, weight: float) -> None:
    if out.get(term, 0.0) < weight:
        out[term] = weight


# Values a request carries for a tool's parameters. They become one light
# slot term each ("p:path"), and their words count little, so that a host
# named forgejo.example.org does not make the request about Forgejo.
# Each pattern starts only where a run of its characters starts (the
# lookbehinds) and never backtracks (possessive quantifiers): linear in the text.
_URL = re.compile(r"(?<![a-z0-9+.-])[a-z][a-z0-9+.-]*+://[^\s\"'<>，。；、）)]++")
_EMAIL = re.compile(r"(?<![a-z0-9._%+-])[a-z0-9._%+-]++@[a-z0-9-]++(?:\.[a-z0-9-]++)++")
_PATH = re.compile(r"(?<![\w.])(?:~|\.{1,2})?(?:/[\w.@%+=:,-]++)++/?")
_IP = re.compile(r"(?<![\w.])\d{1,3}(?:\.\d{1,3}){3}(?::\d+)?(?![\w.])")
_DOTTED = re.compile(r"(?<![\w/.-])[a-z0-9][a-z0-9_-]*+(?:\.[a-z0-9_-]++)++(?![\w/-])")
_VERSION = re.compile(r"(?<![\w.])v?\d++(?:\.\d++)++(?:[-+][\w.]++)?(?![\w.])")
_CODE = re.compile(r"`[^`\n]{1,500}`")  # a command line or code, spelled out
_QUOTED = re.compile(r"\"([^\"]{1,200})\"|“([^”]{1,200})”|「([^」]{1,200})」|'([^'\s][^']{0,199})'")
# Top-level domains: a dotted name ending in one is a host, otherwise a file name.
_TLDS = frozenset("com org net io cn dev app local internal lan cloud co uk de jp ru fr top xyz info biz gov edu "
                  "mil int me tv cc ai site online tech store example test localhost svc cluster corp home arpa".split())
VALUE_WEIGHT = 0.15   # a word inside a value (a path's folder, a file's stem)
SLOT_WEIGHT = 0.6     # the slot term itself: a request that hands a path wants a tool that takes one


def _values(t: str, out: Terms) -> str:
    """Replace parameter values in normalized text with spaces, adding their slot terms to ``out``."""
    def blank(m: re.Match[str]) -> str:
        return " " * (m.end() - m.start())

    def slot(name: str) -> Callable[[re.Match[str]], str]:
        def sub(m: re.Match[str]) -> str:
            _add(out, "p:" + name, SLOT_WEIGHT)
            return blank(m)
        return sub

    def path(m: re.Match[str]) -> str:
        _add(out, "p:path", SLOT_WEIGHT)
        value = m.group().rstrip("/")
        base = value.rsplit("/", 1)[-1]
        for part in value.split("/")[:-1]:
            for w in _RUN.findall(part):
                if not w.isdigit() and w not in _EN_STOP:
                    _add(out, "w:" + stem(w), VALUE_WEIGHT)
        _file(base, out)
        return blank(m)

    def dotted(m: re.Match[str]) -> str:
        value = m.group()
        last = value.rsplit(".", 1)[-1]
        if last in _TLDS or last.isdigit():
            _add(out, "p:host", SLOT_WEIGHT)
        else:
            _file(value, out)
        return blank(m)

    def quoted(m: re.Match[str]) -> str:
        _add(out, "p:text", SLOT_WEIGHT)
        return m.group()  # quoted words still count (they often name the thing), at their own weight

    t = _CODE.sub(slot("cmdline"), t)
    t = _URL.sub(slot("url"), t)
    t = _EMAIL.sub(slot("email"), t)
    t = _IP.sub(slot("host"), t)
    t = _PATH.sub(path, t)
    t = _VERSION.sub(slot("version"), t)
    t = _DOTTED.sub(dotted, t)
    _QUOTED.sub(quoted, t)
    return t


def _file(name: str, out: Terms) -> None:
    """A file name: its extension says what kind of file (a word); its stem is a value."""
    _add(out, "p:file", SLOT_WEIGHT)
    stem_part, dot, ext = name.rpartition(".")
    if dot and ext.isalnum() and not ext.isdigit():
        _add(out, "w:" + ext, 0.6)
    for w in _RUN.findall(stem_part if dot else name):
        if not w.isdigit() and w not in _EN_STOP:
            _add(out, "w:" + stem(w), VALUE_WEIGHT)


def terms(text: str, concepts: Callable[[str], tuple[list[str], set[int]]] | None = None) -> Terms:
    """The weighted terms of one text (a request, or one field of a tool).

    ``concepts`` (an optional vocabulary's ``find``) maps the normalized text
    to concept ids, each adding a ``c:`` term, and to the positions its
    Chinese forms cover, whose bigrams and characters are then left out.
    """
    out: Terms = {}
    t = _values(normalize(text), out)
    qw = QUERY_WEIGHT
    covered: set[int] = set()
    if concepts is not None:
        found, covered = concepts(t)
        for concept in found:
            _add(out, "c:" + concept, qw["c"])
    for m in _RUN.finditer(t):
        run = m.group()
        if not _IS_CJK.match(run):
            if run.isdigit() or run in _EN_STOP:
                continue
            _add(out, "w:" + stem(run), qw["w"])
            continue
        for word in _segmenter()(run):
            if len(word) > 1 and word not in _ZH_STOP_WORDS:
                _add(out, "z:" + word, qw["z"])
        n = len(run)
        at = m.start()
        for i in range(n):
            c = run[i]
            inside = at + i in covered
            if c not in _ZH_STOP_CHARS and not inside:
                _add(out, "u:" + c, qw["u"])
            if i + 1 < n:
                d = run[i + 1]
                if inside and at + i + 1 in covered:
                    continue  # within a vocabulary form: its concept stands for it
                if c in _ZH_STOP_CHARS or d in _ZH_STOP_CHARS:
                    continue  # 写的, 上吗: a particle glued to a word says nothing
                _add(out, "b:" + c + d, qw["b"])
                pc, pd = pinyin_of(c), pinyin_of(d)
                if pc and pd:
                    _add(out, "y:" + pc + " " + pd, qw["y"])
    return out


def rough_terms(text: str) -> Terms:
    """A text's English words and Chinese character bigrams, as :func:`terms` weighs them, and nothing else.

    No segmenter, pinyin, parameter values or concepts: many times cheaper,
    so a cold start of 10,000 tools indexes these first, serves on them,
    and has :func:`terms` replace them in the background.
    """
    out: Terms = {}
    qw = QUERY_WEIGHT
    for m in _RUN.finditer(normalize(text)):
        run = m.group()
        if not _IS_CJK.match(run):
            if run.isdigit() or run in _EN_STOP:
                continue
            _add(out, "w:" + stem(run), qw["w"])
            continue
        for i in range(len(run) - 1):
            c = run[i]
            d = run[i + 1]
            if c in _ZH_STOP_CHARS or d in _ZH_STOP_CHARS:
                continue
            _add(out, "b:" + c + d, qw["b"])
    return out
