"""Text to matching terms: normalisation, parameter spotting, segmentation.

Both sides of a match go through here, a tool's texts when the index is built
and the caller's intent on every Match, so the two always agree on what a word
is. Segmentation is a longest match against the vocabulary over one token
stream (English words and single CJK characters), so mixed phrases such as
``a 记录`` or ``tar 包`` match as one; what the vocabulary does not know falls
back to English words and CJK character bigrams. This is faster to load and to
run than a general word segmenter and measured better on ops phrasings (see
benchmarks/bench_match.py).
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Container
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from agent.vocabulary import Vocabulary

__all__ = ["Analyzer", "Term", "normalize", "stem", "tokens"]

# Query weight of a term, by where it came from. Concepts that name a thing
# or an operation decide a match; looking verbs ("show", 查看) are shared by
# most tools; unknown words and bigrams are evidence, but weak, and they also
# stand for the part of a request that no tool explains.
KIND_WEIGHT = {"obj": 1.0, "op": 1.0, "mod": 0.5, "look": 0.3}
WORD_WEIGHT = 0.4     # an English word the vocabulary does not know
BIGRAM_WEIGHT = 0.3   # two CJK characters the vocabulary does not know
UNIGRAM_WEIGHT = 0.15  # a lone unknown CJK character: never matches, only dilutes
PATH_WORD_WEIGHT = 0.25 # a known word inside a path (/var/log, /data/orders)
EXTENSION_WEIGHT = 0.5  # a file extension says what kind of file (.log, .csv)

# Parameters spotted in a request become slot terms ("p:url") so that
# a value counts once, lightly, instead of as a pile of unknown words.
SLOT_WEIGHT = {
    "p:url": 0.6, "p:host": 0.5, "p:port": 0.5, "p:version": 0.5, "p:duration": 0.5,
    "p:time": 0.4, "p:path": 0.35, "p:repo": 0.4, "p:cmdline": 0.5, "p:text": 0.2,
    "p:number": 0.15,
}

_TOKEN = re.compile(r"[a-z0-9]+|[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]")

# Short words whose final "s" is not a plural; stripping it would merge
# https into http or dns into "dn".
_NO_STEM = frozenset({
    "https", "dns", "ssl", "tls", "xls", "xlsx", "aws", "ops", "status", "always", "alias",
    "ubuntu", "centos", "redis", "kubernetes", "ps", "analysis", "this", "its", "is",
    "was", "has", "does", "yes", "less", "process", "access", "address", "success", "class",
})


def normalize(text: str) -> str:
    """Fold full-width forms to half-width (NFKC) and case, so ＤＦ, Df and df agree."""
    return unicodedata.normalize("NFKC", text).lower()


def stem(word: str) -> str:
    """Fold an English word's plural and -ing/-ed forms so both sides compare equal.

    Not a linguistic stemmer: it only has to map a word and its usual variants
    to one key, and it is applied to the vocabulary and the text alike.
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


def tokens(text: str) -> list[tuple[str, int, int]]:
    """(token, start, end) over normalised text; English tokens are stemmed."""
    out = []
    for m in _TOKEN.finditer(text):
        t = m.group()
        out.append((stem(t) if t[0] < "\x80" else t, m.start(), m.end()))
    return out


# ---------------------------------------------------------------- parameters

_NUM_ZH = "零一二两三四五六七八九十百千半几"
_FILE_EXT = (r"log|txt|csv|tsv|json|ya?ml|conf|cfg|ini|xml|zip|gz|tgz|tar|bz2|xz|7z|rar|xlsx?|jar|war"
             r"|sql|sh|py|md|hdlp|pem|crt|key|toml|env|bak|iso|deb|rpm|html?|js|ts|go|rs|java|pdf|db")
