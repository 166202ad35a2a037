"""The admin socket's safety checks: what may stand where it is created."""

from __future__ import annotations

import os
import socket
import stat
from pathlib import Path

import pytest

from bitong.agent.serving import admin


def test_a_missing_folder_is_created_owner_only(tmp_path: Path) -> None:
    path = tmp_path / "run" / "bitong" / "admin.sock"
    admin.prepare(str(path))
    assert stat.S_IMODE(os.stat(path.parent).st_mode) == 0o700


def test_a_live_socket_of_another_server_is_never_taken_over(tmp_path: Path) -> None:
    path = tmp_path / "admin.sock"
    with socket.socket(socket.AF_UNIX) as other:
        other.bind(str(path))
        other.listen()
        with pytest.raises(admin.AdminSocketError, match="in use by another running bitong"):
            admin.prepare(str(path))
    assert path.exists()


def test_a_stale_socket_is_replaced_and_a_plain_file_is_refused(tmp_path: Path) -> None:
    stale = tmp_path / "stale.sock"
    with socket.socket(socket.AF_UNIX) as gone:
        gone.bind(str(stale))   # bound, never listening, then closed: what a killed server leaves
    admin.prepare(str(stale))
    assert not stale.exists()
    plain = tmp_path / "plain"
    plain.write_text("data")
    with pytest.raises(admin.AdminSocketError, match="not a socket"):
        admin.prepare(str(plain))
    assert plain.read_text() == "data"


def test_a_folder_others_may_write_to_is_refused(tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    with pytest.raises(admin.AdminSocketError, match="others may write to it"):
        admin.prepare(str(shared / "admin.sock"))
    shared.chmod(0o1777)   # sticky, as /tmp: others cannot remove or replace what is ours
    admin.prepare(str(shared / "admin.sock"))


def test_the_default_path_is_in_the_users_runtime_folder(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_RUNTIME_DIR", "/run/user/1000")
    assert admin.default_path() == "/run/user/1000/bitong/admin.sock"
    monkeypatch.delenv("XDG_RUNTIME_DIR")
    assert admin.default_path() == f"/tmp/bitong-{os.geteuid()}/admin.sock"
