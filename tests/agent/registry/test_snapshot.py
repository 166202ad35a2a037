"""Snapshots: what a rescan sees, what it re-reads, and what it keeps."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from collections.abc import Callable

import pytest

from bitong.agent.registry.snapshot import Registry, Snapshot
from tests.support import REPO, tool_text

WriteTool = Callable[..., Path]
BUNDLED_NAMES = ["file-read", "file-stats", "file-write", "git-ops", "http-request", "scheduled-reminder", "shell-exec"]


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
    from bitong.agent.registry import snapshot as registry_module

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


def test_a_state_that_matches_the_files_is_clean_and_a_change_makes_it_dirty(
        tools_root: Path, write_tool: WriteTool, tmp_path: Path) -> None:
    """What decides whether a restart writes the state file again."""
    state = str(tmp_path / "state.pb")
    for path in tools_root.glob("*/TOOL.hdlp"):
        os.utime(path, ns=(1_000_000_000, 1_000_000_000))
    first = Registry([str(tools_root)])
    first.rescan()
    scanned_dirty = first.state_dirty
    first.save_state(state)
    assert scanned_dirty and not first.state_dirty

    again = Registry([str(tools_root)])
    assert again.load_state(state)
    assert not again.state_dirty, "nothing changed since the save: nothing to write"
    assert sorted(again.snapshot.tools) == sorted(first.snapshot.tools)
    write_tool("newcomer")
    third = Registry([str(tools_root)])
    assert third.load_state(state)
    assert "newcomer" in third.snapshot.tools and third.state_dirty


def test_a_restart_keeps_the_calibration_and_a_broken_one_is_fitted_again(tools_root: Path, tmp_path: Path) -> None:
    from bitong.v1 import state_pb2

    state = str(tmp_path / "state.pb")
    for path in tools_root.glob("*/TOOL.hdlp"):
        os.utime(path, ns=(1_000_000_000, 1_000_000_000))
    first = Registry([str(tools_root)])
    first.rescan()
    assert first.refresh_semantics()          # fitted: a swap
    fitted = first.snapshot.index.lexical_calibration
    first.save_state(state)

    again = Registry([str(tools_root)])
    assert again.load_state(state)
    assert again.snapshot.index.lexical_calibration == fitted
    assert not again.refresh_semantics(), "the stored calibration serves: nothing to fit"
    assert not again.state_dirty

    stored = state_pb2.RegistryState.FromString(Path(state).read_bytes())
    stored.calibration = b"\xff not a calibration"
    Path(state).write_bytes(stored.SerializeToString())
    broken = Registry([str(tools_root)])
    assert broken.load_state(state)
    assert broken.refresh_semantics() and broken.snapshot.index.lexical_calibration == fitted
    assert broken.state_dirty, "fitted again: the state is written again"


def test_a_folder_rescan_looks_at_those_folders_only(tools_root: Path, write_tool: WriteTool, tmp_path: Path) -> None:
    registry = Registry([str(tools_root)])
    registry.rescan()
    write_tool("git-ops", (tools_root / "git-ops" / "TOOL.hdlp").read_text().replace("Git仓库查看", "Git仓库"))
    write_tool("fresh", intent="show the fresh report")
    snap = registry.rescan(folders=[str(tools_root / "fresh"), str(tmp_path / "elsewhere" / "x")])
    assert "fresh" in snap.tools and snap.index.match("show the fresh report").hits[0].name == "fresh"
    assert snap.tools["git-ops"].display == "Git仓库查看", "a folder no event named is not read"
    assert registry.rescan(folders=[str(tools_root / "fresh")]) is snap   # nothing new there: same snapshot
    shutil.rmtree(tools_root / "fresh")
    gone = registry.rescan(folders=[str(tools_root / "fresh")])
    assert "fresh" not in gone.tools and "fresh" not in {h.name for h in gone.index.match("fresh report").hits}
    assert registry.rescan().tools["git-ops"].display == "Git仓库"


def test_a_folder_rescan_keeps_the_first_root_winning_a_name(tools_root: Path, tmp_path: Path) -> None:
    """A tool added by an event to the first root takes its name from the second, as a full scan would."""
    other = tmp_path / "other"
    (other / "twin").mkdir(parents=True)
    (other / "twin" / "TOOL.hdlp").write_text(tool_text("twin", command="echo second"), encoding="utf-8")
    registry = Registry([str(tools_root), str(other)])
    assert registry.rescan().tools["twin"].command == "echo second"
    (tools_root / "twin").mkdir()
    (tools_root / "twin" / "TOOL.hdlp").write_text(tool_text("twin", command="echo first"), encoding="utf-8")
    by_event = registry.rescan(folders=[str(tools_root / "twin")])
    full = Registry([str(tools_root), str(other)]).rescan()
    assert by_event.tools["twin"].command == full.tools["twin"].command == "echo first"
    assert [str(e) for e in by_event.errors] == [str(e) for e in full.errors]
    assert str(other / "twin" / "TOOL.hdlp") in str(by_event.errors[0]) and "already defined" in str(by_event.errors[0])


# ------------------------------------------------------- one file never stops the registry


def _rescan_within(registry: Registry, seconds: float) -> Snapshot:
    """Rescan on a daemon thread and fail (rather than hang) if it does not finish in time."""
    done: list[Snapshot] = []
    worker = threading.Thread(target=lambda: done.append(registry.rescan()), daemon=True)
    worker.start()
    worker.join(seconds)
    assert done, f"rescan did not finish within {seconds}s"
    return done[0]


def _release_fifo(path: Path) -> None:
    """Give a reader stuck on the FIFO its end of file (only if one is there)."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_NONBLOCK)
    except OSError:
        return  # no reader: nothing is stuck
    os.close(fd)


