"""agent.allowlist: fs_read_paths / fs_write_paths globs, matched against where a path really is."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from agent import allowlist
from parser import parse


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
