"""The OS sandbox (sandbox.py, sandbox.c): every denial and every grant, for real.

Real processes, real mounts and Landlock domains, a real TCP listener on
loopback, a real race: nothing is mocked. The sandbox must be available
here (Linux with Landlock, root or user namespaces, as on CI): the first
test fails loudly, naming the reason, if it is not.
"""

from __future__ import annotations

import asyncio
import ctypes
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import textwrap
from pathlib import Path
from typing import Any
from collections.abc import Callable, Iterator

import pytest

from bitong.agent.calling.executors import Executors, sandbox
from bitong.agent.calling.executors.base import Outcome
from bitong.v1.agent_pb2 import ToolDef
from bitong.parser import parse_file
from tests.fakes.scene import soon

BOX = sandbox.current()
RUN = Executors(sandbox=BOX)
OFF = Executors(sandbox=sandbox.Sandbox("off", False, "the comparison without the sandbox"))
BUNDLED = Path(__file__).parents[4] / "tools"

Tool = Callable[..., ToolDef]


@pytest.fixture
def tool(tmp_path: Path) -> Tool:
    """tool(name, command=, permissions=, constraints=, executor=, handler=, params=) -> a ToolDef on disk."""

    def make(name: str, *, command: str = "", permissions: str = "{}", constraints: str = "{ timeout_ms: 20000 }",
             executor: str = "shell", handler: str | None = None, params: str = "{}") -> ToolDef:
        folder = tmp_path / "tools" / name
        folder.mkdir(parents=True, exist_ok=True)
        lines = [f"name: {name}", "display: t", "intent: a sandbox test tool", "method: run",
                 f"executor: {executor}", f"params_schema: {params}", f"constraints: {constraints}",
                 f"permissions: {permissions}", "author: test-suite", "created: 2026-06-01", "why: tests"]
        if command:
            lines.insert(5, f"command: {command}")
        (folder / "TOOL.hdlp").write_text("\n".join(lines) + "\n", encoding="utf-8")
        if handler is not None:
            (folder / "handler.py").write_text(textwrap.dedent(handler), encoding="utf-8")
        return parse_file(str(folder / "TOOL.hdlp"))

    return make


def call(runners: Executors, tool: ToolDef, params: dict[str, Any] | None = None) -> Outcome:
    return asyncio.run(runners.run(tool, params or {}, deadline=soon(20)))


def sh(script: str) -> str:
    """A command template running ``script`` with /bin/sh (quoted for the template)."""
    return "/bin/sh -c " + json.dumps(script)


def test_the_sandbox_is_on_here() -> None:
    assert BOX.active, f"the OS sandbox is unavailable on this machine: {BOX.reason}"
    assert BOX.landlock_abi >= 1


# ---------------------------------------------------------------- the filesystem


def test_fs_write_false_writes_only_runtime_and_a_private_tmp(tool: Tool, tmp_path: Path) -> None:
    t = tool("ro", command=sh("echo in > here; echo x > /tmp/private && cat /tmp/private; "
                              "echo no > ../TOOL.hdlp; echo no > /etc/bitong-sandbox-test; "
                              f"echo no > {tmp_path}/outside"), permissions="{ exec: true }")
    definition = Path(t.source_path).read_text()
    out = call(RUN, t)
    assert out.sandboxed and out.stdout == b"x\n"
    err = out.stderr.decode()
    assert err.count("Read-only file system") == 2, err       # its definition, /etc
    assert (tmp_path / "tools" / "ro" / "runtime" / "here").read_text() == "in\n"
    assert not (tmp_path / "outside").exists()                  # /tmp is the call's own
    assert not Path("/etc/bitong-sandbox-test").exists()
    assert Path(t.source_path).read_text() == definition


def test_fs_write_paths_are_the_only_writable_host_folders(tool: Tool, tmp_path: Path) -> None:
    allowed, outside = tmp_path / "allowed", Path(tempfile.mkdtemp(dir="/var/tmp"))
    allowed.mkdir()
    try:
        t = tool("rw", command=sh(f"echo yes > {allowed}/f && echo wrote; echo no > {outside}/f"),
                 permissions=f'{{ exec: true, fs_write: true, fs_write_paths: ["{allowed}/**"] }}')
        out = call(RUN, t)
        assert out.stdout == b"wrote\n" and b"Read-only file system" in out.stderr
        assert (allowed / "f").read_text() == "yes\n"
        assert not (outside / "f").exists()
        # without the sandbox the same definition writes anywhere: the OS is what refuses
        assert call(OFF, t).ok and (outside / "f").exists()
    finally:
        shutil.rmtree(outside)