def test_no_single_file_can_stop_or_stall_the_scan(tools_root: Path, write_tool: WriteTool) -> None:
    fifo = tools_root / "fifo" / "TOOL.hdlp"
    fifo.parent.mkdir()
    os.mkfifo(fifo)
    (tools_root / "zero").mkdir()
    (tools_root / "zero" / "TOOL.hdlp").symlink_to("/dev/zero")
    (tools_root / "folder" / "TOOL.hdlp").mkdir(parents=True)
    big = write_tool("big")
    with open(big, "r+b") as fh:  # a valid tool, then 51 MB (sparse: costs no disk)
        fh.truncate(51 * 1024 * 1024)
    write_tool("overflow", tool_text("overflow") + "retry: 4294967296\n")
    write_tool("regex", params="{ x: { type: string, pattern: 'a{99999999999}' } }")
    write_tool("deep", params="{ x: { type: string, pattern: '" + "(" * 5000 + ")" * 5000 + "' } }")
    try:
        start = time.perf_counter()
        snap = _rescan_within(Registry([str(tools_root)]), 20)
        elapsed = time.perf_counter() - start
    finally:
        _release_fifo(fifo)
    assert elapsed < 5, f"the scan took {elapsed:.1f}s"
    assert sorted(snap.tools) == BUNDLED_NAMES
    errors = {Path(e.path).parent.name: e for e in snap.errors}
    assert sorted(errors) == ["big", "deep", "fifo", "folder", "overflow", "regex", "zero"]
    assert "not a regular file (a FIFO)" in errors["fifo"].message
    assert "not a regular file (a character device)" in errors["zero"].message
    assert "not a regular file (a directory)" in errors["folder"].message
    assert f"file is {51 * 1024 * 1024} bytes: expected at most 1048576" in errors["big"].message
    assert (errors["overflow"].line, errors["overflow"].column) == (12, 8)
    assert "retry must be at most 2147483647" in errors["overflow"].message
    assert errors["regex"].line == 7 and "OverflowError" in errors["regex"].message
    assert errors["deep"].line == 7 and "pattern of parameter 'x' is refused" in errors["deep"].message


def test_the_size_limit_is_configurable(tools_root: Path) -> None:
    snap = Registry([str(tools_root)], max_file_bytes=100).rescan()
    assert snap.tools == {}
    assert all("expected at most 100 bytes" in e.message for e in snap.errors) and len(snap.errors) == 7
    assert sorted(Registry([str(tools_root)], max_file_bytes=64 * 1024).rescan().tools) == BUNDLED_NAMES


# ------------------------------------------------------- the registry says what it lost


