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

import operator
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


_start = operator.itemgetter(3)  # a term's start, as a sort key
_as_term = tuple.__new__          # _as_term(Term, fields): a Term without its Python-level __new__


def _clause(breaks: list[int], at: int) -> int:
    """How many clause breaks come before offset ``at`` (bisect_right; there are few)."""
    n = 0
    for b in breaks:
        if b > at:
            break
        n += 1
    return n


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
    hint = _PAYLOAD_HINT.search(t)
    m = _PAYLOAD_WORD.search(t, hint.start()) if hint else None
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
_PARAM_SHAPES = (
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
    r"|(?P<number>(?<![a-z0-9_.])\d+(?:\.\d+)?(?![a-z0-9_]))"
)
# Where no shape can start, skip without trying them: twenty alternatives at
# every character were a third of a Match (English words cost the most). It
# only rejects what the shapes reject anyway (tests/agent/test_text.py holds
# it to the bare shapes):
# * a character that begins no shape (most CJK text, spaces, punctuation);
# * a letter inside a word: every shape that starts with a letter starts at \b;
# * a word of letters and digits that a space, CJK or the end follows: the
#   lettered shapes all go on with one of @/.=_:+- first (https:, a_b, a-b,
#   a.log, k=v, a/b, a@b), but for a bare version (v2).
_PARAM_GATE = (r"""(?=[\w.+~/#"'{\[“「『\-""" + _NUM_ZH + r"])"
               r"(?!(?<=\w)[a-zA-Z_])"
               r"(?!(?!v\d)[a-zA-Z][a-zA-Z0-9]*+(?![@/.=_:+-]))")
_PARAMS = re.compile(_PARAM_GATE + "(?:" + _PARAM_SHAPES + ")",
                     re.ASCII)  # \w and \b are ASCII: a path ends where Chinese text starts
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
# The lookahead in front is the first characters of the alternatives: elsewhere
# one test instead of six. Every match starts with one of the words of
# _PAYLOAD_HINT, a branch of plain words that the regex engine scans for by
# their first characters: it says whether to search, and from where.
_PAYLOAD_HINT = re.compile("说|讲|提醒|叫|喊|标题|内容|正文|remind|ping|notify|tell|inform|message|email|let"
                           "|saying|titled|with")
