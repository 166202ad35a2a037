"""Hit rates of an Index over labelled requests (seed 002 §4.4: measure before and after).

Reads the ``query<TAB>expected`` files of ``shared/eval`` (``expected`` is
``NONE`` or comma-separated acceptable tool names), matches every request and
scores the answers exactly as ``shared/eval/score_match.py`` does, so a tool
author can compare an old and a new description on their own phrasings::

    report = evaluate(index, "my_queries.tsv")
    print(*report.misses, report.summary, sep="\\n")
    # hit@1=0.850 hit@3=0.950 none_acc=0.900 mrr=0.890 n=60
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from bitong.agent.matching.index import Index, MatchResult

__all__ = ["EvalError", "Query", "Report", "evaluate", "read_queries", "score"]

NONE = "NONE"
_HEADER = ("query", "expected")


class EvalError(ValueError):
    """A malformed or unreadable query file; the message names file and line."""


@dataclass(frozen=True)
class Query:
    line: int
    text: str
    expected: frozenset[str]  # empty means NONE: no registered tool fits


@dataclass(frozen=True)
class Report:
    """The scorer's figures; ``misses`` are its miss lines, ``summary`` its last line."""

    hit1: float
    hit3: float
    none_acc: float
    mrr: float
    n: int
    n_tool: int
    n_none: int
    misses: tuple[str, ...]

    @property
    def summary(self) -> str:
        return (f"hit@1={self.hit1:.3f} hit@3={self.hit3:.3f} "
                f"none_acc={self.none_acc:.3f} mrr={self.mrr:.3f} n={self.n}")


def parse_queries(text: str, src: str = "QUERIES") -> list[Query]:
    """Parse query-file text; the same rules as score_match.py (header optional, blanks skipped)."""
    out: list[Query] = []
    for no, raw in enumerate(text.splitlines(), start=1):
        line = raw.rstrip("\r")
        if not line.strip():
            continue
        parts = line.split("\t")
        if len(parts) != 2:
            raise EvalError(f"{src}:{no}: expected 2 tab-separated fields, got {len(parts)}")
        query, expected = parts[0].strip(), parts[1].strip()
        if not out and (query.lower(), expected.lower()) == _HEADER:
            continue
        if not query:
            raise EvalError(f"{src}:{no}: empty query")
        if not expected:
            raise EvalError(f"{src}:{no}: empty expected field (use NONE)")
        names = [n.strip() for n in expected.split(",")]
        if any(not n for n in names):
            raise EvalError(f"{src}:{no}: empty tool name in expected {expected!r}")
        if NONE in names:
            if len(names) != 1:
                raise EvalError(f"{src}:{no}: NONE cannot be combined with tool names")
            out.append(Query(no, query, frozenset()))
        else:
            out.append(Query(no, query, frozenset(names)))
    if not out:
        raise EvalError(f"{src}: no queries found")
    return out


def read_queries(path: str | os.PathLike[str]) -> list[Query]:
    """Read a query file (UTF-8, BOM allowed). Raises EvalError."""
    p = os.fspath(path)
    try:
        with open(p, encoding="utf-8-sig") as fh:
            text = fh.read()
    except OSError as exc:
        raise EvalError(f"{p}: cannot read ({exc.strerror})") from None
    except UnicodeDecodeError:
        raise EvalError(f"{p}: not UTF-8 text") from None
    return parse_queries(text, p)


def _first_hit_rank(q: Query, r: MatchResult) -> int | None:
    if not r.found:
        return None
    seen: set[str] = set()
    for h in r.hits:
        if h.name in seen:  # a repeated name does not take a second rank
            continue
        seen.add(h.name)
        if h.name in q.expected:
            return len(seen)
    return None


def _describe(r: MatchResult, limit: int = 3) -> str:
    if not r.found:
        return "found=false"
    if not r.hits:
        return "found=true (no candidates)"
    shown = ", ".join(f"{h.name}({h.score:.3f})" for h in r.hits[:limit])
    more = f", +{len(r.hits) - limit} more" if len(r.hits) > limit else ""
    return shown + more


def score(queries: list[Query], results: list[MatchResult]) -> Report:
    """Score one MatchResult per query, in order, as score_match.py does."""
    if len(queries) != len(results):
        raise ValueError(f"{len(results)} results for {len(queries)} queries")
    h1 = h3 = rr = 0.0
    n_tool = n_none = none_ok = 0
    misses: list[str] = []
    for i, (q, r) in enumerate(zip(queries, results), start=1):
        if not q.expected:
            n_none += 1
            if not r.found:
                none_ok += 1
            else:
                misses.append(f"MISS #{i} line {q.line} expected=NONE got={_describe(r)} | {q.text}")
            continue
        n_tool += 1
        rank = _first_hit_rank(q, r)
        if rank is not None:
            rr += 1.0 / rank
            h1 += rank == 1
            h3 += rank <= 3
        if rank != 1:
            where = f"rank={rank}" if rank else "rank=-"
            exp = ",".join(sorted(q.expected))
            misses.append(f"MISS #{i} line {q.line} expected={exp} got={_describe(r)} {where} | {q.text}")
    return Report(
        hit1=h1 / n_tool if n_tool else 0.0,
        hit3=h3 / n_tool if n_tool else 0.0,
        none_acc=none_ok / n_none if n_none else 0.0,
        mrr=rr / n_tool if n_tool else 0.0,
        n=len(queries), n_tool=n_tool, n_none=n_none, misses=tuple(misses),
    )


def evaluate(index: Index, queries: str | os.PathLike[str] | list[Query], *, top_k: int = 3,
             threshold: float | None = None) -> Report:
    """Match every request of a query file (or parsed list) and score the answers.

    Raises EvalError for a malformed or unreadable file.
    """
    qs = queries if isinstance(queries, list) else read_queries(queries)
    return score(qs, [index.match(q.text, top_k, threshold=threshold) for q in qs])