def test_a_renamed_or_deleted_root_is_an_error_and_its_tools_keep_serving(tools_root: Path, tmp_path: Path,
                                                                         write_tool: WriteTool) -> None:
    other = tmp_path / "other"
    (other / "extra").mkdir(parents=True)
    (other / "extra" / "TOOL.hdlp").write_text(tool_text("extra"), encoding="utf-8")
    registry = Registry([str(tools_root), str(other)])
    first = registry.rescan()
    assert sorted(first.tools) == sorted(BUNDLED_NAMES + ["extra"]) and first.errors == ()

    moved = tmp_path / "moved"
    tools_root.rename(moved)
    shutil.rmtree(other)
    lost = registry.rescan()
    assert sorted(lost.tools) == sorted(BUNDLED_NAMES + ["extra"])  # the last snapshot of each root serves
    assert lost.tools["git-ops"] is first.tools["git-ops"]
    assert [(e.path, e.line, e.column) for e in lost.errors] == [(str(tools_root), 0, 0), (str(other), 0, 0)]
    assert all("tools root cannot be listed: No such file or directory" in e.message for e in lost.errors)
    assert "serving the 1 tools last seen in it" in lost.errors[1].message and "(extra)" in lost.errors[1].message
    assert registry.rescan() is lost  # nothing changed: no new generation

    moved.rename(tools_root)
    back = registry.rescan()
    assert [e.path for e in back.errors] == [str(other)]
    assert back.tools["git-ops"] is first.tools["git-ops"]
    # deliberately removed from the roots: gone
    assert sorted(Registry([str(tools_root)]).rescan().tools) == BUNDLED_NAMES


# Run as an unprivileged user: root reads a chmod 000 file anyway, so the honest
# test drops to uid/gid 65534 (nobody) in a child, after importing as root
# (the interpreter's stdlib lives under /root, which nobody cannot read).
_AS_NOBODY = r"""
import json, os, sys
from bitong.agent.registry.snapshot import Registry

root, text = sys.argv[1], sys.argv[2]
Registry([os.path.dirname(os.path.abspath(__import__("bitong").__file__)) + "/../tools"]).rescan()  # warm lazy imports
os.setgid(65534)
os.setuid(65534)
os.makedirs(os.path.join(root, "perm"))
path = os.path.join(root, "perm", "TOOL.hdlp")
with open(path, "w", encoding="utf-8") as fh:
    fh.write(text)
os.utime(path, ns=(1_000_000_000, 1_000_000_000))  # old enough for its stat key to be trusted
registry = Registry([root])
out = {}
def look(label):
    snap = registry.rescan()
    out[label] = {"tools": sorted(snap.tools), "errors": [[e.path, e.message] for e in snap.errors]}
os.chmod(path, 0)
look("file 000")
os.chmod(path, 0o644)  # no mtime change
look("file 644")
os.chmod(root, 0)
look("root 000")
os.chmod(root, 0o755)
look("root 755")
print(json.dumps(out))
"""


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to drop to another uid")
def test_permission_problems_are_retried_at_each_rescan_as_an_unprivileged_user() -> None:
    parent = tempfile.mkdtemp(prefix="bitong-perm-")
    try:
        os.chmod(parent, 0o777)
        root = os.path.join(parent, "tools")  # made by the child, so that nobody owns it
        run = subprocess.run([sys.executable, "-c", _AS_NOBODY, root, tool_text("perm")],
                             capture_output=True, text=True, timeout=60, cwd=str(REPO))
        assert run.returncode == 0, run.stderr
        out = json.loads(run.stdout)
    finally:
        shutil.rmtree(parent, ignore_errors=True)
    path = os.path.join(root, "perm", "TOOL.hdlp")
    assert out["file 000"]["tools"] == []
    assert out["file 000"]["errors"] == [[path, "cannot read: Permission denied (expected a readable TOOL.hdlp file)"]]
    assert out["file 644"] == {"tools": ["perm"], "errors": []}
    assert out["root 000"]["tools"] == ["perm"]
    assert [p for p, _ in out["root 000"]["errors"]] == [root]
    assert "tools root cannot be listed: Permission denied" in out["root 000"]["errors"][0][1]
    assert out["root 755"] == {"tools": ["perm"], "errors": []}


# ---------------------------------------------------------------- approval of sensitive tools


def _sensitive(write_tool: WriteTool, name: str, word: str = "first") -> Path:
    text = tool_text(name, command=f"echo {word}") + "permissions: { exec: true }\n"
    return write_tool(name, text)


def test_an_unapproved_sensitive_tool_does_not_load_and_says_which_permission(
        tools_root: Path, write_tool: WriteTool) -> None:
    from bitong.agent.registry.approval import Policy, parse

    path = _sensitive(write_tool, "runner")
    snap = Registry([str(tools_root)], approval=Policy(parse(["shell-exec"]), "the config file prod.toml")).rescan()
    assert "runner" not in snap.tools and "shell-exec" in snap.tools
    assert not {"file-write", "http-request", "scheduled-reminder"} & set(snap.tools)   # unapproved bundled ones
    errors = {e.path: e for e in snap.errors}
    err = errors[str(path)]
    assert err.unapproved == ("exec",) and err.serving_previous == ""
    assert "declares exec, which the config file prod.toml does not approve" in err.message
    assert "the tool does not serve" in err.message
    assert errors[str(tools_root / "http-request" / "TOOL.hdlp")].unapproved == ("network",)
    assert "runner" not in [h.name for h in snap.index.match("run the runner test tool", 3).hits]