_PAYLOAD_WORD = re.compile(
    r"(?=[说讲提叫喊标内正rpntimelsw])(?:"
    r"(?<=[^\s听比据所虽要再来])(?:说|讲)(?![明法服说解究])(?:一声|一下|下)?(?=\s*\S)"
    r"|(?:提醒|叫|喊)(?:我|我们|大家|他|她)(?:一下|下)?(?:去|要|该)?(?=\s*\S)"
    r"|\b(?:remind|ping)\s+(?:me|us|him|her|them|everyone|the\s+\w+)\b[^.;!?]*?\bto\b(?=\s*\S)"
    r"|\b(?:notify|tell|inform|message|email|let)\b[^.;!?]*?\b(?:that|saying)\b(?=\s*\S)"
    r"|\b(?:saying|titled|with\s+(?:the\s+)?(?:title|subject|message|text|body))\b(?=\s*\S)"
    r"|(?:标题|内容|正文)(?:是|为|叫)(?=\s*\S))")
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
_BACKTICKED = re.compile(r"`([^`]+)`")
_TABLE_AFTER = re.compile(r"\s*(?:表|库|tables?\b|databases?\b)")
_PATH_SPLIT = re.compile(r"[/._-]+")
_CLAUSE_BREAK = re.compile(r"[,，。;；!！?？\n]|\.\s|\s(?:and|then|but)\s|然后|并且|再")
# A word right before the noun it names is a value, not a verb: "deploy 用户",
# "the backup user", "users 表" (a table called users).
_ENTITY_ZH = "用户|账号|账户|表|库|容器|服务|分支|仓库|进程|镜像|主机|机器|群|频道|任务|目录|文件"
_ENTITY_EN = r"users?|accounts?|tables?|databases?|containers?|services?|branch(?:es)?|repos?|hosts?|jobs?|channels?"
# Both alternatives start a word (\b and a letter: one test at other places);
# a word is taken whole (*+), as giving back a letter can never reach the noun.
# Either needs one of the nouns, or "the/for/our " before it: without any
# (_NAMED_HINT, a fast scan for plain words), the text has no such name.
_NAMED = re.compile(
    r"\b(?=[a-z_])(?:"
    r"[a-z_][a-z0-9_-]*+(?=\s*(?:这个|那个|这些|那些)?\s*(?:" + _ENTITY_ZH + r"))"
    r"|(?<=\b(?:the|for|our) )[a-z_][a-z0-9_-]*+(?= (?:" + _ENTITY_EN + r")\b)"
    # ... or right after it, in English: "cron jobs for user deploy", "the container backup",
    # "a job named deploy"; only the name (group "after") is blanked.
    r"|(?:(?<=\bfor )|(?<=\bof )|(?<=\bby )|(?<=\bthe ))(?:" + _ENTITY_EN + r") (?P<after>[a-z_][a-z0-9_-]*+)"
    r"|(?:(?<=\bnamed )|(?<=\bcalled ))[a-z_][a-z0-9_-]*+)",
    re.ASCII,
)
_NAMED_HINT = re.compile(_ENTITY_ZH + "|the |for |our |of |by |named |called ")


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
        self._kinds = vocabulary.kinds
        self._codes = vocabulary.codes
        # Per concept feature, once: its query weight, and whether it is an operation.
        self._concept_weight = {"c:" + c: KIND_WEIGHT[k] for c, k in self._kinds.items() if k in KIND_WEIGHT}
        self._operations = frozenset("c:" + c for c, k in self._kinds.items() if k in ("op", "act"))
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
        return [_as_term(Term, fields) for fields in self.request(text, known_words, names)]

    def request(self, text: str, known_words: Container[str] = (),
                names: Container[str] = ()) -> list[tuple[str, str, float, int, int]]:
        """:meth:`query` as plain tuples of the same fields, for the ranking:
        a request makes dozens, and a plain tuple is several times cheaper to
        make than a NamedTuple."""
        t = normalize(text)
        cut = _payload_start(t)
        payload = ""
        if cut is not None:
            payload = t[cut[1]:].strip()
            t = t[: cut[0]]
        # Blanked spans keep their length, so every offset refers to ``t``.
        if _NAMED_HINT.search(t):
            t = _NAMED.sub(self._drop_name, t)
        breaks = [m.start() for m in _CLAUSE_BREAK.finditer(t)]
        out: list[tuple[str, str, float, int, int]] = []
        if cut is not None:
            out.append(("p:text", payload, SLOT_WEIGHT["p:text"], cut[0], _clause(breaks, cut[0])))
        if "`" in t:  # `uptime`: a command line; its words still say what it does
            for m in _BACKTICKED.finditer(t):
                at = m.start()
                out.append(("p:cmdline", m.group(1), SLOT_WEIGHT["p:cmdline"], at, _clause(breaks, at)))
        pieces: list[str] = []
        last = 0
        host_at = -1
        has_number = False
        for m in _PARAMS.finditer(t):
            kind = m.lastgroup or "number"  # the outer group: "ip", never "ipport"
            value = m.group()
            if kind == "name" and self._keep_name(value, names):
                continue  # php-fpm, sha-256, a tool's own name: words that mean something
            slot = _SLOT[kind]
            at = m.start()
            clause = _clause(breaks, at)
            pieces.append(t[last:at])
            pieces.append(" " * len(value))
            last = m.end()
            out.append((slot, value, SLOT_WEIGHT[slot], at, clause))
            if slot == "p:host":
                host_at = at
                port = m.group("ipport")
                if port:
                    out.append(("p:port", port, SLOT_WEIGHT["p:port"], at, clause))
            elif kind == "number" and value.isdigit() and 0 < int(value) < 65536:
                has_number = True
            if slot == "p:path":
                for feature, weight in self._path_terms(value):
                    out.append((feature, value, weight, at, clause))
        pieces.append(t[last:])
        if host_at >= 0 and has_number:
            # A host and a bare number next to it: almost always a port ("10.0.0.5 的 8080").
            out.append(("p:port", "", SLOT_WEIGHT["p:port"], host_at, _clause(breaks, host_at)))
        if _COMMAND_LINE.match(t) and not _SENTENCE_WORD.search(t):
            out.append(("p:cmdline", t.strip(), SLOT_WEIGHT["p:cmdline"], 0, _clause(breaks, 0)))
        operations = self._operations
        for term in self._segment("".join(pieces), known_words, True, breaks):
            f, surface, _, start, _ = term
            if f in operations:
                if surface.endswith("ed") or (_NOT_ASKED_AFTER.match(t, start + len(surface))
                                              and not _ASKED_BEFORE.search(t, 0, start)):
                    continue
            out.append(term)
        out.sort(key=_start)
        return out

    def text(self, text: str) -> list[Term]:
        """Terms of a tool's own text (no parameter spotting, no typo correction)."""
        return [_as_term(Term, fields) for fields in self._segment(normalize(text), (), False, None)]

    def features(self, text: str) -> list[str]:
        """Features of a tool's own text, lone unknown characters left out (no surfaces, no weights)."""
        return self._scan(_fold(text), (), False, None, False, None)

    def features_many(self, texts: list[str]) -> list[list[str]]:
        """:meth:`features` of each text, in one pass over all of them.

        Building an index analyses ~10 short texts a tool; one pass instead
        of ten halves the cost, because most of it is per call, not per
        character. A separator token between the texts stops forms and
        bigrams at their borders, so the result equals ten calls.
        """
        joined = _fold(_SEP.join([t.replace(_SEP, " ") if _SEP in t else t for t in texts]))
        bounds: list[int] = []
        out = self._scan(joined, (), False, None, False, bounds)
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
        return (value in names or tuple([stem(w) for w in value.split("-")]) in self._forms
                or (stem(value.replace("-", "")),) in self._forms)  # e-mail, roll-back

    def _drop_name(self, m: re.Match[str]) -> str:
        """Blank a name that the vocabulary would read as a verb (deploy, backup ...)."""
        whole = m.group()
        word = m.group("after")
        if word is None:
            word = whole
            if _TABLE_AFTER.match(m.string, m.end()):
                return " " * len(word)  # "users 表", "orders 库": a table or database named so
        # "for user deploy": the noun stays, only the name after it goes.
        lead = whole[: len(whole) - len(word)]
        concepts = self._forms.get((stem(word),), ())
        kinds = self._kinds
        for c in concepts:
            if kinds[c] in ("op", "act", "look"):
                return lead + " " * len(word)
        return whole

    def _path_terms(self, path: str) -> list[tuple[str, float]]:
        """(feature, weight) of what a path says about its file: a file, of
        the kind its extension names, and the things named along the way
        (/var/log, /data/orders)."""
        kinds = self._kinds
        out: list[tuple[str, float]] = []
        base = path.rstrip("/").rsplit("/", 1)[-1]
        if "." in base.strip("."):
            out.append(("c:file", EXTENSION_WEIGHT))
            ext = base.strip(".").split(".", 1)[1]
            for f in self._scan(ext.replace(".", " "), (), False, None, True, None):
                if f[0] == "c" and kinds[f[2:]] == "obj":
                    out.append((f, EXTENSION_WEIGHT))
        # Only things, not verbs: /opt/release is not a request to release.
        for f in self._scan(" ".join(_PATH_SPLIT.split(path)), (), False, None, True, None):
            if f[0] == "c" and kinds[f[2:]] == "obj":
                out.append((f, PATH_WORD_WEIGHT))
        return out

    def _scan(self, text: str, known_words: Container[str], correct: bool, spans: list[int] | None,
              unigrams: bool, bounds: list[int] | None) -> list[str]:
        """Features of normalised ``text``: the longest vocabulary form at each
        token, else an English word or the CJK bigrams of an unknown run.

        The text becomes one string with one character per token (see
        ``Vocabulary.codes``), so a form lookup is a slice and a dict probe.
        Forms match across spaces and punctuation between tokens ("tar 包",
        "load average"); unknown CJK bigrams only join adjacent characters.
        With ``spans``, each feature's start and end offsets in ``text`` are
        appended (two ints a feature), for surfaces. A ``_SEP`` in the text
        ends a form and a run and, with ``bounds``, records how many features
        came before it (see :meth:`features_many`).
        """
        codes, cache = self._codes, self._words
        pieces: list[str] = []
        words: dict[int, str] = {}   # token index -> stemmed English token
        gaps: set[int] = set()       # CJK tokens not adjacent to the CJK token before them
        starts: list[int] = []       # with spans: each token's start and end in text
        ends: list[int] = []
        n = 0
        prev_cjk = False
        at = 0  # with spans: where the previous part ended
        # Strings, not match objects: a part's offset is its first occurrence
        # from the end of the one before, as no part can start in between.
        for s in _PART.findall(text):
            if spans is not None:
                a = text.find(s, at)
                at = a + len(s)
            if s >= "\u3400":
                if prev_cjk:
                    gaps.add(n)
                pieces.append(s)
                if spans is not None:
                    for k in range(a, at):
                        starts.append(k)
                        ends.append(k + 1)
                n += len(s)
                prev_cjk = True
                continue
            prev_cjk = False
            if spans is not None:
                starts.append(a)
                ends.append(at)
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
        first, lookup = self._first, self._multi_forms
        out: list[str] = []
        run = -1  # start of the current run of unknown CJK characters
        i = 0
        while i < n:
            ch = c[i]
            info = first.get(ch)
            if info is not None:
                sizes, found = info
                size = 1
                for longer in sizes:  # longer forms, longest first; else the one-token form
                    if i + longer <= n:
                        hit = lookup.get(c[i:i + longer])
                        if hit is not None:
                            found = hit
                            size = longer
                            break
                if found is not None:
                    if run >= 0:
                        _flush(c, run, i, out, spans, starts, unigrams)
                        run = -1
                    if found:
                        if found is _SEP_FOUND:
                            if bounds is not None:
                                bounds.append(len(out))
                        else:
                            out.extend(found)
                            if spans is not None:
                                for _ in found:
                                    spans.append(starts[i])
                                    spans.append(ends[i + size - 1])
                    i += size
                    continue
            if ch >= _ENCODED or ch == "\x00":  # an English token that starts no form here
                if run >= 0:
                    _flush(c, run, i, out, spans, starts, unigrams)
                    run = -1
                w = words[i]
                if not w.isdigit():
                    out.append("w:" + w)
                    if spans is not None:
                        spans.append(starts[i])
                        spans.append(ends[i])
            elif run < 0:
                run = i
            elif i in gaps:
                _flush(c, run, i, out, spans, starts, unigrams)
                run = i
            i += 1
        if run >= 0:
            _flush(c, run, n, out, spans, starts, unigrams)
        return out

    def _segment(self, text: str, known_words: Container[str], correct: bool,
                 breaks: list[int] | None) -> list[tuple[str, str, float, int, int]]:
        """Terms of normalised ``text`` as plain tuples (see :meth:`request`), with
        their surfaces and query weights; with ``breaks`` (the offsets of the
        clause breaks), their clauses, else -1."""
        spans: list[int] = []
        feats = self._scan(text, known_words, correct, spans, True, None)
        weights = self._concept_weight
        out = []
        j = 0
        for f in feats:
            a = spans[j]
            kind = f[0]
            if kind == "c":
                weight = weights[f]
                surface = text[a:spans[j + 1]]
            elif kind == "w":
                weight = WORD_WEIGHT
                surface = text[a:spans[j + 1]]
            elif kind == "b":
                weight, surface = BIGRAM_WEIGHT, f[2:]
            else:
                weight, surface = UNIGRAM_WEIGHT, f[2:]
            out.append((f, surface, weight, a, -1 if breaks is None else _clause(breaks, a)))
            j += 2
        return out


def _flush(c: str, start: int, end: int, out: list[str], spans: list[int] | None, starts: list[int],
           unigrams: bool) -> None:
    """An unknown CJK run: its bigrams, or the lone character (which only dilutes)."""
    if end - start == 1:
        if unigrams:
            out.append("u:" + c[start])
            if spans is not None:
                spans.append(starts[start])
                spans.append(starts[start] + 1)
        return
    for k in range(start, end - 1):
        out.append("b:" + c[k:k + 2])
        if spans is not None:
            spans.append(starts[k])
            spans.append(starts[k] + 2)