# Order matters: payload first (its words are the user's content, not the
# request), then the most specific shapes. Each match is blanked out of the text.
_PARAMS = re.compile(
    r"""(?P<quoted>"[^"]*"|“[^”]*”|「[^」]*」|『[^』]*』|(?<![a-z0-9])'[^']+')"""
    r"|(?P<json>\{[^{}]*\}|\[[^\[\]]*\])"
    r"|(?P<url>\b(?:https?|ftp|wss?)://[^\s，。、；]+)"
    r"|(?P<email>\b[\w.+-]+@[\w-]+(?:\.[\w-]+)+)"
    r"|(?P<ip>\b\d{1,3}(?:\.\d{1,3}){3}(?::(?P<ipport>\d{1,5}))?\b)"
    r"|(?P<abspath>(?<![\w/])(?:~|\.{1,2})?/(?=[\w.@%+~-]*[a-z])[\w.@%+~-]+(?:/[\w.@%+~-]*)*)"
    r"|(?P<relpath>\b[\w.-]+(?:/[\w.-]+){2,}|\b[\w.-]+/[\w.-]+\.(?:" + _FILE_EXT + r")\b)"
    r"|(?P<repo>\b[a-z0-9][\w.-]*/[a-z0-9][\w.-]*)"
    r"|(?P<filename>\b[\w-]+(?:\.[\w-]+)*\.(?:" + _FILE_EXT + r")\b)"
    r"|(?P<version>\bv?\d+\.\d+(?:\.\d+)+(?:-[\w.]+)?\b|\bv\d+\b)"
    r"|(?P<domain>\b(?:[a-z0-9-]+\.)+[a-z]{2,}\b)"
    r"|(?P<kv>\b[\w.-]+=[^\s,，；;]+)"
    r"|(?P<flag>(?<!\S)--?[a-z][\w-]*)"
    r"|(?P<duration>(?:\d+|[" + _NUM_ZH + r"]+)\s*(?:个)?\s*(?:秒钟?|分钟|小时|钟头|天|日|周|星期|礼拜|个?月|年)"
    r"(?:后|之后|以后|以内|前|以前|内)?"
    r"|\b\d+\s*(?:s|secs?|seconds?|m|mins?|minutes?|h|hrs?|hours?|d|days?|w|weeks?|months?)\b)"
    r"|(?P<clock>\b\d{1,2}(?::\d{2})+\b|\b\d{1,2}\s*(?:am|pm)\b|\d{1,2}\s*点(?:\d+分?|半)?)"
    r"|(?P<hashnum>#\d+)"
    r"|(?P<number>(?<![a-z0-9_.])\d+(?:\.\d+)?(?![a-z0-9_]))",
    re.ASCII,  # \w and \b are ASCII: a path ends where Chinese text starts
)
_SLOT = {"quoted": "p:text", "json": "p:text", "url": "p:url", "email": "p:text", "ip": "p:host",
         "abspath": "p:path", "relpath": "p:path", "repo": "p:repo", "filename": "p:path",
         "version": "p:version", "domain": "p:host", "kv": "p:text", "flag": "p:cmdline",
         "duration": "p:duration", "clock": "p:time", "hashnum": "p:number", "number": "p:number"}
# Text after a colon is usually the payload ("发条消息：今晚停机", "翻成中文: ...");
# a colon inside a URL, a time or a host:port is not.
_PAYLOAD_COLON = re.compile(r"[:：](?!//)(?!\d)\s*(?=\S)")
# A word right before the noun it names is a value, not a verb: "deploy 用户",
# "the backup user", "users 表" (a table called users).
_ENTITY_ZH = "用户|账号|账户|表|库|容器|服务|分支|仓库|进程|镜像|主机|机器|群|频道|任务|目录|文件"
_ENTITY_EN = r"users?|accounts?|tables?|databases?|containers?|services?|branch(?:es)?|repos?|hosts?|jobs?|channels?"
_NAMED = re.compile(
    r"\b[a-z_][a-z0-9_-]*(?=\s*(?:" + _ENTITY_ZH + r"))"
    r"|(?<=\b(?:the|for|our) )[a-z_][a-z0-9_-]*(?= (?:" + _ENTITY_EN + r")\b)",
    re.ASCII,
)


@dataclass(frozen=True, slots=True)
class Term:
    """One matching term: ``c:`` concept, ``w:`` word, ``b:``/``u:`` CJK, ``p:`` slot."""

    feature: str
    surface: str
    weight: float