def test_an_edited_pinned_tool_keeps_serving_the_approved_version_and_a_restart_serves_neither(
        tools_root: Path, write_tool: WriteTool) -> None:
    from bitong.agent.registry.approval import Policy, parse

    path = _sensitive(write_tool, "runner", "approved")
    first = Registry([str(tools_root)]).rescan().tools["runner"]
    policy = Policy(parse([f"runner@{first.content_sha256[:12]}"]))
    registry = Registry([str(tools_root)], approval=policy)
    assert registry.rescan().tools["runner"].command == "echo approved"

    _sensitive(write_tool, "runner", "edited")   # a different definition: the pin does not cover it
    snap = registry.rescan()
    assert snap.tools["runner"].command == "echo approved"   # what was reviewed, not what was written
    err = next(e for e in snap.errors if e.path == str(path))
    assert err.unapproved == ("exec",) and err.serving_previous == "runner"
    assert f"approved in the config file only for runner@{first.content_sha256[:12]}" in err.message
    assert f"the version approved before (sha256 {first.content_sha256[:12]}) keeps serving" in err.message

    assert "runner" not in Registry([str(tools_root)], approval=policy).rescan().tools   # a restart: only the disk

    _sensitive(write_tool, "runner", "approved")   # the reviewed bytes again: approved again, no error
    snap = registry.rescan()
    assert snap.tools["runner"].command == "echo approved" and not [e for e in snap.errors if e.path == str(path)]


def test_a_restart_from_saved_state_applies_the_approvals_too(tools_root: Path, tmp_path: Path,
                                                              write_tool: WriteTool) -> None:
    from bitong.agent.registry.approval import Policy, parse

    _sensitive(write_tool, "runner")
    state = str(tmp_path / "state.pb")
    unchecked = Registry([str(tools_root)])   # no policy: everything loads
    unchecked.rescan()
    unchecked.save_state(state)   # a state written while runner served
    restarted = Registry([str(tools_root)], approval=Policy(parse(["shell-exec"])))
    assert restarted.load_state(state)
    snap = restarted.snapshot
    assert "runner" not in snap.tools and "shell-exec" in snap.tools
    assert any(e.unapproved == ("exec",) and e.path.endswith("runner/TOOL.hdlp") for e in snap.errors)


# ---------------------------------------------------------------- a restart's stored index, a cold start's rough one

INTENTS = ("执行一条 shell 命令 uname -a", "读一下 /etc/hosts 这个文件", "git 仓库最近的提交", "提醒我明天开会",
           "download https://example.com/a.txt", "给我讲个笑话")


def _rough(registry: Registry) -> bool:
    return registry.rough   # (read anew: a property a call changes)


def _answers(registry: Registry) -> list[tuple[bool, list[tuple[str, float]]]]:
    index = registry.snapshot.index
    return [(r.found, [(h.name, h.score) for h in r.hits]) for r in (index.match(t, 5) for t in INTENTS)]


def test_a_restart_takes_the_stored_index_and_a_damaged_one_is_rebuilt_and_written_again(
        tools_root: Path, tmp_path: Path) -> None:
    from bitong.v1 import state_pb2

    state = tmp_path / "state.pb"
    for path in tools_root.glob("*/TOOL.hdlp"):
        os.utime(path, ns=(1_000_000_000, 1_000_000_000))
    first = Registry([str(tools_root)])
    first.rescan()
    first.save_state(str(state))

    again = Registry([str(tools_root)])
    assert again.load_state(str(state))
    assert again.snapshot.index.postings_restored and not again.state_dirty
    assert _answers(again) == _answers(first)

    stored = state_pb2.RegistryState.FromString(state.read_bytes())
    assert stored.index
    stored.index = stored.index[:40] + bytes([stored.index[40] ^ 0xFF]) + stored.index[41:]
    state.write_bytes(stored.SerializeToString())
    damaged = Registry([str(tools_root)])
    assert damaged.load_state(str(state)), "the files and analyses still serve: only the postings are rebuilt"
    assert not damaged.snapshot.index.postings_restored
    assert _answers(damaged) == _answers(first)
    assert damaged.state_dirty, "written again, with postings a restart can take"


