"""The lexical half of a match: BM25F presences, and the share of a request a tool explains.

A tool is a bag of terms whose term frequency is summed over its fields,
each field weighted by how strongly it says what the tool is for
(:data:`FIELD_WEIGHT`), then saturated as BM25 does, so one term's presence
``p`` is in 0..1 (:func:`presences`). A request scores a tool by the share of
its information the tool explains::

    share = sum(qw * idf * p) / (sum(qw * idf*) + ALPHA)

``idf*`` is the term's idf, or for a term no tool has, a fixed share of the
largest idf: words nobody explains make every tool explain less, which is
what tells "renew the certificate" from "check the certificate". The share
is comparable across requests and registries, unlike a raw BM25 sum.

English words no tool has are tried once more at one edit (typos), at a
discount. Chinese typos need no step here: pinyin terms carry them.

This module is the matcher's hot loop; it is compiled by Cython in
pure-Python mode as ``bitong.agent.matching._lexical`` (see :mod:`bitong.agent.matching._backend`).
"""

from __future__ import annotations

import heapq
import itertools
import math

__all__ = ["ALPHA", "FIELD_WEIGHT", "OOV_FACTOR", "TYPO_FACTOR", "WEAK_SPREAD", "accumulate", "best", "idf", "matched", "near_words",
           "presences", "scores"]

# Fields of a tool and how much one occurrence of a term in them counts.
# ``slots`` are the kinds of value the parameters take (p:path, p:url ...).
FIELD_WEIGHT = {"display": 1.5, "keywords": 1.5, "intent": 1.2, "name": 1.0, "why": 0.5, "params": 0.4,
                "slots": 1.2}
K1 = 1.2
B = 0.3
REF_LEN = 40.0     # a fixed reference length: updates never have to re-saturate other tools
ALPHA = 0.3        # damps the share of very short requests
OOV_FACTOR = 0.6   # a term no tool has counts this share of the largest idf
TYPO_FACTOR = 0.7  # a word corrected by one edit counts this much
WEAK_SPREAD = 64   # a character or pinyin term in more tools than this only refines (see accumulate)
COMMON_SPREAD = 256  # any term in more tools than this only refines, once candidates exist
QUANTUM = 64.0       # presences are multiples of 1/QUANTUM

_LETTERS = "abcdefghijklmnopqrstuvwxyz"


def presences(fields: list[tuple[str, dict[str, float]]]) -> dict[str, float]:
    """Term -> saturated presence 0..1 of a tool, from its fields' terms (field name, terms)."""
    tf: dict[str, float] = {}
    length = 0.0
    for field, terms in fields:
        fw = FIELD_WEIGHT[field]
        for term, w in terms.items():
            tf[term] = tf.get(term, 0.0) + fw * w
            length += w
    norm = 1.0 - B + B * (length / REF_LEN)
    out: dict[str, float] = {}
    for term, f in tf.items():
        # Quantized (as search engines quantize impacts): an edit that changes the
        # tool's length leaves most presences as they were, so a re-index copies
        # only the posting lists of the terms the edit really moved.
        out[term] = round(f / (f + K1 * norm) * QUANTUM) / QUANTUM
    return out


def idf(n: int, df: int) -> float:
    return math.log(1.0 + (n - df + 0.5) / (df + 0.5))


def _edits(word: str) -> list[str]:
    """Every string one edit (delete, swap, replace, insert) from ``word``."""
    out: list[str] = []
    n = len(word)
    for i in range(n):
        out.append(word[:i] + word[i + 1:])
        if i + 1 < n:
            out.append(word[:i] + word[i + 1] + word[i] + word[i + 2:])
        for c in _LETTERS:
            if c != word[i]:
                out.append(word[:i] + c + word[i + 1:])
    for i in range(n + 1):
        for c in _LETTERS:
            out.append(word[:i] + c + word[i:])
    return out


def near_words(postings: dict[str, dict[str, float]]) -> dict[str, list[str]]:
    """Every known English word of 4+ characters under each string one deletion from it (symmetric delete).

    A word one edit from an unknown word shares one of its deletions (a
    replacement or a swap), is one of them (an insertion), or is the unknown
    word less a letter: a typo is looked up with a few deletions instead of
    every edit (hundreds of strings a word).
    """
    near: dict[str, list[str]] = {}
    for term in postings:
        if term.startswith("w:") and len(term) >= 6:
            word = term[2:]
            for i in range(len(word)):
                key = word[:i] + word[i + 1:]
                got = near.get(key)
                if got is None:
                    near[key] = [word]
                elif got[-1] != word:   # a doubled letter gives the same deletion twice
                    got.append(word)
    return near


def _one_edit(word: str, cand: str) -> bool:
    """True when ``cand`` is among :func:`_edits` of ``word`` (which inserts and replaces with a-z only)."""
    n = len(word)
    m = len(cand)
    i = 0
    short = n if n < m else m
    while i < short and word[i] == cand[i]:
        i += 1
    if m == n - 1:
        return word[i + 1:] == cand[i:]
    if m == n + 1:
        return cand[i] in _LETTERS and cand[i + 1:] == word[i:]
    if m != n or i == n:
        return False
    if word[i + 1:] == cand[i + 1:]:
        return cand[i] in _LETTERS
    return i + 1 < n and word[i] == cand[i + 1] and word[i + 1] == cand[i] and word[i + 2:] == cand[i + 2:]


