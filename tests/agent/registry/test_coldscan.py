"""A first scan shared over forked children: the same snapshot as one core makes, whatever a child does."""

from __future__ import annotations

import logging
import os
from pathlib import Path

import pytest

from bitong.agent.registry import coldscan
from bitong.agent.registry.snapshot import Registry
from tests.support import tool_text


def _square(x: int) -> tuple[int, int]:
    return x * x, os.getpid()


def _same(r: object) -> object:
    return r


def test_children_do_a_share_and_the_results_come_back_in_order() -> None:
    out = coldscan.forked_map(_square, list(range(1000)), _same, lambda r: tuple(r))  # type: ignore[arg-type]
    assert [v for v, _ in out] == [x * x for x in range(1000)]
    assert coldscan.cores() < 2 or len({pid for _, pid in out}) == coldscan.cores()
    three = coldscan.forked_map(_square, list(range(10)), _same, lambda r: tuple(r), workers=3)  # type: ignore[arg-type]
    assert [v for v, _ in three] == [x * x for x in range(10)] and len({pid for _, pid in three}) == 3


def test_a_child_that_dies_costs_time_not_results() -> None:
    parent = os.getpid()

    def fragile(x: int) -> int:
        if os.getpid() != parent and x == 700:
            os._exit(9)   # a child killed halfway through its share
        return x + 1

    assert coldscan.forked_map(fragile, list(range(1000)), _same, _same, workers=2) == list(range(1, 1001))  # type: ignore[arg-type]

    def unsendable(x: int) -> object:
        return x if os.getpid() == parent else object()   # marshal cannot write it: the child gives up

    assert coldscan.forked_map(unsendable, list(range(10)), _same, _same, workers=2) == list(range(10))


def _registry_root(tmp_path: Path) -> Path:
    root = tmp_path / "tools"
    for i in range(40):
        name = f"tool-{i:02d}"
        (root / name).mkdir(parents=True)
        text = tool_text(name, intent=f"convert item {i} between formats", display=f"Converter {i}")
        if i == 17:
            text = text.replace("executor: shell", "executor: shel")   # an error at its line
        (root / name / "TOOL.hdlp").write_text(text, encoding="utf-8")
    (root / "empty").mkdir()   # a folder without TOOL.hdlp is no tool
    return root


def test_a_shared_first_scan_equals_a_scan_on_one_core(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                        caplog: pytest.LogCaptureFixture) -> None:
    root = _registry_root(tmp_path)
    monkeypatch.setattr(coldscan, "cores", lambda: 2)
    scanned: list[int] = []
    real = coldscan.forked_map

    def counting(*args: object, **kwargs: object) -> object:
        scanned.append(len(args[1]))  # type: ignore[arg-type]
        return real(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(coldscan, "forked_map", counting)
    monkeypatch.setattr(coldscan, "FROM", 10**9)
    one = Registry([str(root)])
    one.rough_from = 10
    alone = one.rescan(rough=True)
    assert scanned == []
    monkeypatch.setattr(coldscan, "FROM", 10)
    from bitong.agent.matching import index as matcher
    analysed_here: list[str] = []
    rough = matcher.rough_analysis

    def counted(tool: object, *args: object, **kwargs: object) -> object:
        analysed_here.append(tool.name)  # type: ignore[attr-defined]   # (a child's list is its own)
        return rough(tool, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(matcher, "rough_analysis", counted)
    two = Registry([str(root)])
    two.rough_from = 10
    caplog.clear()
    with caplog.at_level(logging.ERROR, logger="bitong.registry"):
        shared = two.rescan(rough=True)
    assert scanned == [41]
    assert 0 < len(analysed_here) < 30   # the children's analyses were taken as they made them
    assert sorted(shared.tools) == sorted(alone.tools) and len(shared.tools) == 39
    for name, tool in shared.tools.items():
        theirs = alone.tools[name]
        assert tool.content_sha256 == theirs.content_sha256 and tool.intent == theirs.intent
    assert [str(e) for e in shared.errors] == [str(e) for e in alone.errors] and "tool-17/TOOL.hdlp:" in str(shared.errors[0])
    assert [r.getMessage() for r in caplog.records] == [str(shared.errors[0])]   # said once, by this process
    for request in ("convert item 23 between formats", "Converter 5", "nothing like it"):
        assert shared.index.match(request, 3) == alone.index.match(request, 3)
    # the next scan is an ordinary one: nothing changed, nothing read again
    assert two.rescan() is shared and scanned == [41]