def test_secrets_are_hidden_from_every_tool(tool: Tool) -> None:
    t = tool("peek", command=sh("wc -c < /etc/shadow; wc -c < /etc/gshadow; ls -A /root | tr '\\n' ' '; echo; "
                                "cat /etc/passwd | head -1"),
             permissions="{ exec: true, fs_read: true }")
    out = call(RUN, t)
    shadow, gshadow, root, passwd = out.stdout.decode().split("\n")[:4]
    assert out.ok and (shadow, gshadow) == ("0", "0"), out                   # empty in place of the secrets
    assert root == ""                                                       # /root is an empty folder
    assert passwd.startswith("root:")                                      # the rest of /etc is there


def test_bundled_file_read_cannot_read_etc_shadow_or_the_servers_config(tmp_path: Path) -> None:
    """Even with its allow-list widened to /etc and to the config's folder, the OS says no."""
    conf = tmp_path / "conf"
    conf.mkdir()
    config = conf / "bitong.toml"
    config.write_text("[hlpd-api]\ntoken = 'do-not-show'\n")
    box = sandbox.probe("auto", (str(config),))
    assert box.active
    runners = Executors(sandbox=box)
    folder = tmp_path / "tools" / "file-read"
    shutil.copytree(BUNDLED / "file-read", folder, ignore=shutil.ignore_patterns("runtime", "__pycache__"))
    hdlp = folder / "TOOL.hdlp"
    text = hdlp.read_text(encoding="utf-8").replace('fs_read_paths: ["/srv/**"',
                                                    f'fs_read_paths: ["/etc/**", "{conf}/**", "/srv/**"')
    hdlp.write_text(text, encoding="utf-8")
    wide = parse_file(str(hdlp))
    shadow = call(runners, wide, {"path": "/etc/shadow", "from_line": 1, "limit": 10})
    assert shadow.sandboxed and shadow.ok and json.loads(shadow.stdout)["content"] == ""
    secret = call(runners, wide, {"path": str(config), "from_line": 1, "limit": 10})
    assert secret.ok and b"do-not-show" not in secret.stdout and json.loads(secret.stdout)["content"] == ""
    # the bundled definition as shipped: /etc is not in its list at all
    shipped = parse_file(str(BUNDLED / "file-read" / "TOOL.hdlp"))
    refused = call(runners, shipped, {"path": "/etc/shadow", "from_line": 1, "limit": 10})
    assert not refused.ok and refused.param_errors and refused.param_errors[0][0] == "path"


def test_a_hidden_folder_stays_hidden_under_a_folder_shown_again(tool: Tool, tmp_path: Path) -> None:
    """The server's admin socket folder under /tmp, with a tool that may read /tmp/**: still empty to the tool."""
    shared = tmp_path / "shared"
    admin = shared / "bitong-admin"
    admin.mkdir(parents=True)
    (admin / "admin.sock").write_text("not for tools")
    (shared / "note.txt").write_text("visible")
    box = sandbox.probe("auto", (str(admin),))
    assert box.active
    reader = tool("reader", command=sh(f"cat {shared}/note.txt; ls -A {admin}; echo end"),
                  permissions=f'{{ exec: true, fs_read: true, fs_read_paths: ["{shared}/**"] }}')
    out = call(Executors(sandbox=box), reader)
    assert out.sandboxed and out.ok, out.stderr
    assert out.stdout == b"visibleend\n", out.stderr


def test_fs_read_paths_hide_everything_else(tool: Tool, tmp_path: Path) -> None:
    allowed, elsewhere = tmp_path / "allowed", Path(tempfile.mkdtemp(dir="/var/tmp"))
    allowed.mkdir()
    (allowed / "f").write_text("visible\n")
    (elsewhere / "f").write_text("hidden\n")
    other = tool("other", command="true")
    try:
        t = tool("reader", command=sh(f"cat {allowed}/f; cat {elsewhere}/f; ls {other.source_path}; ls /root; "
                                      "cat /usr/share/common-licenses/GPL-3 | head -1"),
                 permissions=f'{{ exec: true, fs_read: true, fs_read_paths: ["{allowed}/**"] }}')
        out = call(RUN, t)
        assert out.stdout.startswith(b"visible\n") and b"hidden" not in out.stdout
        assert b"GNU GENERAL PUBLIC LICENSE" in out.stdout                 # system folders stay readable
        err = out.stderr.decode()
        assert f"{elsewhere}/f: Permission denied" in err
        assert other.source_path in err                                    # another tool's folder: not there
    finally:
        shutil.rmtree(elsewhere)


