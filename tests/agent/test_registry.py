"""Snapshots: what a rescan sees, what it re-reads, and what it keeps."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Callable

from agent.registry import Registry, Snapshot

WriteTool = Callable[..., Path]


def test_scan_loads_every_tool_folder_and_ignores_other_entries(tools_root: Path) -> None:
    (tools_root / "notes").mkdir()  # a folder without TOOL.hdlp is not a tool
    (tools_root / ".hidden").mkdir()
    (tools_root / "README.md").write_text("not a tool")
    snap = Registry([str(tools_root)]).rescan()
    assert sorted(snap.tools) == ["file-read", "file-stats", "file-write", "git-ops", "http-request",
                                  "scheduled-reminder", "shell-exec"]
    assert snap.errors == ()


def test_a_snapshot_never_changes_after_it_is_taken(tools_root: Path, write_tool: WriteTool) -> None:
    registry = Registry([str(tools_root)])
    before = registry.rescan()
    write_tool("extra")
    after = registry.rescan()
    assert "extra" not in before.tools and "extra" in after.tools
    assert after is not before and after.generation == before.generation + 1


def test_an_unchanged_tree_keeps_the_same_snapshot(tools_root: Path) -> None:
    registry = Registry([str(tools_root)])
    first = registry.rescan()
    for path in tools_root.glob("*/TOOL.hdlp"):  # make every file old enough to trust its stat
        os.utime(path, ns=(1_000_000_000, 1_000_000_000))
    second = registry.rescan()
    assert registry.rescan() is second
    assert second.tools["git-ops"] is first.tools["git-ops"]  # touched, same bytes: not re-parsed


def test_only_the_changed_file_is_parsed_again(tools_root: Path, write_tool: WriteTool) -> None:
    registry = Registry([str(tools_root)])
    first = registry.rescan()
    path = write_tool("shell-exec", (tools_root / "shell-exec" / "TOOL.hdlp").read_text().replace(
        "Shell命令执行", "Shell命令执行器"))
    second = registry.rescan()
    assert second.tools["shell-exec"].display == "Shell命令执行器"
    assert second.tools["git-ops"] is first.tools["git-ops"]
    assert path.exists()


def test_same_size_rewrite_within_one_mtime_tick_is_still_seen(tools_root: Path, write_tool: WriteTool) -> None:
    path = write_tool("twin", command="echo aaaa")
    registry = Registry([str(tools_root)])
    registry.rescan()
    stat = path.stat()
    path.write_text(path.read_text().replace("aaaa", "bbbb"))
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))  # same size, same mtime
    assert registry.rescan().tools["twin"].command == "echo bbbb"


def test_a_name_defined_in_two_roots_serves_the_first_and_reports_the_second(
        tools_root: Path, tmp_path: Path) -> None:
    other = tmp_path / "other"
    (other / "shell-exec").mkdir(parents=True)
    (other / "shell-exec" / "TOOL.hdlp").write_text((tools_root / "shell-exec" / "TOOL.hdlp").read_text())
    snap = Registry([str(tools_root), str(other)]).rescan()
    assert snap.tools["shell-exec"].source_path.startswith(str(tools_root))
    [err] = snap.errors
    assert err.path.startswith(str(other)) and "already defined" in err.message


def test_a_broken_file_keeps_its_last_good_version_until_fixed(tools_root: Path, write_tool: WriteTool) -> None:
    path = write_tool("fragile", command="echo ok")
    registry = Registry([str(tools_root)])
    good = registry.rescan().tools["fragile"]
    path.write_text(path.read_text().replace("created: 2026-11-30", "created: yesterday"))
    snap: Snapshot = registry.rescan()
    assert snap.tools["fragile"] is good
    [err] = snap.errors
    assert err.serving_previous == "fragile" and err.line == 10 and err.column == 10
    assert "still serving" in str(err)
    path.write_text(path.read_text().replace("created: yesterday", "created: 2026-12-01"))
    fixed = registry.rescan()
    assert fixed.errors == () and fixed.tools["fragile"].created == "2026-12-01"


def test_a_file_broken_from_the_start_serves_nothing(tools_root: Path, write_tool: WriteTool) -> None:
    write_tool("never", "name: never\n\tdisplay: tabbed\n")
    snap = Registry([str(tools_root)]).rescan()
    assert "never" not in snap.tools
    [err] = snap.errors
    assert (err.line, err.column, err.serving_previous) == (2, 1, "")


def test_the_index_follows_the_snapshot(tools_root: Path, write_tool: WriteTool) -> None:
    registry = Registry([str(tools_root)])
    registry.rescan()
    write_tool("fax-sender", intent="send a fax to a phone number", display="Fax sender")
    snap = registry.rescan()
    assert snap.index.match("send a fax to the office").hits[0].name == "fax-sender"
    (tools_root / "fax-sender" / "TOOL.hdlp").unlink()
    gone = registry.rescan()
    assert "fax-sender" not in gone.tools
    assert all(h.name != "fax-sender" for h in gone.index.match("send a fax to the office").hits)


def test_a_saved_state_restarts_without_parsing_and_is_validated(
        tools_root: Path, write_tool: WriteTool, tmp_path: Path, monkeypatch) -> None:
    from agent import registry as registry_module

    state = str(tmp_path / "state.pb")
    for path in tools_root.glob("*/TOOL.hdlp"):
        os.utime(path, ns=(1_000_000_000, 1_000_000_000))
    first = Registry([str(tools_root)])
    first.rescan()
    first.save_state(state)

    parsed: list[str] = []
    real = registry_module.parse_bytes
    monkeypatch.setattr(registry_module, "parse_bytes", lambda data, path: parsed.append(path) or real(data, path))
    changed = write_tool("git-ops", (tools_root / "git-ops" / "TOOL.hdlp").read_text().replace("Git仓库查看", "Git仓库"))
    second = Registry([str(tools_root)])
    assert second.load_state(state)
    snap = second.rescan()
    assert parsed == [str(changed)], "only the file that changed since the state was saved is parsed"
    assert sorted(snap.tools) == sorted(first.snapshot.tools)
    assert snap.tools["git-ops"].display == "Git仓库"
    assert snap.index.match("执行一条 shell 命令 uname -a").hits[0].name == "shell-exec"


def test_a_state_for_other_roots_or_garbage_is_ignored(tools_root: Path, tmp_path: Path) -> None:
    state = tmp_path / "state.pb"
    Registry([str(tools_root)]).save_state(str(state))
    assert not Registry([str(tmp_path)]).load_state(str(state))
    state.write_bytes(b"\xff\x00not a state")
    assert not Registry([str(tools_root)]).load_state(str(state))
    assert not Registry([str(tools_root)]).load_state(str(tmp_path / "missing.pb"))
