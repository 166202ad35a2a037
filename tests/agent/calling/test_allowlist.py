"""bitong.agent.calling.allowlist: fs_read_paths / fs_write_paths globs, matched against where a path really is."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from bitong.agent.calling import allowlist
from bitong.parser import parse


@pytest.mark.parametrize("path, patterns, inside", [
    ("/srv/app", ["/srv/app/**"], True),                 # ** takes zero segments: the folder itself
    ("/srv/app/a/b/c.txt", ["/srv/app/**"], True),
    ("/srv/application", ["/srv/app/**"], False),        # a prefix of a name is not inside
    ("/srv/app/../etc/passwd", ["/srv/app/**"], False),  # .. is resolved first
    ("/srv/x/conf.yaml", ["/srv/*/conf.yaml"], True),
    ("/srv/x/y/conf.yaml", ["/srv/*/conf.yaml"], False), # * stays inside one segment
    ("/var/log/a/b/c.log", ["/var/log/**/*.log"], True),
    ("/var/log/a/b/c.txt", ["/var/log/**/*.log"], False),
    ("/data/r2", ["/data/r[0-9]"], True),
    ("/data/rx", ["/data/r[0-9]", "/data/r[!x]"], False),
])
def test_glob_rules(path: str, patterns: list[str], inside: bool) -> None:
    assert allowlist.allowed(path, patterns) is inside


def test_a_symlink_out_of_the_list_is_outside(tmp_path: Path) -> None:
    (tmp_path / "allowed").mkdir()
    (tmp_path / "secret").mkdir()
    (tmp_path / "allowed" / "door").symlink_to(tmp_path / "secret")
    patterns = [f"{tmp_path}/allowed/**"]
    assert allowlist.allowed(str(tmp_path / "allowed" / "file"), patterns)
    assert not allowlist.allowed(str(tmp_path / "allowed" / "door" / "file"), patterns)


TOOL = """\
name: t
display: t
intent: t
method: run
executor: python
params_schema:
  src: {{ type: string, normalize: [path] }}
  note: {{ type: string }}
constraints: {{}}
permissions: {perms}
author: a
created: 2026-01-01
why: w
"""


def test_check_names_each_path_param_outside_the_list_that_applies() -> None:
    reader = parse(TOOL.format(perms='{ fs_read: true, fs_read_paths: ["/srv/**"] }'))
    assert allowlist.check(reader, {"src": "/srv/a", "note": "/etc/passwd"}) == ()   # note is not a path param
    [(param, message)] = allowlist.check(reader, {"src": "/etc/shadow"})
    assert param == "src" and message == "'/etc/shadow' is outside this tool's fs_read_paths: /srv/**"
    writer = parse(TOOL.format(perms='{ fs_write: true, fs_read_paths: ["/srv/**"], fs_write_paths: ["/tmp/**"] }'))
    assert allowlist.check(writer, {"src": "/srv/a"})[0][1].endswith("outside this tool's fs_write_paths: /tmp/**")
    free = parse(TOOL.format(perms="{ fs_read: true }"))
    assert allowlist.check(free, {"src": "/anything"}) == ()


def test_require_refuses_without_lists_and_outside_them(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("BITONG_FS_READ_PATHS", raising=False)
    monkeypatch.delenv("BITONG_FS_WRITE_PATHS", raising=False)
    with pytest.raises(PermissionError, match="no allow-list was given \\(BITONG_FS_READ_PATHS is not set\\)"):
        allowlist.require(str(tmp_path / "x"), "read")
    monkeypatch.setenv("BITONG_FS_READ_PATHS", json.dumps([f"{tmp_path}/**"]))
    monkeypatch.setenv("BITONG_FS_WRITE_PATHS", "[]")
    assert allowlist.require(str(tmp_path / "x"), "read") == os.path.realpath(tmp_path / "x")
    with pytest.raises(PermissionError, match="path: '/etc/hosts' is outside this tool's fs_read_paths"):
        allowlist.require("/etc/hosts", "read")


# ---------------------------------------------------------------- mutation-testing survivors (issue part 7)


def test_path_params_after_a_non_path_param_are_still_checked() -> None:
    reader = parse(TOOL.format(perms='{ fs_read: true, fs_read_paths: ["/srv/**"] }'))
    # dict order puts the non-path param (and one the schema lacks) before the path param
    got = allowlist.check(reader, {"note": "x", "stray": "/etc", "count": 3, "src": "/etc/shadow"})
    assert [param for param, _ in got] == ["src"]


@pytest.mark.parametrize("path, inside", [("/etc/hosts", True), ("/etc/hosts2", False), ("/etc", False),
                                          ("/etc/./hosts", True)])
def test_an_exact_path_pattern_allows_that_path_only(path: str, inside: bool) -> None:
    assert allowlist.allowed(path, ["/etc/hosts"]) is inside


def test_an_exact_pattern_is_resolved_like_the_path(tmp_path: Path) -> None:
    (tmp_path / "real").mkdir()
    (tmp_path / "real" / "f").write_text("x")
    (tmp_path / "alias").symlink_to(tmp_path / "real")
    assert allowlist.allowed(str(tmp_path / "real" / "f"), [str(tmp_path / "alias" / "f")])


def test_a_tilde_in_a_pattern_is_the_home_folder(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    assert allowlist.allowed(str(tmp_path / "notes" / "a.txt"), ["~/notes/**"])
    assert allowlist.allowed(str(tmp_path / "todo.txt"), ["~/todo.txt"])
    assert not allowlist.allowed("/etc/passwd", ["~/**"])


def test_a_pattern_with_a_wildcard_in_its_first_segment() -> None:
    assert allowlist.allowed("/tmp/x", ["/t*/**"])
    assert not allowlist.allowed("/etc/x", ["/t*/**"])


def test_an_unreadable_path_is_refused_in_words() -> None:
    candidate = next((f"/proc/{pid}/cwd/x" for pid in ("1", str(os.getppid())) if _raises(f"/proc/{pid}/cwd/x")),
                     None)
    if candidate is None:
        pytest.skip("no /proc link here makes realpath raise")
    reader = parse(TOOL.format(perms='{ fs_read: true, fs_read_paths: ["/srv/**"] }'))
    [(param, message)] = allowlist.check(reader, {"src": candidate})
    assert param == "src" and "cannot be resolved to check it against this tool's fs_read_paths" in message


def _raises(path: str) -> bool:
    try:
        os.path.realpath(path)
    except OSError:
        return True
    return False


def test_the_message_says_where_a_symlink_leads(tmp_path: Path) -> None:
    (tmp_path / "door").symlink_to("/etc")
    reader = parse(TOOL.format(perms=f'{{ fs_read: true, fs_read_paths: ["{tmp_path}/safe/**"] }}'))
    [(_, message)] = allowlist.check(reader, {"src": str(tmp_path / "door" / "passwd")})
    assert message == (f"'{tmp_path}/door/passwd' (it resolves to /etc/passwd) is outside this tool's "
                       f"fs_read_paths: {tmp_path}/safe/**")