# ---------------------------------------------------------------- the symlink swap race


RENAME_EXCHANGE = 2


def _exchange(a: Path, b: Path) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.renameat2(-100, os.fsencode(a), -100, os.fsencode(b), RENAME_EXCHANGE) != 0:
        raise OSError(ctypes.get_errno(), "renameat2")


def test_a_symlink_swapped_in_after_the_check_cannot_lead_outside(tool: Tool, tmp_path: Path) -> None:
    """The issue's race (41 reads outside in 300 calls before): a folder and a symlink to a secret folder
    exchange places inside the allowed folder, as fast as they can, while calls read through the path."""
    allowed, secret = tmp_path / "allowed", Path(tempfile.mkdtemp(dir="/var/tmp"))
    allowed.mkdir()
    (allowed / "d").mkdir()
    (allowed / "d" / "f").write_text("inside\n")
    (secret / "f").write_text("SECRET\n")
    (allowed / "swap").symlink_to(secret)
    t = tool("cat", command="cat {path}", params="{ path: { type: string, normalize: [path] } }",
             permissions=f'{{ fs_read: true, fs_read_paths: ["{allowed}/**"] }}')
    stop = threading.Event()

    def swapper() -> None:
        while not stop.is_set():
            _exchange(allowed / "d", allowed / "swap")

    thread = threading.Thread(target=swapper, daemon=True)
    thread.start()
    seen: dict[str, int] = {"inside": 0, "secret": 0, "denied by the OS": 0, "refused by the allow-list": 0}
    try:
        async def many() -> None:
            for _ in range(150):
                out = await RUN.run(t, {"path": str(allowed / "d" / "f")}, deadline=soon(20))
                if b"SECRET" in out.stdout:
                    seen["secret"] += 1
                elif out.stdout == b"inside\n":
                    seen["inside"] += 1
                elif out.param_errors:
                    seen["refused by the allow-list"] += 1
                else:
                    assert b"Permission denied" in out.stderr, out
                    seen["denied by the OS"] += 1
        asyncio.run(many())
        # the same race without the sandbox, to show that the race is real here (bounded)
        escaped = 0
        for attempt in range(1, 1001):
            if b"SECRET" in call(OFF, t, {"path": str(allowed / "d" / "f")}).stdout:
                escaped = attempt
                break
    finally:
        stop.set()
        thread.join()
        shutil.rmtree(secret)
    assert seen["secret"] == 0, seen
    assert seen["inside"] + seen["denied by the OS"] > 0, seen   # calls did pass the check and reach the file
    assert escaped, "without the sandbox the race never escaped in 1000 calls: the test shows nothing"


# ---------------------------------------------------------------- the network


@pytest.fixture
def listener() -> Iterator[int]:
    """A TCP server on 127.0.0.1 answering 'pong' to each connection; yields its port."""
    server = socket.create_server(("127.0.0.1", 0))
    port = server.getsockname()[1]
    done = threading.Event()

    def serve() -> None:
        server.settimeout(0.2)
        while not done.is_set():
            try:
                conn, _ = server.accept()
            except TimeoutError:
                continue
            with conn:
                conn.sendall(b"pong\n")

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield port
    done.set()
    thread.join()
    server.close()


CONNECT = ("import socket,sys\ntry:\n    s=socket.create_connection(('127.0.0.1',int(sys.argv[1])),timeout=5)\n"
           "    print(s.recv(10).decode().strip())\nexcept OSError as e:\n    print('refused', e.errno)\n")


def test_a_loopback_listener_is_unreachable_without_network_and_reachable_with_it(tool: Tool, tmp_path: Path,
                                                                                  listener: int) -> None:
    script = tmp_path / "tools" / "net-off" / "connect.py"
    script.parent.mkdir(parents=True)
    script.write_text(CONNECT)
    off = tool("net-off", command=f"{sys.executable} {script} {{port}}", params="{ port: { type: integer } }")
    out = call(RUN, off, {"port": listener})
    assert out.sandboxed and out.stdout.startswith(b"refused"), out
    (tmp_path / "tools" / "net-on").mkdir()
    shutil.copy(script, tmp_path / "tools" / "net-on" / "connect.py")
    on = tool("net-on", command=f"{sys.executable} {tmp_path}/tools/net-on/connect.py {{port}}",
              params="{ port: { type: integer } }", permissions="{ network: true }")
    assert call(RUN, on, {"port": listener}).stdout == b"pong\n"