def _correct(term: str, postings: dict[str, dict[str, float]], near: dict[str, list[str]] | None = None) -> str:
    """The most common known word one edit from an unknown English word of 4+ letters, or ''.

    Of equally common ones, the first :func:`_edits` makes. ``near`` is :func:`near_words` of
    ``postings`` (the same answer, found from the word's deletions).
    """
    word = term[2:]
    if len(word) < 4 or not word.isalpha():
        return ""
    best = ""
    best_df = 0
    if near is not None:
        found: set[str] = set(near.get(word, ()))
        for i in range(len(word)):
            key = word[:i] + word[i + 1:]
            if "w:" + key in postings:
                found.add(key)
            got = near.get(key)
            if got is not None:
                found.update(got)
        tie = False
        for cand in found:
            if _one_edit(word, cand):
                df = len(postings["w:" + cand])
                if df > best_df:
                    best, best_df, tie = cand, df, False
                elif df == best_df:
                    tie = True
        if tie:   # the first of the equally common ones, as every edit in order finds it
            for cand in _edits(word):
                p = postings.get("w:" + cand)
                if p is not None and len(p) == best_df:
                    return "w:" + cand
        return "w:" + best if best else ""
    for cand in _edits(word):
        p = postings.get("w:" + cand)
        if p is not None and len(p) > best_df:
            best = "w:" + cand
            best_df = len(p)
    return best


def scores(query: dict[str, float], postings: dict[str, dict[str, float]], n: int,
           near: dict[str, list[str]] | None = None,
           ) -> tuple[dict[str, float], float, list[str], list[tuple[str, dict[str, float]]]]:
    """Score every tool that shares a term with the request (``near``: :func:`near_words` of ``postings``, for typos).

    Returns (tool -> explained mass, the request's total mass, the request's
    terms that no tool has, the terms walked with their posting lists, in
    order). ``share`` is the explained mass over the total; :func:`matched`
    reads a tool's matched terms from the walk, for the few tools shown.
    """
    acc: dict[str, float] = {}
    missing: list[str] = []
    walked: list[tuple[str, dict[str, float]]] = []
    total = ALPHA
    oov_idf = idf(n, 0) * OOV_FACTOR
    weak: list[tuple[str, float, dict[str, float]]] = []
    # Rare terms first: once they have found candidates, a term that hundreds of
    # tools share only refines those (MaxScore-like); a tool that shares nothing
    # but common terms with the request cannot outrank them.
    for term, qw in sorted(query.items(), key=lambda kv: len(postings.get(kv[0], ()))):
        plist = postings.get(term)
        weight = qw
        if plist is None and term.startswith("w:"):
            fixed = _correct(term, postings, near)
            if fixed:
                plist = postings[fixed]
                weight = qw * TYPO_FACTOR
        if plist is None:
            total += qw * oov_idf
            missing.append(term)
            continue
        term_idf = idf(n, len(plist))
        total += qw * term_idf
        if (term[0] in "uy" and len(plist) > WEAK_SPREAD) or (len(plist) > COMMON_SPREAD and len(acc) >= 32):
            weak.append((term, weight * term_idf, plist))  # see below
            continue
        w = weight * term_idf
        get = acc.get
        for name, p in plist.items():
            acc[name] = get(name, 0.0) + w * p
        walked.append((term, plist))
    # A single character or a pinyin shared by hundreds of tools only refines
    # the tools the request's words already found: walking its whole posting
    # list would cost more than the rest of the match and change no ranking.
    for term, w, plist in weak:
        if len(acc) < len(plist):
            for name in list(acc):
                got = plist.get(name)
                if got is not None:
                    acc[name] += w * got
        else:
            for name, p in plist.items():
                if name in acc:
                    acc[name] += w * p
        walked.append((term, plist))
    return acc, total, missing, walked


def matched(walked: list[tuple[str, dict[str, float]]], acc: dict[str, float], name: str) -> list[str]:
    """The request's terms a tool matched, in the order :func:`scores` added them (none: a tool it did not score)."""
    if name not in acc:
        return []
    return [term for term, plist in walked if name in plist]


def best(acc: dict[str, float], k: int) -> list[str]:
    """The ``k`` tools of most mass, most first; of equal ones, the first scored (as ``heapq.nlargest``).

    A big registry scores thousands of tools a little: the k-th mass is found
    first (a heap of masses), then only the tools at or over it are sorted.
    """
    if len(acc) <= k:
        return sorted(acc, key=acc.__getitem__, reverse=True)
    if k <= 0:
        return []
    rest = iter(acc.values())
    heap = list(itertools.islice(rest, k))
    heapq.heapify(heap)
    low = heap[0]
    for v in rest:
        if v > low:
            heapq.heapreplace(heap, v)
            low = heap[0]
    out = [name for name, v in acc.items() if v >= low]
    out.sort(key=acc.__getitem__, reverse=True)   # stable: equal masses stay in the order they were scored
    return out[:k]


def accumulate(query: dict[str, float], postings: dict[str, dict[str, float]], n: int,
               near: dict[str, list[str]] | None = None,
               ) -> tuple[dict[str, float], float, dict[str, list[str]], list[str]]:
    """:func:`scores`, with every scored tool's matched terms: (tool -> mass, total, tool -> terms, missing)."""
    acc, total, missing, walked = scores(query, postings, n, near)
    return acc, total, {name: matched(walked, acc, name) for name in acc}, missing
