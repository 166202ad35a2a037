"""Text to matching terms: normalisation, parameter spotting, segmentation.

Both sides of a match go through here, a tool's texts when the index is built
and the caller's intent on every Match, so the two always agree on what a word
is. Segmentation is a longest match against the vocabulary over one token
stream (English words and single CJK characters), so mixed phrases such as
``a 记录`` or ``tar 包`` match as one; what the vocabulary does not know falls
back to English words and CJK character bigrams. This is faster to load and to
run than a general word segmenter and measured better on ops phrasings (see
benchmarks/bench_match.py).

Speed: the token stream is one string with one character per token (English
tokens of the vocabulary are encoded as private-use characters), so the
longest match is slicing and dict probes; a tool's ten-odd texts go through
in one pass (:meth:`Analyzer.features_many`), because for texts this short
the cost is mostly per call.

A request also keeps where each term stands (offset and clause), so the
matcher can pair an operation with its object; parameters (paths, URLs,
hosts, names such as ``redis-server``), a command line, and the payload of a
message or reminder become slots instead of words.
"""

from __future__ import annotations

import bisect
import re
import unicodedata
from collections.abc import Container
from typing import TYPE_CHECKING, NamedTuple

if TYPE_CHECKING:
    from agent.vocabulary import Vocabulary

__all__ = ["Analyzer", "Term", "normalize", "stem", "tokens"]

# Query weight of a term, by where it came from. Concepts that name a thing
# or an operation decide a match; looking verbs ("show", 查看) are shared by
# most tools; unknown words and bigrams are evidence, but weak, and they also
# stand for the part of a request that no tool explains.
KIND_WEIGHT = {"obj": 1.0, "op": 1.0, "act": 1.0, "mod": 0.5, "look": 0.3}
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
# Tokens for the segmenter: English words, whole CJK runs, and the separator
# that Analyzer.features_many puts between texts.
_SEP = "\x01"
_SEP_FOUND = ("|",)
_PART = re.compile(r"[a-z0-9]+|[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]+|\x01")
_ENCODED = "\U000f0000"  # vocabulary.ENCODED_BASE: English tokens of forms are encoded from here
_WORDS_MAX = 50_000  # English words an Analyzer remembers the stem of