# ---------------------------------------------------------------- exec


def test_exec_false_runs_only_the_templates_program(tool: Tool) -> None:
    t = tool("noexec", command="env /bin/sh -c id")                     # env may run; the shell it starts not
    out = call(RUN, t)
    assert not out.ok and out.exit_code == 126 and b"Permission denied" in out.stderr, out
    assert call(OFF, t).ok                                               # the same definition, unsandboxed
    shell = tool("shell-first", command=sh("echo shell runs; id"))       # a shell as the program: nothing else
    out = call(RUN, shell)
    assert out.stdout == b"shell runs\n" and b"id: Permission denied" in out.stderr
    granted = tool("exec-ok", command=sh("id -un"), permissions="{ exec: true }")
    assert call(RUN, granted).stdout == b"root\n" or call(RUN, granted).ok


def test_a_python_handler_may_not_start_programs_without_exec(tool: Tool) -> None:
    handler = """
        import subprocess
        def run():
            return subprocess.run(["/bin/sh", "-c", "echo ran"], capture_output=True, text=True).stdout
        """
    refused = call(RUN, tool("h-noexec", executor="python", handler=handler))
    assert not refused.ok and "PermissionError" in refused.error and refused.sandboxed
    allowed = call(RUN, tool("h-exec", executor="python", handler=handler, permissions="{ exec: true }"))
    assert allowed.ok and json.loads(allowed.stdout) == "ran\n"


def test_the_bundled_git_ops_works_with_exec_false(tmp_path: Path) -> None:
    repo = Path(tempfile.mkdtemp(dir="/var/tmp"))
    try:
        subprocess.run(["git", "init", "-q", str(repo)], check=True)
        subprocess.run(["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q",
                        "--allow-empty", "-m", "first commit"], check=True)
        git_ops = parse_file(str(BUNDLED / "git-ops" / "TOOL.hdlp"))
        assert not git_ops.permissions.exec
        log = call(RUN, git_ops, {"action": "log", "repo": str(repo), "n": 5})
        assert log.ok and log.sandboxed and b"first commit" in log.stdout, log
        status = call(RUN, git_ops, {"action": "status", "repo": str(repo), "n": 10})
        assert status.ok and status.stdout.startswith(b"## "), status
    finally:
        shutil.rmtree(repo)


# ---------------------------------------------------------------- processes, privileges, limits


def test_a_forked_daemon_is_gone_when_the_call_returns(tool: Tool) -> None:
    token = str(os.getpid() * 1000 + 7)
    t = tool("daemon", command=sh(f"setsid sleep 3{token} </dev/null >/dev/null 2>&1 & echo started"),
             permissions="{ exec: true }")
    out = call(RUN, t)
    assert out.ok and out.stdout == b"started\n"
    leftovers = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                cmdline = Path(f"/proc/{entry}/cmdline").read_bytes()
            except OSError:
                continue
            if f"3{token}".encode() in cmdline:
                leftovers.append(entry)
    assert leftovers == []


def test_proc_shows_only_the_calls_processes_and_no_privileges(tool: Tool) -> None:
    t = tool("proc", command=sh(f"ls /proc | grep -E '^[0-9]+$' | tr '\\n' ' '; echo; "
                                f"cat /proc/{os.getpid()}/environ; grep -E '^(CapEff|CapBnd|NoNewPrivs)' "
                                "/proc/self/status"), permissions="{ exec: true }")
    out = call(RUN, t)
    pids = [int(p) for p in out.stdout.split(b"\n")[0].split()]
    assert pids and max(pids) < 10, out                       # pid 1 (the namespace's init), the shell, its pipe
    assert b"No such file" in out.stderr                     # the server's environ is not there to read
    status = out.stdout.decode()
    assert "CapEff:\t0000000000000000" in status and "CapBnd:\t0000000000000000" in status
    assert "NoNewPrivs:\t1" in status


