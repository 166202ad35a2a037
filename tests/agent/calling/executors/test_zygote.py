"""Handler calls forked from a zygote: fast, and still one clean process per call.

Real zygotes, real sandbox (where the kernel has one), real processes. A
handler names its zygote by its grandparent's pid (handler -> warden ->
zygote), read through the /proc of its own namespace. Tests that kill a
zygote kill only the one this test's executor started (its launcher's pid).
"""

from __future__ import annotations

import asyncio
import json
import os
import select
import signal
from pathlib import Path
from typing import Any
from collections.abc import Callable

import pytest

from bitong.agent.config import Config, PythonSettings, Secret
from bitong.agent.calling.executors import Executors
from bitong.agent.calling.executors.handler import PythonExecutor
from bitong.agent.calling.executors.sandbox import Sandbox
from bitong.v1.agent_pb2 import ToolDef
from tests.fakes.scene import soon

Define = Callable[..., ToolDef]

ZYGOTE_OF = """
def zygote():
    with open(f"/proc/{os.getppid()}/stat") as fh:
        return int(fh.read().rsplit(")", 1)[1].split()[1])
"""


def py(define: Define, body: str, *, name: str = "zyg", **options: Any) -> ToolDef:
    return define(name, executor="python", method="run", handler=body, **options)


def executor(runners: Executors) -> PythonExecutor:
    ex = runners.get("python")
    assert isinstance(ex, PythonExecutor) and ex.zygotes is not None, "this kernel runs no zygote"
    return ex


def gone(pid: int, within: float = 10.0) -> bool:
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        return True
    try:
        return bool(select.select([fd], [], [], within)[0])
    finally:
        os.close(fd)


async def test_calls_are_forked_from_one_zygote_and_never_share_a_global(define: Define) -> None:
    runners = Executors()
    tool = py(define, "import os, json\n" + ZYGOTE_OF + """
def run():
    seen = getattr(json, "bitong_marker", None)
    json.bitong_marker = os.getpid()          # a global of a module the zygote imported
    return {"seen": seen, "zygote": zygote(), "pid": os.getpid()}
""")
    first = json.loads((await runners.run(tool, {}, deadline=soon())).stdout)
    second = json.loads((await runners.run(tool, {}, deadline=soon())).stdout)
    assert first["zygote"] == second["zygote"] and first["pid"] != second["pid"]
    assert first["seen"] is None and second["seen"] is None


async def test_a_changed_handler_is_picked_up_at_the_next_call(define: Define) -> None:
    runners = Executors()
    tool = py(define, "import os\n" + ZYGOTE_OF + "def run():\n    return ['old', zygote()]\n")
    old = json.loads((await runners.run(tool, {}, deadline=soon())).stdout)
    Path(tool.source_path).with_name("handler.py").write_text(
        "import os\n" + ZYGOTE_OF + "def run():\n    return ['new', zygote()]\n")
    new = json.loads((await runners.run(tool, {}, deadline=soon())).stdout)
    assert old[0] == "old" and new[0] == "new" and old[1] == new[1]   # the same zygote read the new file


async def test_a_crash_is_that_call_alone(define: Define) -> None:
    runners = Executors()
    tool = py(define, """
import os, signal
def run(crash: bool):
    if crash:
        os.kill(os.getpid(), signal.SIGSEGV)
    return "fine"
""", params="{ crash: { type: boolean } }")
    crashed, fine = await asyncio.gather(runners.run(tool, {"crash": True}, deadline=soon()),
                                         runners.run(tool, {"crash": False}, deadline=soon()))
    assert not crashed.ok and crashed.signal == signal.SIGSEGV and crashed.error == "killed by signal 11 (SIGSEGV)"
    assert fine.ok and fine.stdout == b'"fine"'
    again = await runners.run(tool, {"crash": False}, deadline=soon())
    assert again.ok and again.stdout == b'"fine"'