class Analyzer:
    """Turns text into terms with one vocabulary; cheap to create, safe to share."""

    def __init__(self, vocabulary: "Vocabulary") -> None:
        self.vocabulary = vocabulary
        self._forms = vocabulary.forms
        self._longest = vocabulary.longest
        self._kinds = vocabulary.kinds

    def query(self, text: str, known_words: Container[str] = ()) -> list[Term]:
        """Terms of a request: parameters become slots, the rest is segmented.

        ``known_words`` are English words the registry uses; they are never
        "corrected" to a vocabulary word.
        """
        t = normalize(text)
        out: list[Term] = []
        colon = _PAYLOAD_COLON.search(t)
        if colon and colon.start() > 0 and not t[: colon.start()].rstrip().endswith(("http", "https")):
            out.append(Term("p:text", t[colon.end():].strip(), SLOT_WEIGHT["p:text"]))
            t = t[: colon.start()]
        t = _NAMED.sub(self._drop_name, t)
        if "`" in t:  # `uptime`: a command line; its words still say what it does
            out.extend(Term("p:cmdline", c, SLOT_WEIGHT["p:cmdline"]) for c in re.findall(r"`([^`]+)`", t))
        pieces: list[str] = []
        last = 0
        has_host = has_number = False
        for m in _PARAMS.finditer(t):
            kind = m.lastgroup or "number"  # the outer group: "ip", never "ipport"
            slot = _SLOT[kind]
            value = m.group()
            pieces.append(t[last:m.start()])
            pieces.append(" ")
            last = m.end()
            out.append(Term(slot, value, SLOT_WEIGHT[slot]))
            if slot == "p:host":
                has_host = True
                if m.group("ipport"):
                    out.append(Term("p:port", m.group("ipport"), SLOT_WEIGHT["p:port"]))
            elif kind == "number" and value.isdigit() and 0 < int(value) < 65536:
                has_number = True
            if slot == "p:path":
                out.extend(self._path_terms(value))
        pieces.append(t[last:])
        if has_host and has_number:
            # A host and a bare number next to it: almost always a port ("10.0.0.5 的 8080").
            out.append(Term("p:port", "", SLOT_WEIGHT["p:port"]))
        out.extend(self._segment("".join(pieces), known_words, correct=True))
        return out

    def text(self, text: str) -> list[Term]:
        """Terms of a tool's own text (no parameter spotting, no typo correction)."""
        return self._segment(normalize(text), (), correct=False)

    def concepts(self, text: str) -> list[str]:
        """Concept ids in ``text`` (for slots and capabilities)."""
        return [t.feature[2:] for t in self.text(text) if t.feature.startswith("c:")]

    def _drop_name(self, m: re.Match[str]) -> str:
        """Blank a name that the vocabulary would read as a verb (deploy, backup ...)."""
        word = m.group()
        if re.match(r"\s*(?:表|库|tables?\b|databases?\b)", m.string[m.end():]):
            return " "  # "users 表", "orders 库": a table or database named so
        concepts = self._forms.get((stem(word),), ())
        if any(self._kinds[c] in ("op", "look") for c in concepts):
            return " "
        return word

    def _path_terms(self, path: str) -> list[Term]:
        """What a path says about its file: a file, of the kind its extension
        names, and the things named along the way (/var/log, /data/orders)."""
        kinds = self._kinds
        out: list[Term] = []
        base = path.rstrip("/").rsplit("/", 1)[-1]
        if "." in base.strip("."):
            out.append(Term("c:file", path, EXTENSION_WEIGHT))
            ext = base.strip(".").split(".", 1)[1]
            out += [Term(t.feature, path, EXTENSION_WEIGHT) for t in self._segment(ext.replace(".", " "), (), False)
                    if t.feature.startswith("c:") and kinds[t.feature[2:]] == "obj"]
        words = " ".join(re.split(r"[/._-]+", path))
        # Only things, not verbs: /opt/release is not a request to release.
        out += [Term(t.feature, path, PATH_WORD_WEIGHT) for t in self._segment(words, (), False)
                if t.feature.startswith("c:") and kinds[t.feature[2:]] == "obj"]
        return out

    def _segment(self, text: str, known_words: Container[str], correct: bool) -> list[Term]:
        toks = tokens(text)
        if correct:
            vocab = self.vocabulary
            for i, (tok, s, e) in enumerate(toks):
                if tok[0] < "\x80" and tok not in self._longest and not vocab.knows(tok) \
                        and tok not in known_words:
                    fixed = vocab.correct(tok)
                    if fixed:
                        toks[i] = (fixed, s, e)
        forms, longest, kinds = self._forms, self._longest, self._kinds
        out: list[Term] = []
        run: list[tuple[str, int, int]] = []  # unknown CJK characters, adjacent
        n = len(toks)
        i = 0
        while i < n:
            tok, start, end = toks[i]
            size = min(longest.get(tok, 0), n - i)
            while size:
                concepts = forms.get(tuple(t for t, _, _ in toks[i:i + size]))
                if concepts is not None:
                    break
                size -= 1
            if size:
                self._flush(run, text, out)
                run = []
                surface = text[start:toks[i + size - 1][2]]
                for c in concepts:
                    kind = kinds[c]
                    if kind != "stop":
                        out.append(Term("c:" + c, surface, KIND_WEIGHT[kind]))
                i += size
                continue
            if tok[0] < "\x80":
                self._flush(run, text, out)
                run = []
                if not tok.isdigit():
                    out.append(Term("w:" + tok, text[start:end], WORD_WEIGHT))
            else:
                if run and run[-1][2] != start:
                    self._flush(run, text, out)
                    run = []
                run.append(toks[i])
            i += 1
        self._flush(run, text, out)
        return out

    @staticmethod
    def _flush(run: list[tuple[str, int, int]], text: str, out: list[Term]) -> None:
        if len(run) == 1:
            out.append(Term("u:" + run[0][0], run[0][0], UNIGRAM_WEIGHT))
        for a, b in zip(run, run[1:]):
            out.append(Term("b:" + a[0] + b[0], a[0] + b[0], BIGRAM_WEIGHT))
