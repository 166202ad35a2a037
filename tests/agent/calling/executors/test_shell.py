"""The shell executor, with real processes on the default loop and on uvloop.

Each test runs its coroutine under both loops (the ``run`` fixture) and the
group-kill tests under both exit watchers (pidfd and the waiting thread).
Nothing sleeps for correctness: tests wait on a FIFO the child writes, on the
sink, or on a pidfd of the process they expect gone.

A tool runs in a PID namespace of its own (reaper.py), so its ``$$`` and
``$!`` are that namespace's pids; a tool tells the test its host pid with
``read p _ < /proc/self/stat`` (``read`` is a builtin, so /proc/self is the
shell itself, and /proc is still the host's). Tests that look for processes
the tool left find them by a unique numeric token in their argv.

These tests run the executor without the OS sandbox (``--sandbox off``):
they read host pids through the host's /proc and share files between tool
folders, which the sandbox forbids on purpose. test_sandbox.py runs the
same kinds of calls in the sandbox and proves what it refuses and allows.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import select
import shlex
import sys
import time
from pathlib import Path
from typing import Any, TypeVar
from collections.abc import Callable, Coroutine

import itertools
import signal
import subprocess

import pytest
import uvloop

from bitong.agent.calling import executors
from bitong.agent.calling.executors import reaper
from bitong.agent.calling.executors.base import STDERR, STDOUT, Outcome
from bitong.agent.calling.executors.reaper import Containment
from bitong.agent.calling.executors.sandbox import Sandbox
from bitong.agent.calling.executors.shell import ShellExecutor, check_command, render_argv
from bitong.v1.agent_pb2 import ToolDef
from bitong.parser import parse

T = TypeVar("T")
Runner = Callable[[Coroutine[Any, Any, T]], T]

TEMPLATE = """\
name: {name}
display: T
intent: a tool to test the shell executor
method: run
executor: shell
command: {command}
params_schema: {params}
constraints: {{ timeout_ms: {timeout_ms}, max_output_bytes: {cap} }}
author: test-suite
created: 2026-01-01
why: tests
"""
ARGV_JSON = f"{sys.executable} -c 'import json,sys; print(json.dumps(sys.argv[1:]))'"


@pytest.fixture(params=["asyncio", "uvloop"])
def run(request: pytest.FixtureRequest) -> Runner[Any]:
    """Run a coroutine to completion on a fresh loop of the requested kind."""
    if request.param == "uvloop":
        return uvloop.run  # type: ignore[return-value]
    return asyncio.run


@pytest.fixture(params=["pidfd", "thread"])
def shell(request: pytest.FixtureRequest) -> ShellExecutor:
    return ShellExecutor(use_pidfd=request.param == "pidfd", sandbox=UNSANDBOXED)


UNSANDBOXED = Sandbox("off", False, "test_shell.py reads host pids through the host's /proc")
SHELL = ShellExecutor(sandbox=UNSANDBOXED)
MakeTool = Callable[..., ToolDef]


@pytest.fixture
def make_tool(tmp_path: Path) -> MakeTool:
    """make_tool(command, params="{}", timeout_ms=30000, cap=65536) -> a parsed ToolDef in tmp_path/t/."""

    def make(command: str, params: str = "{}", *, timeout_ms: int = 30000, cap: int = 65536,
             name: str = "t") -> ToolDef:
        path = tmp_path / name / "TOOL.hdlp"
        path.parent.mkdir(exist_ok=True)
        text = TEMPLATE.format(name=name, command=command, params=params, timeout_ms=timeout_ms, cap=cap)
        path.write_text(text, encoding="utf-8")
        return parse(text, str(path))

    return make


def soon(seconds: float = 30.0) -> float:
    return time.monotonic() + seconds


def gone(pid: int, within: float = 10.0) -> bool:
    """Whether process ``pid`` has exited (or is already reaped), waiting on its pidfd."""
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        return True
    try:
        readable, _, _ = select.select([fd], [], [], within)
        return bool(readable)
    finally:
        os.close(fd)


HOST_PID = "read p _ < /proc/self/stat; echo $p"
"""sh: print this shell's own pid as the host sees it (inside the namespace ``$$`` is the namespace's)."""
SLEEPER = "{ read q _ < /proc/self/stat; echo $q; exec sleep 300; } &"
"""sh: start a background ``sleep 300`` that first prints its host pid (the subshell's, kept by exec)."""

_tokens = itertools.count()


def new_token() -> str:
    """A number no other process's argv holds: this test process's pid, a counter, the time."""
    return f"{os.getpid()}{next(_tokens):03d}{time.monotonic_ns() % 10**6:06d}"


def holding(token: str, exclude: tuple[int, ...] = ()) -> list[int]:
    """The live (non-zombie) processes whose argv contains ``token``."""
    needle = token.encode()
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) in exclude:
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as fh:
                if needle in fh.read():   # a zombie's cmdline is empty
                    found.append(int(entry))
        except OSError:
            continue
    return found