async def test_a_dead_zygote_is_started_again_and_the_call_runs(define: Define) -> None:
    runners = Executors()
    tool = py(define, "import os\n" + ZYGOTE_OF + "def run():\n    return zygote()\n")
    assert (await runners.run(tool, {}, deadline=soon())).ok
    zygotes = executor(runners).zygotes
    assert zygotes is not None
    [launcher] = [z.proc.pid for z in zygotes._ready.values()]
    os.kill(launcher, signal.SIGTERM)     # the launcher this executor started: its namespace goes with it
    assert gone(launcher)
    out = await runners.run(tool, {}, deadline=soon())
    assert out.ok and out.attempts == 1, out.error
    assert [z.proc.pid for z in zygotes._ready.values()] != [launcher]


async def test_a_zygote_idle_for_a_while_exits_and_the_next_call_starts_another(define: Define) -> None:
    runners = Executors(Config(python=PythonSettings(zygote_idle_s=0.2)))
    tool = py(define, "def run():\n    return 1\n")
    assert (await runners.run(tool, {}, deadline=soon())).ok
    zygotes = executor(runners).zygotes
    assert zygotes is not None
    [launcher] = [z.proc.pid for z in zygotes._ready.values()]
    assert gone(launcher)                 # it exited by itself
    assert (await runners.run(tool, {}, deadline=soon())).stdout == b"1"


