"""A first scan shared over forked children: the same snapshot as one core makes, whatever a child does."""

from __future__ import annotations

import logging
import os
import socket
import time
from pathlib import Path

import pytest

from bitong.agent.matching import index as matcher
from bitong.agent.registry import forked
from bitong.agent.registry.snapshot import Registry
from tests.support import tool_text


def _square(x: int) -> tuple[int, int]:
    return x * x, os.getpid()


def _same(r: object) -> object:
    return r


def test_children_do_a_share_and_the_results_come_back_in_order() -> None:
    out = forked.forked_map(_square, list(range(1000)), _same, lambda r: tuple(r))  # type: ignore[arg-type]
    assert [v for v, _ in out] == [x * x for x in range(1000)]
    assert forked.cores() < 2 or len({pid for _, pid in out}) == forked.cores()
    three = forked.forked_map(_square, list(range(10)), _same, lambda r: tuple(r), workers=3)  # type: ignore[arg-type]
    assert [v for v, _ in three] == [x * x for x in range(10)] and len({pid for _, pid in three}) == 3


def test_a_child_that_dies_costs_time_not_results() -> None:
    parent = os.getpid()

    def fragile(x: int) -> int:
        if os.getpid() != parent and x == 700:
            os._exit(9)   # a child killed halfway through its share
        return x + 1

    assert forked.forked_map(fragile, list(range(1000)), _same, _same, workers=2) == list(range(1, 1001))  # type: ignore[arg-type]

    def unsendable(x: int) -> object:
        return x if os.getpid() == parent else object()   # marshal cannot write it: the child gives up

    assert forked.forked_map(unsendable, list(range(10)), _same, _same, workers=2) == list(range(10))


def test_when_this_process_fails_its_share_no_child_is_left_behind(monkeypatch: pytest.MonkeyPatch) -> None:
    parent = os.getpid()
    started: list[int] = []
    fork = forked._fork

    def recorded(*args: object) -> object:
        child = fork(*args)  # type: ignore[arg-type]
        if child is not None:
            started.append(child[0])
        return child

    def broken(x: int) -> int:
        if os.getpid() == parent and x == 1:
            raise RuntimeError("a bug in this share")
        return x

    monkeypatch.setattr(forked, "_fork", recorded)
    with pytest.raises(RuntimeError, match="a bug in this share"):
        forked.forked_map(broken, list(range(30)), _same, _same, workers=3)  # type: ignore[arg-type]
    assert len(started) == 2
    for pid in started:   # killed and reaped: not even a zombie
        with pytest.raises(ChildProcessError):
            os.waitpid(pid, os.WNOHANG)


def test_a_child_dies_with_the_process_that_forked_it(tmp_path: Path) -> None:
    """A server killed with SIGKILL in the middle of a shared scan leaves no child computing on."""
    import subprocess
    import sys

    release = tmp_path / "never"   # the children wait for it; it never comes
    script = (
        "import os, sys, time\n"
        "from bitong.agent.registry import forked\n"
        "parent = os.getpid()\n"
        "def work(x):\n"
        "    if os.getpid() != parent:\n"
        "        print(os.getpid(), flush=True)\n"
        f"        while not os.path.exists({str(release)!r}): time.sleep(0.01)\n"
        "    else:\n"
        "        time.sleep(3600)\n"
        "    return x\n"
        "forked.forked_map(work, list(range(30)), lambda r: r, lambda r: r, workers=3)\n")
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        children = {int(proc.stdout.readline()), int(proc.stdout.readline())}   # each child's first item
    finally:
        proc.kill()   # SIGKILL: the parent runs no cleanup at all
        proc.wait()
        proc.stdout.close()  # type: ignore[union-attr]
    try:
        end = time.monotonic() + 20
        alive = set(children)
        while alive and time.monotonic() < end:
            alive = {pid for pid in alive if _running(pid)}
            time.sleep(0.01)
        assert not alive, f"children {alive} outlived the process that forked them"
    finally:
        release.touch()   # (if any did, it ends now)


