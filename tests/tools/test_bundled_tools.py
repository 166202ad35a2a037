"""The bundled tools on their executors, through a real sidecar: file-read, file-write, file-stats,
scheduled-reminder (python handlers) and http-request (http), with normalization in Chinese and English.

Files are made under /tmp, which the shipped allow-lists cover (pytest's
tmp_path may live elsewhere on a CI machine).
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from datetime import datetime
from pathlib import Path
from typing import Any
from collections.abc import Iterator

import pytest
from google.protobuf import struct_pb2

from bitong.v1 import agent_pb2 as pb
from tests.fakes.server import FakeServer, Reply
from tests.support import approve

REPO = Path(__file__).resolve().parents[2]


def request(tool: str, **params: Any) -> pb.CallRequest:
    struct = struct_pb2.Struct()
    struct.update(params)
    return pb.CallRequest(tool=tool, params=struct)


async def call(stub: Any, tool: str, **params: Any) -> pb.CallResult:
    return await stub.Call(request(tool, **params))


@pytest.fixture
def scratch() -> Iterator[Path]:
    """A folder under /tmp (inside the bundled tools' allow-lists)."""
    path = Path(tempfile.mkdtemp(prefix="bitong-tools-", dir="/tmp"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def load_handler(tools_root: Path, name: str) -> Any:
    """A bundled handler imported here, to call it directly as seed 002 §3.4's smoke test does."""
    spec = importlib.util.spec_from_file_location(f"handler_{name.replace('-', '_')}", tools_root / name / "handler.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# ---------------------------------------------------------------- the set


def test_every_bundled_tool_passes_lint_and_ships(tools_root: Path) -> None:
    lint = subprocess.run([sys.executable, "-m", "bitong", "lint", str(REPO / "tools")], capture_output=True, text=True)
    assert lint.returncode == 0, lint.stdout
    assert lint.stderr.strip().endswith(" checked, 0 with errors")
    for name in ("file-read", "file-write", "file-stats", "scheduled-reminder"):
        assert (REPO / "tools" / name / "handler.py").is_file()


# ---------------------------------------------------------------- file-read


async def test_file_read_returns_lines_as_json(stub: Any, scratch: Path) -> None:
    target = scratch / "notes.txt"
    target.write_text("".join(f"第{i}行\n" for i in range(1, 11)), encoding="utf-8")
    result = await call(stub, "file-read", path=f"  {target}  ", from_line="3", limit=2)
    assert result.ok and result.executor == "python"
    data = json.loads(result.output)
    assert data["content"] == "第3行\n第4行\n" and (data["from_line"], data["to_line"], data["eof"]) == (3, 4, False)


async def test_file_read_refuses_a_path_outside_its_list_before_running(stub: Any) -> None:
    result = await call(stub, "file-read", path="/proc/self/environ")
    assert not result.ok and result.exit_code == 0 and result.stderr == b"" and result.output == b""
    [problem] = result.param_errors
    assert problem.param == "path"
    assert problem.message.startswith("'/proc/self/environ'") and "outside this tool's fs_read_paths: /srv/**" in \
        problem.message
    assert result.error == "path outside the tool's allow-list: path; nothing ran"


async def test_file_read_refuses_a_symlink_that_leads_out(stub: Any, scratch: Path) -> None:
    (scratch / "door").symlink_to("/proc/self")
    result = await call(stub, "file-read", path=str(scratch / "door" / "environ"))
    assert not result.ok and "resolves to /proc/" in result.param_errors[0].message


def test_the_handlers_check_the_list_themselves(tools_root: Path, scratch: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    read = load_handler(tools_root, "file-read").read_file
    monkeypatch.delenv("BITONG_FS_READ_PATHS", raising=False)
    with pytest.raises(PermissionError, match="no allow-list was given"):
        read(str(scratch / "x"))
    monkeypatch.setenv("BITONG_FS_READ_PATHS", json.dumps(["/srv/**"]))
    monkeypatch.setenv("BITONG_FS_WRITE_PATHS", "[]")
    with pytest.raises(PermissionError, match=r"path: '/etc/hostname' is outside this tool's fs_read_paths: /srv/\*\*"):
        read("/etc/hostname")
    write = load_handler(tools_root, "file-write").write_file
    monkeypatch.setenv("BITONG_FS_WRITE_PATHS", json.dumps([f"{scratch}/**"]))
    with pytest.raises(PermissionError, match="outside this tool's fs_write_paths"):
        write("/tmp/elsewhere.txt", "x")
    assert write(str(scratch / "ok.txt"), "fine")["bytes_written"] == 4


# ---------------------------------------------------------------- file-write


async def test_file_write_overwrites_atomically_and_appends(stub: Any, scratch: Path) -> None:
    target = scratch / "app.conf"
    target.write_text("old")
    target.chmod(0o640)
    inode = target.stat().st_ino
    done = await call(stub, "file-write", path=str(target), content="新内容\n")
    assert done.ok and json.loads(done.output)["bytes_written"] == len("新内容\n".encode())
    assert target.read_text() == "新内容\n" and target.stat().st_ino != inode     # a new file renamed into place
    assert target.stat().st_mode & 0o777 == 0o640                                  # that kept the permission bits
    assert (await call(stub, "file-write", path=str(target), content="more", mode=" Append ")).ok
    assert target.read_text() == "新内容\nmore"
    assert sorted(p.name for p in scratch.iterdir()) == ["app.conf"]                # no temp file left behind


async def test_file_write_outside_its_list_writes_nothing(stub: Any) -> None:
    result = await call(stub, "file-write", path="/etc/bitong-should-not-exist", content="x")
    assert not result.ok and result.param_errors[0].param == "path"
    assert "fs_write_paths: /tmp/**, /srv/app/**" in result.param_errors[0].message
    assert not os.path.exists("/etc/bitong-should-not-exist")


# ---------------------------------------------------------------- file-stats and normalization


@pytest.fixture
def tree(scratch: Path) -> Path:
    old = time.time() - 200 * 86400
    files = (("a.csv", 100, None), ("b.csv", 50, old), ("sub/c.csv", 1000, old), ("sub/d.csv", 1, None))
    for rel, size, mtime in files:
        path = scratch / rel
        path.parent.mkdir(exist_ok=True)
        path.write_bytes(b"x" * size)
        if mtime:
            os.utime(path, (mtime, mtime))
    return scratch


@pytest.mark.parametrize("said, recursive", [("是", True), ("否", False), ("yes", True), ("no", False),
                                             ("true", True), ("0", False), (True, True)])
async def test_file_stats_booleans_in_chinese_and_english(stub: Any, tree: Path, said: Any, recursive: bool) -> None:
    result = await call(stub, "file-stats", path=str(tree), recursive=said)
    assert result.ok, result.error
    data = json.loads(result.output)
    assert data["recursive"] is recursive
    assert (data["file_count"], data["total_bytes"]) == ((4, 1151) if recursive else (2, 150))


@pytest.mark.parametrize("said, days, files", [("三个月", 90, 2), ("两周", 14, 2), ("10 days", 10, 2),
                                               ("一年", 365, 0), ("P30D", 30, 2)])
async def test_file_stats_not_modified_days_in_chinese_and_english(stub: Any, tree: Path, said: str, days: int,
                                                                   files: int) -> None:
    result = await call(stub, "file-stats", path=str(tree), recursive=True, not_modified_days=said)
    data = json.loads(result.output)
    assert result.ok and data["not_modified_days"] == days and data["file_count"] == files


async def test_what_cannot_be_normalized_asks_for_a_new_extraction(stub: Any, tree: Path) -> None:
    result = await call(stub, "file-stats", path=str(tree), recursive="也许", not_modified_days="a while")
    assert not result.ok and result.output == b""
    problems = {p.param: p.message for p in result.param_errors}
    assert problems["recursive"].startswith("expected true or false (also accepted: yes/no, 1/0, 是/否)")
    assert problems["not_modified_days"].startswith(
        "expected a duration in days, e.g. 10, \"10 days\", \"两周\", \"三个月\"")


async def test_file_stats_on_a_file_is_a_handler_error(stub: Any, tree: Path) -> None:
    result = await call(stub, "file-stats", path=str(tree / "a.csv"))
    assert not result.ok and result.exit_code == 1
    assert result.error == f"handler raised NotADirectoryError: not a directory: {tree / 'a.csv'}"
    assert b"Traceback" in result.stderr


# ---------------------------------------------------------------- scheduled-reminder


def minutes_between(data: dict[str, Any], created: datetime) -> float:
    return (datetime.fromisoformat(data["due_at"]) - created).total_seconds() / 60


@pytest.mark.parametrize("said, minutes", [("二十分钟", 20), ("20 min", 20), ("1.5h", 90), ("半小时", 30),
                                           ("一个半小时", 90), ("in 45 minutes", 45)])
async def test_reminder_delays_in_chinese_and_english(stub: Any, said: str, minutes: int) -> None:
    before = datetime.now().astimezone().replace(microsecond=0)
    result = await call(stub, "scheduled-reminder", content="检查服务器", delay_minutes=said)
    assert result.ok, result.error
    data = json.loads(result.output)
    assert data["status"] == "scheduled" and data["content"] == "检查服务器"
    assert minutes <= minutes_between(data, before) <= minutes + 1


async def test_reminder_check_due_hands_out_each_due_reminder_once(stub: Any, tools_root: Path) -> None:
    now = await call(stub, "scheduled-reminder", content="现在", delay_minutes=0)
    later = await call(stub, "scheduled-reminder", content="以后", delay_minutes="两个小时")
    assert now.ok and later.ok
    first = json.loads((await call(stub, "scheduled-reminder", action="check_due")).output)
    assert [t["content"] for t in first["due"]] == ["现在"] and first["pending"] == 1
    again = json.loads((await call(stub, "scheduled-reminder", action="check_due")).output)
    assert again["due"] == [] and again["pending"] == 1
    store = json.loads((tools_root / "scheduled-reminder" / "runtime" / "reminder_store.json").read_text())
    assert [(t["content"], t["done"]) for t in store] == [("现在", True), ("以后", False)]


async def test_reminder_mistakes_are_answered(stub: Any) -> None:
    no_content = await call(stub, "scheduled-reminder", delay_minutes=5)
    assert not no_content.ok and no_content.error == ("handler raised ValueError: content is required to schedule a "
                                                      "reminder (what should it say?)")
    bad_delay = await call(stub, "scheduled-reminder", content="x", delay_minutes="过一会儿")
    assert [p.param for p in bad_delay.param_errors] == ["delay_minutes"]
    assert "e.g. 20, \"20 min\", \"1.5h\", \"二十分钟\", \"半小时\"" in bad_delay.param_errors[0].message
    wrong_action = await call(stub, "scheduled-reminder", action="check-due")
    assert "expected one of \"schedule\", \"check_due\"" in wrong_action.param_errors[0].message


async def test_reminder_store_is_never_seen_half_written(stub: Any, tools_root: Path) -> None:
    store = tools_root / "scheduled-reminder" / "runtime" / "reminder_store.json"
    assert (await call(stub, "scheduled-reminder", content="seed", delay_minutes=60)).ok
    stop = threading.Event()
    torn: list[str] = []
    reads = {"n": 0}

    def reader() -> None:
        while not stop.is_set():
            try:
                json.loads(store.read_bytes())
                reads["n"] += 1
            except FileNotFoundError:
                torn.append("missing")
            except ValueError as exc:
                torn.append(str(exc))

    watcher = threading.Thread(target=reader, daemon=True)
    watcher.start()
    results = await asyncio.gather(*(call(stub, "scheduled-reminder", content=f"任务{i}", delay_minutes=i)
                                     for i in range(16)))
    stop.set()
    watcher.join()
    assert all(r.ok for r in results)
    assert torn == [] and reads["n"] > 0
    assert len(json.loads(store.read_text())) == 17      # the lock: no concurrent update was lost


def test_reminder_store_survives_a_crash_mid_write(tools_root: Path, tmp_path: Path) -> None:
    runtime = tmp_path / "runtime"
    runtime.mkdir()
    (runtime / "reminder_store.json").write_text('[{"id": "old", "done": false}]')
    fifo = tmp_path / "in-fsync"
    os.mkfifo(fifo)
    # The writer is killed while its new store is written but not yet renamed into place.
    script = f"""
import os, sys
sys.path.insert(0, {str(tools_root / 'scheduled-reminder')!r})
import handler
def stuck(fd):
    open({str(fifo)!r}, "w").close()
    os.kill(os.getpid(), 19)   # SIGSTOP: frozen mid-write until the test kills it
handler.os.fsync = stuck
handler._save([{{"id": "new-" + str(i), "done": False}} for i in range(100000)])
"""
    proc = subprocess.Popen([sys.executable, "-c", script], cwd=runtime)
    reached = threading.Event()
    threading.Thread(target=lambda: (fifo.read_text(), reached.set()), daemon=True).start()
    try:
        end = time.monotonic() + 20
        while not reached.wait(0.05) and proc.poll() is None and time.monotonic() < end:
            pass
        if not reached.is_set():
            os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))   # let the waiting thread go
            pytest.fail("the store was written without fsyncing a temporary file first")
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert json.loads((runtime / "reminder_store.json").read_text()) == [{"id": "old", "done": False}]


# ---------------------------------------------------------------- http-request


async def test_http_request_runs_on_the_http_executor(stub: Any, sidecar: Any, tools_root: Path) -> None:
    """As shipped it reaches no loopback address; a copy listing 127.0.0.1 in network_hosts does."""
    approve(sidecar, "http-local")   # network is sensitive
    text = (tools_root / "http-request" / "TOOL.hdlp").read_text(encoding="utf-8")
    local = tools_root / "http-local"
    local.mkdir()
    (local / "TOOL.hdlp").write_text(text.replace("name: http-request", "name: http-local").replace(
        "permissions: { network: true }", "permissions: { network: true, network_hosts: [127.0.0.1] }"),
        encoding="utf-8")
    with FakeServer() as web:
        web.route("GET", r"/status", lambda ex: Reply(200, {"up": True}))
        web.route("POST", r"/jobs", lambda ex: Reply(409, {"error": "already running", "sent": ex.request.json()}))
        shipped = await call(stub, "http-request", url=f"{web.url}/status")
        assert not shipped.ok and "loopback or link-local" in shipped.error and "nothing was sent" in shipped.error
        assert web.requests == []
        for _ in range(200):   # the copy is picked up by the watcher
            if (await call(stub, "http-local", url=f"{web.url}/status")).found:
                break
            await asyncio.sleep(0.05)
        up = await call(stub, "http-local", url=f" {web.url}/status ")
        assert up.ok and up.executor == "http" and up.http_status == 200
        assert json.loads(up.output) == {"up": True} and up.stderr.startswith(b"HTTP/1.1 200 OK")
        busy = await call(stub, "http-local", url=f"{web.url}/jobs", method="post", body='{"job": 1}',
                          headers={"Content-Type": "application/json"})
        assert not busy.ok and busy.http_status == 409 and busy.error == "HTTP 409 Conflict"
        assert json.loads(busy.output) == {"error": "already running", "sent": {"job": 1}}