async def test_a_changed_secret_is_a_new_zygote(define: Define, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BITONG_TEST_ZYGOTE_SECRET", "first")
    secrets = {"zyg": {"TOKEN": Secret("env", "BITONG_TEST_ZYGOTE_SECRET")}}
    runners = Executors(Config(tool_secrets=secrets))
    tool = py(define, "import os\ndef run():\n    return os.environ['TOKEN']\n", extra="permissions: { secret: true }")
    assert (await runners.run(tool, {}, deadline=soon())).stdout == b'"first"'
    monkeypatch.setenv("BITONG_TEST_ZYGOTE_SECRET", "second")
    assert (await runners.run(tool, {}, deadline=soon())).stdout == b'"second"'
    zygotes = executor(runners).zygotes
    assert zygotes is not None and len(zygotes._ready) == 1   # the first one was retired


async def test_at_most_limit_zygotes_are_kept(define: Define) -> None:
    runners = Executors(Config(python=PythonSettings(zygotes=2)))
    for n in range(3):
        assert (await runners.run(py(define, f"def run():\n    return {n}\n", name=f"z{n}"), {},
                                  deadline=soon())).stdout == str(n).encode()
    zygotes = executor(runners).zygotes
    assert zygotes is not None and len(zygotes._ready) == 2


async def test_a_call_cannot_signal_its_zygote(define: Define) -> None:
    runners = Executors()
    sandbox = executor(runners).sandbox
    if not sandbox.active or sandbox.landlock_abi < 6:
        pytest.skip("signal scopes need the sandbox and Landlock ABI 6")
    tool = py(define, "import os, signal\n" + ZYGOTE_OF + """
def run():
    for pid in (zygote(), os.getppid()):
        try:
            os.kill(pid, signal.SIGKILL)
        except PermissionError:
            continue
        return f"killed {pid}"
    return "refused"
""")
    out = await runners.run(tool, {}, deadline=soon())
    assert out.ok and out.stdout == b'"refused"', out.stdout
    assert (await runners.run(tool, {}, deadline=soon())).ok


async def test_without_the_zygote_setting_each_call_is_a_fresh_interpreter(define: Define) -> None:
    runners = Executors(Config(python=PythonSettings(zygote=False)),
                        sandbox=Sandbox("off", False, "the test reads the worker's own command line"))
    tool = py(define, "import sys\ndef run():\n    return sys.argv[0]\n")
    out = await runners.run(tool, {}, deadline=soon())
    assert out.ok and json.loads(out.stdout).endswith("handler_worker.py")
    assert isinstance(runners.get("python"), PythonExecutor) and executor_or_none(runners) is None


def executor_or_none(runners: Executors) -> object:
    ex = runners.get("python")
    assert isinstance(ex, PythonExecutor)
    return ex.zygotes


async def test_what_an_ended_call_left_is_killed_and_a_running_call_keeps_its_own(define: Define,
                                                                                  tmp_path: Path) -> None:
    """Two calls of one zygote: A daemonizes a helper and returns; B's helper, daemonized before, lives on
    until B ends (then the zygote kills it too)."""
    runners = Executors(sandbox=Sandbox("off", False, "the test reads host pids through the host's /proc"))
    said, go = tmp_path / "said", tmp_path / "go"
    os.mkfifo(said)
    os.mkfifo(go)
    tool = py(define, f"""
import os
def run(role: str):
    if role == "b":   # a helper daemonized too, while b runs: it stays beneath b (a subreaper) meanwhile
        r, w = os.pipe()
        if os.fork() == 0:
            os.setsid()
            if os.fork() == 0:
                os.write(w, str(os.getpid()).encode())
                os.execvp("sleep", ["sleep", "300"])
            os._exit(0)
        os.wait()
        os.close(w)
        helper = int(os.read(r, 32))
        with open({str(said)!r}, "w") as fh:
            fh.write("b")
        with open({str(go)!r}) as fh:
            fh.read()
        pid, _ = os.waitpid(helper, os.WNOHANG)   # 0: alive, and b's to wait for
        return pid == 0
    if os.fork() == 0:
        os.setsid()
        if os.fork() == 0:
            with open({str(said)!r}, "w") as fh:
                fh.write(os.readlink("/proc/self"))
            os.execvp("sleep", ["sleep", "300"])
        os._exit(0)
    os.wait()
    with open({str(said)!r}) as fh:
        return int(fh.read())
""", params="{ role: { type: string } }", extra="permissions: { exec: true }")
    b = asyncio.create_task(runners.run(tool, {"role": "b"}, deadline=soon(30)))
    assert await asyncio.wait_for(asyncio.to_thread(said.read_text), 20) == "b"
    a = await runners.run(tool, {"role": "a"}, deadline=soon(20))
    assert a.ok, (a.error, a.stderr)
    daemon = json.loads(a.stdout)
    try:
        assert gone(daemon, within=0), f"call a's daemon {daemon} outlived its call"
    finally:
        if not gone(daemon, within=0):
            os.kill(daemon, signal.SIGKILL)
    await asyncio.to_thread(go.write_text, "go")
    out = await b
    assert out.ok and out.stdout == b"true", (out.error, out.stderr)


def _descendant(pid: int, depth: int) -> int:
    for _ in range(depth):
        with open(f"/proc/{pid}/task/{pid}/children") as fh:
            (pid,) = (int(p) for p in fh.read().split())
    return pid


async def test_a_call_sent_to_a_zygote_that_dies_before_it_starts_runs_on_a_new_one(define: Define) -> None:
    runners = Executors()
    tool = py(define, "import os\n" + ZYGOTE_OF + "def run():\n    return zygote()\n")
    assert (await runners.run(tool, {}, deadline=soon())).ok
    zygotes = executor(runners).zygotes
    assert zygotes is not None
    [launcher] = [z.proc.pid for z in zygotes._ready.values()]
    interpreter = _descendant(launcher, 2)          # _reaper -> its pid 1 -> the zygote, started by this test
    os.kill(interpreter, signal.SIGSTOP)             # the next call's message waits in its socket...
    call = asyncio.create_task(runners.run(tool, {}, deadline=soon()))
    while not call.done() and not [z for z in zygotes._ready.values() if z.inflight]:
        await asyncio.sleep(0)                       # the call hands its message over before its first wait
    os.kill(interpreter, signal.SIGKILL)             # ...and the zygote dies with it queued: nothing ran
    out = await call
    assert out.ok and out.attempts == 1, (out.error, out.stderr)
    assert [z.proc.pid for z in zygotes._ready.values()] != [launcher]