def wait_for(predicate: Callable[[], bool], within: float) -> bool:
    """Poll a condition about /proc (the kernel has no event for "a process holding X appeared") with a bound."""
    end = time.monotonic() + within
    while time.monotonic() < end:
        if predicate():
            return True
        time.sleep(0.01)
    return predicate()


def alive_holding(pid: int, token: str) -> bool:
    """Whether ``pid`` is still a live process with ``token`` in its argv (not a reused pid, not a zombie)."""
    return pid in holding(token) if os.path.exists(f"/proc/{pid}") else False


async def read_fifo(path: Path) -> str:
    """Block (in a thread) until the child opened, wrote and closed the FIFO."""
    loop = asyncio.get_running_loop()
    return await asyncio.wait_for(loop.run_in_executor(None, path.read_text), 20)


# ---------------------------------------------------------------- results


def test_echo_hello(run: Runner[Outcome], shell: ShellExecutor, make_tool: MakeTool) -> None:
    out = run(shell.run(make_tool("echo hello"), {}, deadline=soon()))
    assert out.ok and out.stdout == b"hello\n" and out.stderr == b""
    assert out.exit_code == 0 and out.signal == 0 and not out.timed_out and not out.truncated
    assert out.error == ""


def test_failure_returns_real_stderr_and_exit_code(run: Runner[Outcome], shell: ShellExecutor,
                                                   make_tool: MakeTool) -> None:
    out = run(shell.run(make_tool("ls /definitely/not/here"), {}, deadline=soon()))
    assert not out.ok and out.exit_code == 2 and out.error == "exit status 2"
    assert b"/definitely/not/here" in out.stderr and b"No such file" in out.stderr
    out = run(shell.run(make_tool("sh -c 'echo partial; echo boom >&2; exit 3'"), {}, deadline=soon()))
    assert (out.ok, out.exit_code, out.stdout, out.stderr) == (False, 3, b"partial\n", b"boom\n")


def test_killed_by_a_signal(run: Runner[Outcome], make_tool: MakeTool) -> None:
    out = run(SHELL.run(make_tool("sh -c 'kill -TERM $$'"), {}, deadline=soon()))
    assert not out.ok and out.exit_code == -15 and out.signal == 15
    assert "SIGTERM" in out.error and not out.timed_out


def test_program_not_found_is_a_result_not_an_exception(run: Runner[Outcome], make_tool: MakeTool) -> None:
    tool = make_tool("no-such-program-bitong {a}", "{ a: { type: string } }")
    out = run(SHELL.run(tool, {"a": "x"}, deadline=soon()))
    assert not out.ok and out.exit_code == 127
    assert "no-such-program-bitong" in out.error and "No such file or directory" in out.error


def test_program_not_executable_is_126(run: Runner[Outcome], make_tool: MakeTool, tmp_path: Path) -> None:
    script = tmp_path / "not-executable.sh"
    script.write_text("#!/bin/sh\necho hi\n")
    out = run(SHELL.run(make_tool(str(script)), {}, deadline=soon()))
    assert not out.ok and out.exit_code == 126 and "Permission denied" in out.error


# ---------------------------------------------------------------- argv, never a shell