def test_a_rough_first_scan_serves_by_words_then_refine_swaps_in_the_full_index(
        tools_root: Path, write_tool: WriteTool) -> None:
    registry = Registry([str(tools_root)])
    registry.rough_from = 1   # (10,000 tools in a real start; 1000 by default)
    rough = registry.rescan(rough=True)
    assert _rough(registry) and sorted(rough.tools) == BUNDLED_NAMES
    assert rough.index.match("执行 shell 命令").hits[0].name == "shell-exec"
    assert rough.index.saved_postings() == b""

    write_tool("newcomer")   # a change while rough: analysed in full at once
    newcomer = registry.rescan().index.analysis("newcomer")
    assert newcomer is not None and newcomer.fingerprint != "rough"
    assert _rough(registry)
    full = Registry([str(tools_root)])   # what a full first scan of the same files makes
    full.rescan()
    assert registry.refine() and not _rough(registry)
    assert not registry.refine(), "once: nothing rough is left"
    assert _answers(registry) == _answers(full)
    refined, expected = registry.snapshot.index, full.snapshot.index
    assert [(a.name, a) for a in refined.analyses()] == [(a.name, a) for a in expected.analyses()]
    assert refined.saved_postings() == expected.saved_postings(), "the index a full first scan makes"


def test_a_small_first_scan_is_never_rough(tools_root: Path) -> None:
    registry = Registry([str(tools_root)])
    registry.rescan(rough=True)
    assert not registry.rough and not registry.refine()


def test_a_state_of_another_analysis_version_restarts_rough_and_is_refined(tools_root: Path, tmp_path: Path) -> None:
    from bitong.v1 import state_pb2

    state = tmp_path / "state.pb"
    first = Registry([str(tools_root)])
    first.rescan()
    first.save_state(str(state))
    stored = state_pb2.RegistryState.FromString(state.read_bytes())
    stored.analysis_fingerprint = "another-version.none"   # as an upgrade of bitong leaves it
    state.write_bytes(stored.SerializeToString())
    upgraded = Registry([str(tools_root)])
    upgraded.rough_from = 1
    assert upgraded.load_state(str(state))
    assert _rough(upgraded) and upgraded.state_dirty
    assert sorted(upgraded.snapshot.tools) == BUNDLED_NAMES
    assert upgraded.refine() and not _rough(upgraded)
    assert _answers(upgraded) == _answers(first)


def test_a_restart_serves_before_numpy_is_imported(tools_root: Path, tmp_path: Path) -> None:
    """numpy (0.1-0.3 s to import) is for the vectors and the calibration, which come after serving."""
    state = tmp_path / "state.pb"
    first = Registry([str(tools_root)])
    first.rescan()
    first.save_state(str(state))
    code = ("import sys\n"
            "import bitong.agent.serving.server\n"
            "from bitong.agent.registry.snapshot import Registry\n"
            f"r = Registry([{str(tools_root)!r}])\n"
            f"assert r.load_state({str(state)!r}) and r.snapshot.index.postings_restored\n"
            "assert r.snapshot.index.match('执行 shell 命令').hits[0].name == 'shell-exec'\n"
            "print('numpy' in sys.modules)\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "False"


def test_two_state_writes_at_once_leave_a_state_that_loads(tools_root: Path, tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """The writer task and shutdown's last write can overlap: the second waits, it never writes under the first."""
    registry = Registry([str(tools_root)])
    registry.rescan()
    state = tmp_path / "state.pb"
    first_inside, release, second_done = threading.Event(), threading.Event(), threading.Event()
    stored = Registry._stored
    calls = []

    def slow_first(snap: Snapshot) -> object:
        calls.append(1)
        for i, entry in enumerate(stored(snap)):
            if len(calls) == 1 and i == 1:
                first_inside.set()
                assert release.wait(30)
            yield entry

    monkeypatch.setattr(Registry, "_stored", staticmethod(slow_first))
    errors: list[BaseException] = []

    def save(done: threading.Event | None = None) -> None:
        try:
            registry.save_state(str(state))
        except BaseException as exc:  # the test reports it
            errors.append(exc)
        if done is not None:
            done.set()

    first = threading.Thread(target=save)
    first.start()
    assert first_inside.wait(30)
    second = threading.Thread(target=save, args=(second_done,))
    second.start()
    second_done.wait(2)   # (a second writer that does not wait for the first is done by now; one that waits is not)
    release.set()
    first.join(30)
    second.join(30)
    assert errors == []
    again = Registry([str(tools_root)])
    assert again.load_state(str(state)) and sorted(again.snapshot.tools) == sorted(registry.snapshot.tools)
    assert not list(tmp_path.glob("*.tmp"))