def test_the_child_environment_holds_no_server_secret(tool: Tool, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BITONG_TEST_TOKEN", "s3cr3t-in-the-server-env")
    out = call(RUN, tool("env", command="env"))
    assert out.ok and b"s3cr3t" not in out.stdout and b"BITONG_TOOL=env" in out.stdout


def test_constraints_limit_memory_and_cpu(tool: Tool) -> None:
    hog = tool("hog", command=f"{sys.executable} -c \"b = bytearray(400 * 1024 * 1024); print('allocated')\"",
               constraints="{ timeout_ms: 20000, max_memory_mb: 200 }")
    out = call(RUN, hog)
    assert not out.ok and b"MemoryError" in out.stderr, out
    spin = tool("spin", command=f"{sys.executable} -c \"while True: pass\"",
                constraints="{ timeout_ms: 20000, cpu_s: 1 }")
    out = call(RUN, spin)
    assert out.signal == 24 and not out.timed_out, out       # SIGXCPU at 1 s of CPU, long before the deadline


def test_max_procs_bounds_a_fork_bomb(tool: Tool, tmp_path: Path) -> None:
    script = "import os, sys\nn = 0\ntry:\n    while n < int(sys.argv[1]):\n        if os.fork() == 0:\n" \
             "            os.pause()\n        n += 1\nexcept OSError as e:\n    print(n, e.strerror)\n"
    for name in ("bomb", "free"):
        (tmp_path / "tools" / name).mkdir(parents=True)
        (tmp_path / "tools" / name / "bomb.py").write_text(script)
    bomb = tool("bomb", command=f"{sys.executable} {tmp_path}/tools/bomb/bomb.py 200",
                constraints="{ timeout_ms: 20000, max_procs: 10 }")
    out = call(RUN, bomb)
    assert out.ok and out.sandboxed, out
    started, _, why = out.stdout.decode().strip().partition(" ")
    assert int(started) == 9 and why == "Resource temporarily unavailable"   # 10 with the bomb itself
    free = tool("free", command=f"{sys.executable} {tmp_path}/tools/free/bomb.py 30")
    assert call(RUN, free).stdout == b""                                      # no limit: all 30 started
    assert not [d for d in os.listdir("/sys/fs/cgroup/pids") if d.startswith(f"bitong-{os.getpid()}-")]


def test_a_writable_folder_holding_the_tool_leaves_its_definition_read_only(tool: Tool, tmp_path: Path) -> None:
    t = tool("inside", command=sh("echo no >> ../TOOL.hdlp; echo yes > ../../../data && echo wrote"),
             permissions=f'{{ exec: true, fs_write: true, fs_write_paths: ["{tmp_path}/**"] }}')
    definition = Path(t.source_path).read_text()
    out = call(RUN, t)
    assert out.stdout == b"wrote\n" and b"Read-only file system" in out.stderr, out
    assert (tmp_path / "data").read_text() == "yes\n" and Path(t.source_path).read_text() == definition


# ---------------------------------------------------------------- secrets


def test_only_a_secret_tool_gets_its_configured_secrets_and_no_tool_reads_a_token_file(
        tool: Tool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from bitong.agent.config import from_dict

    token_file = Path(tempfile.mkdtemp(dir="/var/tmp")) / "registry"
    token_file.write_text("file-s3cr3t\n")
    monkeypatch.setenv("BITONG_TEST_DEPLOY", "env-s3cr3t")
    try:
        config = from_dict({"secrets": {"deploy": {"DEPLOY_TOKEN": {"token_env": "BITONG_TEST_DEPLOY"},
                                                   "REGISTRY": {"token_file": str(token_file)}}}})
        box = sandbox.probe("auto", tuple(config.secret_files()))
        runners = Executors(config, sandbox=box)
        script = sh(f'echo "${{DEPLOY_TOKEN:-none}} ${{REGISTRY:-none}}"; cat {token_file}')
        granted = call(runners, tool("deploy", command=script, permissions="{ exec: true, secret: true }"))
        assert granted.stdout == b"env-s3cr3t file-s3cr3t\n", granted           # the file itself: hidden
        undeclared = call(runners, tool("deploy", command=script, permissions="{ exec: true }"))
        assert undeclared.stdout == b"none none\n"                              # configured, not declared
        other = call(runners, tool("other", command=script, permissions="{ exec: true, secret: true }"))
        assert other.stdout == b"none none\n"                                   # declared, not its secrets
        monkeypatch.delenv("BITONG_TEST_DEPLOY")
        gone = call(runners, tool("deploy", command=script, permissions="{ exec: true, secret: true }"))
        assert not gone.ok and "nothing ran" in gone.error and "BITONG_TEST_DEPLOY" in gone.error
        assert "env-s3cr3t" not in gone.error
    finally:
        shutil.rmtree(token_file.parent)