def test_injection_attempts_land_as_one_literal_argument(run: Runner[Outcome], make_tool: MakeTool) -> None:
    tool = make_tool(f"{ARGV_JSON} {{a}} --b={{b}} {{c}}",
                     "{ a: { type: string }, b: { type: string }, c: { type: string } }")
    nasty = {"a": "x; rm -rf ./victim; touch pwned", "b": "$(touch pwned) `touch pwned` {c}", "c": "a  b\n*  '\"|&"}
    victim = Path(tool.source_path).parent / "runtime" / "victim"
    victim.parent.mkdir()
    victim.write_text("still here")
    out = run(SHELL.run(tool, nasty, deadline=soon()))
    assert out.ok, out
    assert json.loads(out.stdout) == [nasty["a"], "--b=" + nasty["b"], nasty["c"]]
    assert victim.read_text() == "still here"
    assert not (victim.parent / "pwned").exists()


def test_rendering_rules(make_tool: MakeTool) -> None:
    tool = make_tool("prog --n={n} -x {x} {flag} {opt} '{{literal}}' {items} {obj} 'two words {n}'",
                     "{ n: { type: integer }, x: { type: number }, flag: { type: boolean }, opt: { type: string },"
                     " items: { type: array }, obj: { type: object } }")
    argv = render_argv(tool, {"n": 20, "x": 20.0, "flag": True, "items": ["a", 1], "obj": {"k": "中"}})
    # An absent optional parameter drops its whole token ({opt}); numbers print as 20, not 20.0.
    assert argv == ["prog", "--n=20", "-x", "20", "true", "{literal}", '["a",1]', '{"k":"中"}', "two words 20"]
    assert render_argv(tool, {"x": 1.5, "flag": False}) == ["prog", "-x", "1.5", "false", "{literal}"]


def test_template_problems_are_reported_not_raised(run: Runner[Outcome], make_tool: MakeTool) -> None:
    # The parser refuses both at load time; a ToolDef built another way still gets an answer.
    tool = make_tool("echo {a}", "{ a: { type: string } }")
    tool.command = "echo {missing} {a}"
    assert check_command(tool) == ["command names {missing}, which is not in params_schema"]
    out = run(SHELL.run(tool, {"a": "x"}, deadline=soon()))
    assert not out.ok and out.exit_code == 126 and "tool definition" in out.error and "{missing}" in out.error
    tool.command = "echo 'unclosed {a}"
    assert "No closing quotation" in check_command(tool)[0]
    out = run(SHELL.run(tool, {"a": "x"}, deadline=soon()))
    assert not out.ok and out.exit_code == 126 and "cannot be split" in out.error


def test_placeholder_rule_matches_the_parser(make_tool: MakeTool) -> None:
    # The parser checks {names} at load time; the executor must see the same ones.
    from bitong.parser.build import placeholders

    tool = make_tool("echo {a} '{ b }' {{c}} {d {} {{{a}}} x{b}y", "{ a: { type: string }, b: { type: string } }")
    assert sorted({name for name, _ in placeholders(tool.command)}) == ["a", "b"]
    assert check_command(tool) == []
    assert render_argv(tool, {"a": "A", "b": "B"}) == ["echo", "A", "B", "{c}", "{d", "{}", "{A}", "xBy"]


def test_nul_in_an_argument_is_refused(run: Runner[Outcome], make_tool: MakeTool) -> None:
    out = run(SHELL.run(make_tool("echo {a}", "{ a: { type: string } }"), {"a": "a\x00b"}, deadline=soon()))
    assert not out.ok and out.exit_code == 126 and "null byte" in out.error


# ---------------------------------------------------------------- where and with what it runs


def test_cwd_is_the_tools_runtime_folder(run: Runner[Outcome], make_tool: MakeTool) -> None:
    tool = make_tool("sh -c 'pwd; echo data > scratch.txt'")
    runtime = Path(tool.source_path).parent / "runtime"
    assert not runtime.exists()
    out = run(SHELL.run(tool, {}, deadline=soon()))
    assert out.ok and out.stdout.decode().strip() == os.path.realpath(runtime)
    assert (runtime / "scratch.txt").read_text() == "data\n"