# Short words whose final "s" is not a plural; stripping it would merge
# https into http or dns into "dn".
_NO_STEM = frozenset({
    "https", "dns", "ssl", "tls", "xls", "xlsx", "aws", "ops", "status", "always", "alias",
    "ubuntu", "centos", "redis", "kubernetes", "ps", "analysis", "this", "its", "is",
    "was", "has", "does", "yes", "less", "process", "access", "address", "success", "class",
    # states, not the verbs: "closed issues" are not a request to close
    "closed", "opened", "approved", "merged", "changed", "changes", "running",
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


# Characters whose NFKC form has the same tokens as themselves (ASCII, CJK
# ideographs, CJK and full-width punctuation): text made only of them needs no NFKC.
_NFKC_NEEDED = re.compile("[^\x00-\x7f\u2000-\u206f\u3000-\u3037\u303b-\u303f\u3400-\u4dbf\u4e00-\u9fff"
                          "\ufe30-\ufe6f\uff01-\uff0f\uff1a-\uff20\uff3b-\uff40\uff5b-\uff65]")


def _fold(text: str) -> str:
    """:func:`normalize` as far as tokens are concerned, skipping NFKC where it changes none."""
    if _NFKC_NEEDED.search(text) is None:
        return text.lower()
    return normalize(text)


def _start(term: "Term") -> int:
    return term.start


def _blank(m: re.Match[str]) -> str:
    return "\x00" * len(m.group())


def _payload_start(t: str) -> tuple[int, int] | None:
    """(where the request ends, where its payload starts), or None.

    A colon (not in a URL, a time or host:port) or a payload word ends the
    request part; the marker word itself stays in the request ("说一声" still
    asks to send, "提醒我" to remind).
    """
    best: tuple[int, int] | None = None
    # A colon or a payload word inside quotes is content already ("PATH=$PATH:/bin").
    if _QUOTE_CHARS.search(t):
        t = _QUOTED.sub(_blank, t)
    colon = _PAYLOAD_COLON.search(t)
    if colon and colon.start() > 0 and not t[: colon.start()].rstrip().endswith(("http", "https")):
        best = (colon.start(), colon.end())
    m = _PAYLOAD_WORD.search(t)
    if m and (best is None or m.start() < best[0]):
        best = (m.end(), m.end())
    return best


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
    r"|(?P<ident>\b[a-z][a-z0-9]*(?:_[a-z0-9]+)+\b)"  # DB_PASSWORD, max_connections: a name in code
    r"|(?P<name>\b[a-z0-9]+(?:-[a-z0-9]+)+\b)"          # redis-server, agent-api: a name (see _keep_name)
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
         "version": "p:version", "domain": "p:host", "kv": "p:text", "ident": "p:text", "name": "p:text",
         "flag": "p:cmdline",
         "duration": "p:duration", "clock": "p:time", "hashnum": "p:number", "number": "p:number"}
# Text after a colon is usually the payload ("发条消息：今晚停机", "翻成中文: ...");
# a colon inside a URL, a time or a host:port is not.
_PAYLOAD_COLON = re.compile(r"[:：](?!/)(?!\d)\s*(?=\S)")
_QUOTED = re.compile(r'"[^"]*"|“[^”]*”|「[^」]*」|『[^』]*』|`[^`]*`')
_QUOTE_CHARS = re.compile(r'["“「『`]')
# Words that introduce what a message, reminder or issue should say: "群里说一声
# 发布完了", "提醒我去看发布结果", "remind me in 5 minutes to check the backup",
# "notify the team that the deploy is done". What follows is the user's content.
_PAYLOAD_WORD = re.compile(
    r"(?<=[^\s听比据所虽要再来])(?:说|讲)(?![明法服说解究])(?:一声|一下|下)?(?=\s*\S)"
    r"|(?:提醒|叫|喊)(?:我|我们|大家|他|她)(?:一下|下)?(?:去|要|该)?(?=\s*\S)"
    r"|\b(?:remind|ping)\s+(?:me|us|him|her|them|everyone|the\s+\w+)\b[^.;!?]*?\bto\b(?=\s*\S)"
    r"|\b(?:notify|tell|inform|message|email|let)\b[^.;!?]*?\b(?:that|saying)\b(?=\s*\S)"
    r"|\b(?:saying|titled|with\s+(?:the\s+)?(?:title|subject|message|text|body))\b(?=\s*\S)"
    r"|(?:标题|内容|正文)(?:是|为|叫)(?=\s*\S)")
# A request that is itself a command line: a shell command word, then arguments
# that read like arguments (flags, paths, names), not like an English sentence.
_COMMAND_LINE = re.compile(
    r"^\s*(?:sudo\s+)?(?:apt(?:-get)?|yum|dnf|systemctl|journalctl|docker|kubectl|git|ls|ll|cat|head|tail"
    r"|grep|rg|find|df|du|ps|top|kill|pkill|free|uptime|uname|ping|dig|nslookup|curl|wget|tar|unzip|chmod"
    r"|chown|rm|mv|cp|mkdir|crontab|ss|netstat|lsof|ifconfig|hostname|whoami|date|echo|sha256sum|md5sum"
    r"|sha1sum|jq|telnet|nc|traceroute|mtr|lsblk|iostat|vmstat|journalctl|service)"
    r"(?:\s+[-\w./:=@%+,~*\[\]$'\"]+)+\s*$", re.ASCII)
_SENTENCE_WORD = re.compile(r"\b(?:the|a|an|which|what|of|in|on|for|to|into|from|at|by|as|and|that|this|me|my"
                            r"|please|all|is|are|how|with|using|via|under)\b")
# An operation word that is not asked for: "关掉的 issue" (closed ones), "新增了多少行" (how many
# were added), "deleted files", "what changed": a state or a question about the past.
_NOT_ASKED_AFTER = re.compile(r"\s*(?:了|过)?\s*的|\s*(?:了|过)\s*(?:多少|几)")
_ASKED_BEFORE = re.compile(r"(?:要|想|请|需|待|帮我|打算|准备)\s*$")  # "要删除的文件": asked after all
_CLAUSE_BREAK = re.compile(r"[,，。;；!！?？\n]|\.\s|\s(?:and|then|but)\s|然后|并且|再")
# A word right before the noun it names is a value, not a verb: "deploy 用户",
# "the backup user", "users 表" (a table called users).
_ENTITY_ZH = "用户|账号|账户|表|库|容器|服务|分支|仓库|进程|镜像|主机|机器|群|频道|任务|目录|文件"
_ENTITY_EN = r"users?|accounts?|tables?|databases?|containers?|services?|branch(?:es)?|repos?|hosts?|jobs?|channels?"
_NAMED = re.compile(
    r"\b[a-z_][a-z0-9_-]*(?=\s*(?:这个|那个|这些|那些)?\s*(?:" + _ENTITY_ZH + r"))"
    r"|(?<=\b(?:the|for|our) )[a-z_][a-z0-9_-]*(?= (?:" + _ENTITY_EN + r")\b)",
    re.ASCII,
)


class Term(NamedTuple):
    """One matching term: ``c:`` concept, ``w:`` word, ``b:``/``u:`` CJK, ``p:`` slot.

    ``start`` (offset in the normalised request) and ``clause`` (how many
    clause breaks precede it) let the matcher pair an operation with the
    thing it acts on; both are -1 for a tool's own text. A tuple, because a
    request makes dozens and Match is measured in microseconds.
    """

    feature: str
    surface: str
    weight: float
    start: int = -1
    clause: int = -1


class Analyzer:
    """Turns text into terms with one vocabulary; cheap to create, safe to share."""

    def __init__(self, vocabulary: "Vocabulary") -> None:
        self.vocabulary = vocabulary
        self._forms = vocabulary.forms
        self._longest = vocabulary.longest
        self._kinds = vocabulary.kinds
        self._codes = vocabulary.codes
        # token character -> (lengths of the longer forms it starts, longest
        # first; the features of the one-token form, or None): one probe
        # decides most tokens, longer forms cost one slice per length.
        self._multi_forms: dict[str, tuple[str, ...]] = {}
        lengths: dict[str, set[int]] = {}
        for form, found in vocabulary.encoded.items():
            if len(form) > 1:
                self._multi_forms[form] = found
                lengths.setdefault(form[0], set()).add(len(form))
        self._first: dict[str, tuple[tuple[int, ...], tuple[str, ...] | None]] = {
            ch: (tuple(sorted(lengths.get(ch, ()), reverse=True)), vocabulary.encoded.get(ch))
            for ch in {*lengths, *(f for f in vocabulary.encoded if len(f) == 1)}}
        self._first[_SEP] = ((), _SEP_FOUND)
        self._words: dict[str, tuple[str, str]] = {}  # English word -> (stem, token character)

    def query(self, text: str, known_words: Container[str] = (), names: Container[str] = ()) -> list[Term]:
        """Terms of a request, in the order of the request: parameters become
        slots, a payload (the text of a message, a reminder, an issue) becomes
        one ``p:text`` slot, the rest is segmented.

        ``known_words`` are English words the registry uses; they are never
        "corrected" to a vocabulary word. ``names`` are the registry's tool
        names, which keep their words when a request mentions one.
        """
        t = normalize(text)
        out: list[Term] = []
        cut = _payload_start(t)
        if cut is not None:
            out.append(Term("p:text", t[cut[1]:].strip(), SLOT_WEIGHT["p:text"], cut[0]))
            t = t[: cut[0]]
        # Blanked spans keep their length, so every offset refers to ``t``.
        t = _NAMED.sub(self._drop_name, t)
        if "`" in t:  # `uptime`: a command line; its words still say what it does
            out.extend(Term("p:cmdline", m.group(1), SLOT_WEIGHT["p:cmdline"], m.start())
                       for m in re.finditer(r"`([^`]+)`", t))
        pieces: list[str] = []
        last = 0
        host_at = -1
        has_number = False
        for m in _PARAMS.finditer(t):
            kind = m.lastgroup or "number"  # the outer group: "ip", never "ipport"
            slot = _SLOT[kind]
            value = m.group()
            if kind == "name" and self._keep_name(value, names):
                continue  # php-fpm, sha-256, a tool's own name: words that mean something
            at = m.start()
            pieces.append(t[last:at])
            pieces.append(" " * len(value))
            last = m.end()
            out.append(Term(slot, value, SLOT_WEIGHT[slot], at))
            if slot == "p:host":
                host_at = at
                if m.group("ipport"):
                    out.append(Term("p:port", m.group("ipport"), SLOT_WEIGHT["p:port"], at))
            elif kind == "number" and value.isdigit() and 0 < int(value) < 65536:
                has_number = True
            if slot == "p:path":
                out.extend(Term(pt.feature, pt.surface, pt.weight, at) for pt in self._path_terms(value))
        pieces.append(t[last:])
        if host_at >= 0 and has_number:
            # A host and a bare number next to it: almost always a port ("10.0.0.5 的 8080").
            out.append(Term("p:port", "", SLOT_WEIGHT["p:port"], host_at))
        if _COMMAND_LINE.match(t) and not _SENTENCE_WORD.search(t):
            out.append(Term("p:cmdline", t.strip(), SLOT_WEIGHT["p:cmdline"], 0))
        kinds = self._kinds
        for term in self._segment("".join(pieces), known_words, correct=True):
            if term.feature[0] == "c" and kinds[term.feature[2:]] in ("op", "act"):
                end = term.start + len(term.surface)
                if term.surface.endswith("ed") or (_NOT_ASKED_AFTER.match(t, end)
                                                    and not _ASKED_BEFORE.search(t, 0, term.start)):
                    continue
            out.append(term)
        out.sort(key=_start)
        breaks = [m.start() for m in _CLAUSE_BREAK.finditer(t)]
        where = bisect.bisect
        return [Term(f, sf, w, at, where(breaks, at)) for f, sf, w, at, _ in out]

    def text(self, text: str) -> list[Term]:
        """Terms of a tool's own text (no parameter spotting, no typo correction)."""
        return self._segment(normalize(text), (), correct=False)

    def features(self, text: str) -> list[str]:
        """Features of a tool's own text, lone unknown characters left out (no surfaces, no weights)."""
        return self._scan(_fold(text), (), False, unigrams=False)

    def features_many(self, texts: list[str]) -> list[list[str]]:
        """:meth:`features` of each text, in one pass over all of them.

        Building an index analyses ~10 short texts a tool; one pass instead
        of ten halves the cost, because most of it is per call, not per
        character. A separator token between the texts stops forms and
        bigrams at their borders, so the result equals ten calls.
        """
        joined = _fold(_SEP.join([t.replace(_SEP, " ") if _SEP in t else t for t in texts]))
        bounds: list[int] = []
        out = self._scan(joined, (), False, unigrams=False, bounds=bounds)
        if len(bounds) != len(texts) - 1:  # NFKC made or ate a separator: be exact instead
            return [self.features(t) for t in texts]
        result = []
        start = 0
        for end in bounds:
            result.append(out[start:end])
            start = end
        result.append(out[start:])
        return result

    def concepts(self, text: str) -> list[str]:
        """Concept ids in ``text`` (for slots and capabilities)."""
        return [t.feature[2:] for t in self.text(text) if t.feature.startswith("c:")]

    def _keep_name(self, value: str, names: Container[str]) -> bool:
        """A hyphenated word is a name (redis-server, agent-api) unless it is a form or a tool."""
        return (value in names or tuple(stem(w) for w in value.split("-")) in self._forms
                or (stem(value.replace("-", "")),) in self._forms)  # e-mail, roll-back

    def _drop_name(self, m: re.Match[str]) -> str:
        """Blank a name that the vocabulary would read as a verb (deploy, backup ...)."""
        word = m.group()
        if re.match(r"\s*(?:表|库|tables?\b|databases?\b)", m.string[m.end():]):
            return " " * len(word)  # "users 表", "orders 库": a table or database named so
        concepts = self._forms.get((stem(word),), ())
        if any(self._kinds[c] in ("op", "act", "look") for c in concepts):
            return " " * len(word)
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

    def _scan(self, text: str, known_words: Container[str], correct: bool,
              offsets: list[tuple[int, int]] | None = None, spans: list[tuple[int, int]] | None = None,
              unigrams: bool = True, bounds: list[int] | None = None) -> list[str]:
        """Features of normalised ``text``: the longest vocabulary form at each
        token, else an English word or the CJK bigrams of an unknown run.

        The text becomes one string with one character per token (see
        ``Vocabulary.codes``), so a form lookup is a slice and a dict probe.
        Forms match across spaces and punctuation between tokens ("tar 包",
        "load average"); unknown CJK bigrams only join adjacent characters.
        With ``offsets`` and ``spans``, each token's (start, end) in ``text``
        and each feature's token range are recorded, for surfaces. A ``_SEP``
        in the text ends a form and a run and, with ``bounds``, records how
        many features came before it (see :meth:`features_many`).
        """
        codes, cache = self._codes, self._words
        pieces: list[str] = []
        words: dict[int, str] = {}   # token index -> stemmed English token
        gaps: set[int] = set()       # CJK tokens not adjacent to the CJK token before them
        n = 0
        prev_cjk = False
        parts = _PART.finditer(text) if offsets is not None else _PART.findall(text)
        for m in parts:
            s = m if offsets is None else m.group()
            if s >= "\u3400":
                if prev_cjk:
                    gaps.add(n)
                pieces.append(s)
                if offsets is not None:
                    a = m.start()
                    offsets.extend([(k, k + 1) for k in range(a, a + len(s))])
                n += len(s)
                prev_cjk = True
                continue
            prev_cjk = False
            if offsets is not None:
                offsets.append(m.span())
            if s == _SEP:
                pieces.append(s)
                n += 1
                continue
            hit = cache.get(s)
            if hit is None:
                if len(cache) >= _WORDS_MAX:
                    cache.clear()
                w = stem(s)
                hit = cache[s] = (w, codes.get(w, "\x00"))
            w, code = hit
            if correct and code == "\x00" and w not in known_words:
                fixed = self.vocabulary.correct(w)
                if fixed:
                    w, code = fixed, codes.get(fixed, "\x00")
            words[n] = w
            pieces.append(code)
            n += 1
        c = "".join(pieces)
        first, lookup = self._first.get, self._multi_forms.get
        out: list[str] = []
        run = -1  # start of the current run of unknown CJK characters
        i = 0
        while i < n:
            ch = c[i]
            info = first(ch)
            if info is not None:
                sizes, found = info
                for size in sizes:  # longer forms, longest first; else the one-token form
                    if i + size <= n:
                        hit = lookup(c[i:i + size])
                        if hit is not None:
                            found = hit
                            break
                else:
                    size = 1
                if found is not None:
                    if run >= 0:
                        self._flush(c, run, i, out, spans, unigrams)
                        run = -1
                    if found:
                        if found is _SEP_FOUND:
                            if bounds is not None:
                                bounds.append(len(out))
                        else:
                            out.extend(found)
                            if spans is not None:
                                spans.extend([(i, i + size)] * len(found))
                    i += size
                    continue
            if ch >= _ENCODED or ch == "\x00":  # an English token that starts no form here
                if run >= 0:
                    self._flush(c, run, i, out, spans, unigrams)
                    run = -1
                w = words[i]
                if not w.isdigit():
                    out.append("w:" + w)
                    if spans is not None:
                        spans.append((i, i + 1))
            elif run < 0:
                run = i
            elif i in gaps:
                self._flush(c, run, i, out, spans, unigrams)
                run = i
            i += 1
        if run >= 0:
            self._flush(c, run, n, out, spans, unigrams)
        return out

    @staticmethod
    def _flush(c: str, start: int, end: int, out: list[str], spans: list[tuple[int, int]] | None,
               unigrams: bool) -> None:
        """An unknown CJK run: its bigrams, or the lone character (which only dilutes)."""
        if end - start == 1:
            if unigrams:
                out.append("u:" + c[start])
                if spans is not None:
                    spans.append((start, end))
            return
        out.extend(["b:" + c[k:k + 2] for k in range(start, end - 1)])
        if spans is not None:
            spans.extend([(k, k + 2) for k in range(start, end - 1)])

    def _segment(self, text: str, known_words: Container[str], correct: bool) -> list[Term]:
        """Terms of normalised ``text``, with their surfaces and query weights."""
        offsets: list[tuple[int, int]] = []
        spans: list[tuple[int, int]] = []
        feats = self._scan(text, known_words, correct, offsets, spans)
        kinds = self._kinds
        out = []
        for f, (a, b) in zip(feats, spans):
            surface = text[offsets[a][0]:offsets[b - 1][1]]
            kind = f[0]
            if kind == "c":
                weight = KIND_WEIGHT[kinds[f[2:]]]
            elif kind == "w":
                weight = WORD_WEIGHT
            elif kind == "b":
                weight, surface = BIGRAM_WEIGHT, f[2:]
            else:
                weight, surface = UNIGRAM_WEIGHT, f[2:]
            out.append(Term(f, surface, weight, offsets[a][0]))
        return out