def _running(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def test_a_child_holds_no_descriptor_but_its_pipe(tmp_path: Path) -> None:
    """A socket the parent closes while a child computes is closed for its peer at once, not at the child's end."""
    mine, peer = socket.socketpair()
    release = tmp_path / "release"
    parent = os.getpid()

    def work(x: int) -> object:
        if os.getpid() != parent:
            while not release.exists():   # the child's share ends only once the parent has seen the EOF
                time.sleep(0.005)
            return x
        if x != 0:
            return x
        try:
            mine.close()
            peer.settimeout(20)
            return peer.recv(1)   # b"": no child holds a copy of the parent's end
        except OSError as exc:
            return repr(exc)
        finally:
            release.touch()

    assert forked.forked_map(work, [0, 1, 2, 3], _same, _same, workers=2) == [b"", 1, 2, 3]  # type: ignore[arg-type]
    peer.close()


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


@pytest.mark.parametrize("rough", [True, False], ids=["rough", "full"])
def test_a_shared_first_scan_equals_a_scan_on_one_core(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                        caplog: pytest.LogCaptureFixture, rough: bool) -> None:
    root = _registry_root(tmp_path)
    monkeypatch.setattr(forked, "cores", lambda: 2)
    scanned: list[int] = []
    real = forked.forked_map

    def counting(*args: object, **kwargs: object) -> object:
        scanned.append(len(args[1]))  # type: ignore[arg-type]
        return real(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(forked, "forked_map", counting)
    monkeypatch.setattr(forked, "FROM", 10**9)
    one = Registry([str(root)])
    one.rough_from = 10
    alone = one.rescan(rough=rough)
    assert scanned == []
    monkeypatch.setattr(forked, "FROM", 10)
    analysed_here: list[str] = []
    name = "rough_analysis" if rough else "analyze"
    made = getattr(matcher, name)

    def counted(tool: object, *args: object, **kwargs: object) -> object:
        analysed_here.append(tool.name)  # type: ignore[attr-defined]   # (a child's list is its own)
        return made(tool, *args, **kwargs)

    monkeypatch.setattr(matcher, name, counted)
    two = Registry([str(root)])
    two.rough_from = 10
    caplog.clear()
    with caplog.at_level(logging.ERROR, logger="bitong.registry"):
        shared = two.rescan(rough=rough)
    assert scanned == [41]
    assert 0 < len(analysed_here) < 30   # the children's analyses were taken as they made them
    assert sorted(shared.tools) == sorted(alone.tools) and len(shared.tools) == 39
    for name, tool in shared.tools.items():
        theirs = alone.tools[name]
        assert tool.content_sha256 == theirs.content_sha256 and tool.intent == theirs.intent
    assert [str(e) for e in shared.errors] == [str(e) for e in alone.errors] and "tool-17/TOOL.hdlp:" in str(shared.errors[0])
    assert [r.getMessage() for r in caplog.records] == [str(shared.errors[0])]   # said once, by this process
    requests = ("convert item 23 between formats", "Converter 5", "nothing like it")
    for request in requests:
        assert shared.index.match(request, 3) == alone.index.match(request, 3)
    # the next scan is an ordinary one: nothing changed, nothing read again
    assert two.rescan() is shared and scanned == [41]
    if rough:   # the full analysis that follows a rough scan is shared out too, and ends where one core does
        monkeypatch.setattr(forked, "FROM", 10**9)
        assert one.refine()
        monkeypatch.setattr(forked, "FROM", 10)
        assert two.refine() and scanned == [41, 39]
        for request in requests:
            assert two.snapshot.index.match(request, 3) == one.snapshot.index.match(request, 3)


def test_an_upgrades_first_start_indexes_by_words_on_every_core(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A state whose analyses another version made: the rough index of its tools is shared out too."""
    from bitong.agent.matching.vocabulary import default_vocabulary

    root = _registry_root(tmp_path)
    state = tmp_path / "state.pb"
    before = Registry([str(root)])   # "another version": analyses made without the vocabulary
    before.rescan()
    before.save_state(str(state))
    monkeypatch.setattr(forked, "cores", lambda: 2)
    calls: list[int] = []
    real = forked.forked_map

    def counting(fn: object, items: list[object], *args: object) -> object:
        calls.append(len(items))
        return real(fn, items, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(forked, "forked_map", counting)
    answers = []
    for share_from in (10**9, 10):
        monkeypatch.setattr(forked, "FROM", share_from)
        upgraded = Registry([str(root)], vocabulary=default_vocabulary())
        upgraded.rough_from = 10
        assert upgraded.load_state(str(state)) and upgraded.rough
        answers.append([upgraded.snapshot.index.match(q, 3) for q in ("convert item 23 between formats", "Converter 5")])
    assert calls == [39] and answers[0] == answers[1]
