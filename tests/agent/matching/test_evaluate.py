"""`bitong eval`: the scorer's figures for a user's own registry and phrasings."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from bitong.parser import parse

from bitong.agent.matching.evaluate import EvalError, evaluate, parse_queries, read_queries
from bitong.agent.matching import Index

SCORER = os.path.join(os.path.dirname(__file__), "..", "..", "..", "..", "shared", "eval", "score_match.py")


def tool(name: str, display: str, intent: str) -> object:
    return parse(f"name: {name}\ndisplay: {display}\nintent: {intent}\nmethod: run\nexecutor: shell\n"
                 f"params_schema: {{}}\nconstraints: {{}}\nauthor: t\ncreated: 2026-06-01\nwhy: 需要\n")


@pytest.fixture(scope="module")
def index() -> Index:
    return Index.build([
        tool("disk-usage", "磁盘空间", "查看服务器各个分区的容量和剩余空间"),
        tool("memory-usage", "内存使用", "查看整机内存和 swap 的用量"),
        tool("service-restart", "重启服务", "用 systemctl 重启一个系统服务"),
    ])


QUERIES = ("query\texpected\n"
           "磁盘还剩多少空间\tdisk-usage\n"
           "内存用量多少\tmemory-usage,disk-usage\n"
           "\n"
           "重启 nginx 服务\tservice-restart\n"
           "订一张机票\tNONE\n"
           "磁盘满了吗\tmemory-usage\n")


def test_summary_and_misses_follow_the_scorer(index: Index, tmp_path: os.PathLike[str]) -> None:
    path = os.path.join(tmp_path, "q.tsv")
    with open(path, "w", encoding="utf-8") as fh:
        fh.write(QUERIES)
    report = evaluate(index, path)
    assert report.summary == "hit@1=0.750 hit@3=0.750 none_acc=1.000 mrr=0.750 n=5"
    assert len(report.misses) == 1
    assert report.misses[0].startswith("MISS #5 line 7 expected=memory-usage got=disk-usage(")
    assert report.misses[0].endswith("rank=- | 磁盘满了吗")


def test_same_line_as_score_match(index: Index, tmp_path: os.PathLike[str]) -> None:
    if not os.path.exists(SCORER):
        pytest.skip("../shared/eval is not checked out next to the repository")
    qpath = os.path.join(tmp_path, "q.tsv")
    ppath = os.path.join(tmp_path, "p.jsonl")
    with open(qpath, "w", encoding="utf-8") as fh:
        fh.write(QUERIES)
    queries = read_queries(qpath)
    with open(ppath, "w", encoding="utf-8") as fh:
        for q in queries:
            r = index.match(q.text)
            fh.write(json.dumps({"query": q.text, "found": r.found,
                                 "candidates": [{"name": h.name, "score": h.score} for h in r.hits]},
                                ensure_ascii=False) + "\n")
    out = subprocess.run([sys.executable, SCORER, qpath, ppath], capture_output=True, text=True, check=True)
    report = evaluate(index, queries)
    assert out.stdout.splitlines() == [*report.misses, report.summary]


@pytest.mark.parametrize("text, message", [
    ("only one field\n", "q.tsv:1: expected 2 tab-separated fields"),
    ("query\texpected\n\tNONE\n", "q.tsv:2: empty query"),
    ("查磁盘\t\n", "q.tsv:1: empty expected field"),
    ("查磁盘\tNONE,disk-usage\n", "q.tsv:1: NONE cannot be combined"),
    ("查磁盘\ta,,b\n", "q.tsv:1: empty tool name"),
    ("query\texpected\n\n", "q.tsv: no queries found"),
])
def test_malformed_query_file_names_file_and_line(text: str, message: str) -> None:
    with pytest.raises(EvalError, match=message):
        parse_queries(text, "q.tsv")


def test_unreadable_file_is_an_eval_error(tmp_path: os.PathLike[str]) -> None:
    with pytest.raises(EvalError, match="cannot read"):
        read_queries(os.path.join(tmp_path, "missing.tsv"))