def test_env_holds_no_server_secret(run: Runner[Outcome], make_tool: MakeTool,
                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BITONG_TEST_SECRET_TOKEN", "hunter2-secret-value")
    out = run(SHELL.run(make_tool("env"), {}, deadline=soon()))
    assert out.ok
    env = dict(line.split("=", 1) for line in out.stdout.decode().splitlines() if "=" in line)
    assert "BITONG_TEST_SECRET_TOKEN" not in env and b"hunter2" not in out.stdout
    assert env["PATH"] and env["BITONG_TOOL"] == "t" and "LANG" in env
    assert set(env) <= {"PATH", "HOME", "USER", "LOGNAME", "LANG", "LANGUAGE", "LC_ALL", "LC_CTYPE", "LC_MESSAGES",
                        "TZ", "TMPDIR", "BITONG_TOOL", "BITONG_TOOL_DIR", "PWD", "SHLVL", "_"}


# ---------------------------------------------------------------- deadline, cancellation, leftovers


def test_timeout_kills_the_group_and_keeps_output_so_far(run: Runner[Outcome], shell: ShellExecutor,
                                                         make_tool: MakeTool) -> None:
    tool = make_tool(f"sh -c '{HOST_PID}; {SLEEPER} echo warming up >&2; wait'")
    started = time.monotonic()
    out = run(shell.run(tool, {}, deadline=started + 0.5))
    assert out.timed_out and not out.ok
    assert out.exit_code == -9 and out.signal == 9
    # The budget is counted from the executor's own start, a hair after the test's (a new loop in between).
    assert re.search(r"timed out after (49\d|500) ms", out.error), out.error
    assert out.stderr == b"warming up\n"
    leader, grandchild = map(int, out.stdout.split())
    assert gone(grandchild) and gone(leader)


def test_cancellation_kills_the_group(run: Runner[None], shell: ShellExecutor, make_tool: MakeTool) -> None:
    tool = make_tool("sh -c 'read p _ < /proc/self/stat; "
                     "{ read q _ < /proc/self/stat; echo $p $q > ready; exec sleep 300; } & wait'")
    ready = Path(tool.source_path).parent / "runtime" / "ready"
    ready.parent.mkdir()
    os.mkfifo(ready)

    async def main() -> None:
        task = asyncio.create_task(shell.run(tool, {}, deadline=soon()))
        leader, grandchild = map(int, (await read_fifo(ready)).split())
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert gone(leader, within=0)   # the executor waited for it before re-raising
        assert gone(grandchild)

    run(main())


def test_leftover_background_processes_do_not_hold_the_call(run: Runner[Outcome], shell: ShellExecutor,
                                                            make_tool: MakeTool) -> None:
    # The background sleep keeps stdout open; the call still ends when the tool's
    # first process exits, and the leftover is killed with its group.
    # The leader exits as soon as the sleeper said its pid (through a FIFO, not stdout).
    tool = make_tool("sh -c 'mkfifo said; { read q _ < /proc/self/stat; echo $q > said; exec sleep 300; } & "
                     "read q < said; echo $q'")
    out = run(shell.run(tool, {}, deadline=soon()))
    assert out.ok and not out.timed_out
    assert gone(int(out.stdout))


def test_a_deadline_already_past_runs_nothing(run: Runner[Outcome], make_tool: MakeTool) -> None:
    tool = make_tool("touch ran")
    out = run(SHELL.run(tool, {}, deadline=time.monotonic() - 1))
    assert out.timed_out and not out.ok
    assert not (Path(tool.source_path).parent / "runtime" / "ran").exists()


# ---------------------------------------------------------------- output caps and streaming


def test_truncation_keeps_the_cap_and_the_child_exits(run: Runner[Outcome], make_tool: MakeTool) -> None:
    tool = make_tool("sh -c 'head -c 50000000 /dev/zero; head -c 30000000 /dev/zero >&2; echo done >&2'", cap=1000)
    out = run(SHELL.run(tool, {}, deadline=soon(60)))
    assert out.ok and out.exit_code == 0 and not out.timed_out
    assert out.truncated
    assert out.stdout == b"\0" * 1000 and out.stderr == b"\0" * 1000


def test_output_under_the_cap_is_not_truncated(run: Runner[Outcome], make_tool: MakeTool) -> None:
    out = run(SHELL.run(make_tool("head -c 1000 /dev/zero", cap=1000), {}, deadline=soon()))
    assert out.ok and not out.truncated and len(out.stdout) == 1000


def test_streaming_delivers_chunks_in_order(run: Runner[Outcome], make_tool: MakeTool) -> None:
    lines = 200_000
    code = ("import sys\nfor i in range(%d):\n    sys.stdout.write(f'{i}\\n')\n    "
            "if i %% 5000 == 0: sys.stderr.write(f'e{i}\\n'); sys.stderr.flush()" % lines)
    script = Path(make_tool("true").source_path).parent / "emit.py"
    script.write_text(code)
    tool = make_tool(f"{sys.executable} {script}", cap=100, name="s")
    chunks: list[tuple[int, bytes]] = []

    async def sink(stream: int, data: bytes) -> None:
        chunks.append((stream, data))

    out = run(SHELL.run(tool, {}, deadline=soon(60), sink=sink))
    assert out.ok, out
    stdout = b"".join(d for s, d in chunks if s == STDOUT)
    stderr = b"".join(d for s, d in chunks if s == STDERR)
    assert stdout == "".join(f"{i}\n" for i in range(lines)).encode()   # nothing capped when streaming
    assert stderr == "".join(f"e{i}\n" for i in range(0, lines, 5000)).encode()
    assert out.streamed_stdout_bytes == len(stdout) and out.streamed_stderr_bytes == len(stderr)
    assert out.stdout == b"" and not out.truncated


def test_a_streamed_stdout_gets_a_larger_pipe(run: Runner[Outcome], make_tool: MakeTool) -> None:
    """StreamCall reads bigger chunks from a 1 MiB pipe (fewer gRPC messages); a Call keeps the default."""
    tool = make_tool(f"{sys.executable} -c 'import fcntl; print(fcntl.fcntl(1, fcntl.F_GETPIPE_SZ))'")
    chunks: list[bytes] = []

    async def sink(stream: int, data: bytes) -> None:
        chunks.append(data)

    streamed = run(SHELL.run(tool, {}, deadline=soon(), sink=sink))
    called = run(SHELL.run(tool, {}, deadline=soon()))
    assert streamed.ok and called.ok
    with open("/proc/sys/fs/pipe-max-size") as f:
        most = int(f.read())
    grown = most >= 1 << 20 or os.geteuid() == 0   # past pipe-max-size only root may go
    assert b"".join(chunks) == f"{1 << 20 if grown else 65536}\n".encode()
    assert called.stdout == b"65536\n"


def _read_so_far() -> Callable[[], int]:
    """Bytes this thread has read so far (/proc/thread-self/io rchar), minus the reads of the probe itself."""
    fd = os.open("/proc/thread-self/io", os.O_RDONLY)
    own = 0

    def probe() -> int:
        nonlocal own
        text = os.pread(fd, 4096, 0)
        own += len(text)
        rchar = int(text.split(b"rchar:")[1].split()[0])
        return rchar - own

    return probe


def test_a_slow_sink_applies_backpressure(run: Runner[Outcome], make_tool: MakeTool) -> None:
    total = 50_000_000
    tool = make_tool(f"head -c {total} /dev/zero")
    state = {"delivered": 0, "max_pending": 0, "calls": 0}

    async def main() -> Outcome:
        read = _read_so_far()   # the loop thread's reads: the executor reads the pipes there
        base = read()

        async def slow_sink(stream: int, data: bytes) -> None:
            # Everything read from the pipe and not yet taken by the sink is buffered in the server.
            pending = read() - base - state["delivered"]
            state["max_pending"] = max(state["max_pending"], pending)
            state["calls"] += 1
            # Slow: give the loop many turns per chunk. A reader without flow control would use
            # them to read ahead and pile the child's output up in memory.
            for _ in range(20):
                await asyncio.sleep(0)
            state["delivered"] += len(data)

        return await SHELL.run(tool, {}, deadline=soon(120), sink=slow_sink)

    out = run(main())
    assert out.ok and out.streamed_stdout_bytes == total == state["delivered"]
    # At most one chunk in flight per pipe (reads are 256 KiB at most), not megabytes.
    assert state["max_pending"] <= 512 * 1024, state
    assert state["calls"] > 50


def test_a_failing_sink_propagates_and_kills_the_group(run: Runner[None], make_tool: MakeTool) -> None:
    tool = make_tool(f"sh -c '{SLEEPER} wait'")

    class ClientGone(Exception):
        pass

    seen: list[bytes] = []

    async def sink(stream: int, data: bytes) -> None:
        seen.append(data)
        raise ClientGone

    async def main() -> None:
        with pytest.raises(ClientGone):
            await SHELL.run(tool, {}, deadline=soon(), sink=sink)

    run(main())
    assert gone(int(seen[0]))


# ---------------------------------------------------------------- daemons, and the server's death

DAEMON = """\
#!/bin/sh
# daemon.sh FIFO TOKEN: say my host pid through FIFO, then sleep with TOKEN in my argv
read p _ < /proc/self/stat
echo "$p" > "$1"
exec sleep "300.$2"
"""
DOUBLE_FORK = """\
import os, sys
# the classic daemon: fork, setsid, fork again, the middle one exits
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        os.execvp("sh", ["sh", *sys.argv[1:]])
    os._exit(0)
os.wait()
"""
# Each variant gets $0 = daemon.sh, $1 = a FIFO, $2 = the token; it starts the daemon, which says its pid
# through the FIFO; the tool prints that pid and exits. "open" variants keep the call's stdout open.
DAEMONS = {
    "setsid, stdout closed": 'setsid sh "$0" "$1" "$2" > /dev/null 2>&1 &',
    "setsid, stdout open": 'setsid sh "$0" "$1" "$2" &',
    "setsid --fork, stdout open": 'setsid --fork sh "$0" "$1" "$2"',
    "double fork with setsid, stdout open": f'{sys.executable} "${{0%.sh}}.py" "$0" "$1" "$2"',
    "nohup": 'nohup sh "$0" "$1" "$2" > /dev/null 2>&1 &',
    "disown, stdout open": 'bash -c \'sh "$0" "$1" "$2" & disown\' "$0" "$1" "$2"',
    "own process group, stdout open": 'bash -c \'set -m; sh "$0" "$1" "$2" &\' "$0" "$1" "$2"',
}


@pytest.mark.parametrize("variant", list(DAEMONS))
def test_no_daemon_outlives_its_call(run: Runner[Outcome], shell: ShellExecutor, make_tool: MakeTool,
                                     tmp_path: Path, variant: str) -> None:
    """Issue 5: a tool that daemonizes (setsid and forks) escaped the group kill, and one that kept stdout
    open held the call until its deadline. Now each is gone when the call returns, and the call is prompt."""
    assert shell.containment.namespaced, shell.containment.reason
    script = tmp_path / "daemon.sh"
    script.write_text(DAEMON)
    script.with_suffix(".py").write_text(DOUBLE_FORK)
    fifo = tmp_path / "said"
    os.mkfifo(fifo)
    token = new_token()
    start = DAEMONS[variant]
    command = start + ("" if start.endswith("&") else ";") + ' read p < "$1"; echo "$p"'
    tool = make_tool(f"sh -c {shlex.quote(command)} {script} {fifo} {token}", timeout_ms=20000)
    started = time.monotonic()
    try:
        out = run(shell.run(tool, {}, deadline=soon(20)))
        took = time.monotonic() - started
        assert out.ok and not out.timed_out, (out.error, out.stderr)
        assert took < 10, f"the call waited {took:.1f} s for a daemon's stdout"
        daemon = int(out.stdout)
        assert not alive_holding(daemon, token), f"{variant}: pid {daemon} outlived its call"
        assert holding(token) == []
    finally:
        kill_holding(token)


def kill_holding(token: str) -> None:
    """Clean up after a failure: SIGKILL only processes marked with this test's own token."""
    for pid in holding(token, (os.getpid(),)):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def test_an_exec_failure_inside_the_namespace_reads_as_before(run: Runner[Outcome], make_tool: MakeTool,
                                                              tmp_path: Path) -> None:
    """The program is exec'd by _reaper's child, not by Popen: its errno still becomes 127/126 in words."""
    missing = run(SHELL.run(make_tool("no-such-program-here --x"), {}, deadline=soon()))
    assert missing.exit_code == 127 and "program not found: 'no-such-program-here'" in missing.error
    script = tmp_path / "noexec.sh"
    script.write_text("#!/bin/sh\necho hi\n")
    denied = run(SHELL.run(make_tool(str(script)), {}, deadline=soon()))
    assert denied.exit_code == 126 and "cannot start" in denied.error and "Permission denied" in denied.error
    assert denied.stderr == b"" and missing.stderr == b""


def test_tools_see_their_own_namespace(run: Runner[Outcome], make_tool: MakeTool) -> None:
    """The tool is pid 2 (pid 1 is _reaper's init), so a tool's own signals to itself work as before."""
    out = run(SHELL.run(make_tool("sh -c 'echo $$ $PPID'"), {}, deadline=soon()))
    assert out.stdout == b"2 1\n"
    code = run(SHELL.run(make_tool("sh -c 'exit 42'"), {}, deadline=soon()))
    assert code.exit_code == 42 and code.error == "exit status 42"


def test_the_fallback_is_the_process_group_and_says_why(run: Runner[Outcome], make_tool: MakeTool,
                                                        monkeypatch: pytest.MonkeyPatch,
                                                        caplog: pytest.LogCaptureFixture) -> None:
    """Where the kernel refuses a namespace (here: chosen by BITONG_CONTAINMENT=group), a warning says so
    and the process group is still killed at the deadline."""
    monkeypatch.setenv(reaper.ENV, "group")
    reaper.containment.cache_clear()
    try:
        with caplog.at_level("WARNING", logger="bitong.executors"):
            box = reaper.containment()
    finally:
        reaper.containment.cache_clear()
    assert box == Containment("group", f"{reaper.ENV}=group")
    assert "process group only" in caplog.text and "setsid" in caplog.text
    grouped = ShellExecutor(containment=box, sandbox=UNSANDBOXED)
    out = run(grouped.run(make_tool(f"sh -c '{HOST_PID}; {SLEEPER} wait'"), {}, deadline=time.monotonic() + 0.5))
    assert out.timed_out and "the process group was killed" in out.error
    leader, sleeper = map(int, out.stdout.split())
    assert gone(sleeper) and gone(leader)
    assert run(grouped.run(make_tool("echo $$"), {}, deadline=soon())).stdout == b"$$\n"


def test_the_probe_says_what_the_kernel_allows() -> None:
    assert reaper.containment().mode in ("pid", "user+pid"), reaper.containment().reason
    done = subprocess.run([reaper.REAPER, "--probe"], capture_output=True, text=True, timeout=10)
    assert done.returncode == 0 and done.stdout.strip() == reaper.containment().mode


SERVER_KILLED_CMD = ("setsid sh -c 'exec sleep 300.{t}' & sleep 300.{t} & "
                     "sh -c 'exec sleep 300.{t}' > /dev/null & echo started; exec sleep 300.{t}")


def test_tools_die_with_a_server_killed_by_sigkill(tools_root: Path, tmp_path: Path) -> None:
    """Issue 5: SIGKILL of the server orphaned every tool in flight. Now _reaper dies with it (PDEATHSIG),
    and its namespace, daemons included, with _reaper."""
    sock = tmp_path / "bitong.sock"
    token = new_token()
    server = subprocess.Popen([sys.executable, "-m", "bitong", "serve", "--tools", str(tools_root),
                               "--listen", f"unix:{sock}"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    client: subprocess.Popen[str] | None = None
    try:
        assert server.stdout is not None
        assert server.stdout.readline().startswith("bitong: serving on unix:")
        client = subprocess.Popen([sys.executable, "-m", "bitong", "call", "--server", f"unix:{sock}", "shell-exec",
                                   "cmd=" + SERVER_KILLED_CMD.format(t=token)],
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        mine = (client.pid,)
        # the setsid'd daemon, the background sleeper, the quiet one, the tool itself (and _reaper)
        assert wait_for(lambda: len(holding(token, mine)) >= 4, within=20), holding(token, mine)
        server.send_signal(signal.SIGKILL)
        server.wait(timeout=10)
        assert wait_for(lambda: holding(token, mine) == [], within=10), \
            f"tool processes outlived the server: {holding(token, mine)}"
    finally:
        if server.poll() is None:
            server.kill()
        server.communicate()  # waits, and closes the pipes (no ResourceWarning)
        if client is not None:
            client.kill()
            client.communicate()
        kill_holding(token)


# ---------------------------------------------------------------- the registry


def test_registry_runs_every_executor_the_format_names() -> None:
    # Issue 4 ships every executor, so none is "not available in this build" any more.
    assert isinstance(executors.get("shell"), ShellExecutor)
    assert executors.available() == tuple(sorted(executors.KNOWN))
    with pytest.raises(executors.ExecutorUnavailable, match="unknown executor 'ftp'"):
        executors.get("ftp")
    for name in executors.__all__:
        assert hasattr(executors, name), name


# ---------------------------------------------------------------- argument hygiene (issue 9 §3)


def test_a_value_that_would_be_an_option_is_refused_and_nothing_runs(run: Runner[Outcome], make_tool: MakeTool,
                                                                     tmp_path: Path) -> None:
    """The issue's case: ``git -C {repo} show --stat {rev}`` with ``rev=--output=FILE`` wrote FILE."""
    subprocess.run(["git", "init", "-q", str(tmp_path / "repo")], check=True)
    subprocess.run(["git", "-C", str(tmp_path / "repo"), "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q",
                    "--allow-empty", "-m", "one"], check=True)
    tool = make_tool("git -C {repo} show --stat {rev}",
                     "{ repo: { type: string, normalize: [path] }, rev: { type: string } }")
    target = tmp_path / "written"
    out = run(SHELL.run(tool, {"repo": str(tmp_path / "repo"), "rev": f"--output={target}"}, deadline=soon()))
    assert not out.ok and out.error == "a value would be read as an option: rev; nothing ran"
    [(param, message)] = out.param_errors
    assert param == "rev" and "would be read as an option" in message and "allow_option: true" in message
    assert not target.exists()
    fine = run(SHELL.run(tool, {"repo": str(tmp_path / "repo"), "rev": "HEAD"}, deadline=soon()))
    assert fine.ok and b"one" in fine.stdout


@pytest.mark.parametrize(("command", "params", "value"), [
    (f"{ARGV_JSON} {{v}}", "{ v: { type: string, allow_option: true } }", "-n"),     # the parameter allows it
    (f"{ARGV_JSON} -- {{v}}", "{ v: { type: string } }", "-n"),                       # after the end of options
    (f"{ARGV_JSON} --limit={{v}}", "{ v: { type: integer } }", -5),                   # inside a word: the option's value
    (f"{ARGV_JSON} x{{v}}", "{ v: { type: string } }", "-n"),                         # not at the start of a word
])
def test_a_dash_value_runs_where_it_cannot_be_an_option(run: Runner[Outcome], make_tool: MakeTool, command: str,
                                                        params: str, value: object) -> None:
    out = run(SHELL.run(make_tool(command, params), {"v": value}, deadline=soon()))
    assert out.ok and out.param_errors == (), out
    assert str(value) in json.loads(out.stdout)[-1]


def test_a_negative_number_alone_is_an_option_too(run: Runner[Outcome], make_tool: MakeTool) -> None:
    out = run(SHELL.run(make_tool(f"{ARGV_JSON} {{n}}", "{ n: { type: integer } }"), {"n": -5}, deadline=soon()))
    assert not out.ok and [p for p, _ in out.param_errors] == ["n"] and out.stdout == b""
