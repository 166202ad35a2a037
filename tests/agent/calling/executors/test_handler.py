"""The python executor: a tool folder's handler.py, called in a fresh worker process.

Real processes throughout. Tests that need a handler to be "in the middle
of something" make it wait on a FIFO the test writes, never on a sleep.
A worker runs in its own PID namespace, so ``os.getpid()`` there is that
namespace's; a handler tells the test its host pid as ``/proc/self`` names it,
which only the unsandboxed runner shows (the sandbox mounts a /proc of the
call's own namespace: test_sandbox.py proves the same containment there).
A handler that starts a program declares ``exec: true``: a handler's own
program is its interpreter, and ``exec: false`` lets nothing else run.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import select
import threading
from pathlib import Path
from typing import Any
from collections.abc import Callable

import pytest
import uvloop

from bitong.agent.calling.executors import Executors
from bitong.agent.calling.executors.base import STDERR, STDOUT
from bitong.agent.calling.executors.sandbox import Sandbox
from bitong.v1.agent_pb2 import ToolDef
from tests.fakes.scene import soon

Define = Callable[..., ToolDef]
RUN = Executors()
HOST_PROC = Executors(sandbox=Sandbox("off", False, "these tests read host pids through the host's /proc"))
EXEC = "permissions: { exec: true }"


def py(define: Define, body: str, *, params: str = "{}", method: str = "run", **options: Any) -> ToolDef:
    return define("pyt", executor="python", method=method, params=params, handler=body, **options)


def runtime_of(tool: ToolDef) -> Path:
    return Path(tool.source_path).parent / "runtime"


def gone(pid: int, within: float = 10.0) -> bool:
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        return True
    try:
        return bool(select.select([fd], [], [], within)[0])
    finally:
        os.close(fd)


async def read_fifo(path: Path) -> str:
    return await asyncio.wait_for(asyncio.to_thread(path.read_text), 20)


# ---------------------------------------------------------------- results


async def test_run_gets_the_params_by_name_and_its_return_value_is_the_output(define: Define) -> None:
    tool = py(define, """
        import os
        def run(name: str, count: int = 2, loud: bool = False):
            return {"greeting": ("你好, " + name) * count, "loud": loud, "cwd": os.getcwd(),
                    "pid": os.getpid(), "tool_dir": os.environ["BITONG_TOOL_DIR"]}
        """, params="{ name: { type: string }, count: { type: integer }, loud: { type: boolean } }")
    out = await RUN.run(tool, {"name": "铸渊", "loud": True}, deadline=soon())
    assert out.ok and out.exit_code == 0 and out.error == "" and out.stderr == b""
    data = json.loads(out.stdout)
    assert data["greeting"] == "你好, 铸渊你好, 铸渊"   # count's own default applied: it was absent
    assert data["loud"] is True
    assert data["cwd"] == os.path.realpath(runtime_of(tool))   # seed 002 §4.3: the tool's own runtime/
    assert data["tool_dir"] == str(Path(tool.source_path).parent)
    assert data["pid"] != os.getpid()                          # never inside the server
    assert '"你好' in out.stdout.decode("utf-8")                # UTF-8, not \\u escapes


async def test_the_function_is_the_one_method_names_and_may_be_async(define: Define) -> None:
    tool = py(define, """
        import asyncio
        def run():
            return "wrong one"
        async def check_due():
            await asyncio.sleep(0)
            return ["due"]
        """, method="check_due")
    out = await RUN.run(tool, {}, deadline=soon())
    assert out.ok and json.loads(out.stdout) == ["due"]


async def test_a_handler_that_raises_answers_its_traceback(define: Define) -> None:
    tool = py(define, """
        def helper(n):
            return 10 / n
        def run(n: int):
            print("about to divide")
            return helper(n)
        """, params="{ n: { type: integer } }")
    out = await RUN.run(tool, {"n": 0}, deadline=soon())
    assert not out.ok and out.exit_code == 1 and not out.timed_out
    assert out.error == "handler raised ZeroDivisionError: division by zero"
    text = out.stderr.decode()
    assert text.startswith("about to divide\n")                 # what it printed, in order, then the traceback
    assert "Traceback (most recent call last)" in text and "in helper" in text and "return 10 / n" in text
    assert out.stdout == b""


async def test_prints_go_to_stderr_and_never_corrupt_the_output(define: Define) -> None:
    tool = py(define, """
        import subprocess, sys
        def run():
            print("chatty")
            subprocess.run(["echo", "from a child"])
            sys.stdout.write("more\\n")
            return [1, 2]
        """, extra=EXEC)
    out = await RUN.run(tool, {}, deadline=soon())
    assert out.ok and out.stdout == b"[1, 2]"
    assert out.stderr == b"chatty\nfrom a child\nmore\n"


@pytest.mark.parametrize("body, method, params, expect", [
    ("def run():\n    return 1\n", "other", {}, "handler.py has no function named 'other' (the tool's method); "
                                               "it defines: run"),
    ("def run(a):\n    return a\n", "run", {"a": 1, "b": 2}, "run() does not take b (it takes: a)"),
    ("def run(a, b):\n    return a\n", "run", {"a": 1}, "run() needs b, which the call did not give"),
    ("def run(:\n", "run", {}, "handler.py could not be loaded: SyntaxError"),
    ("import no_such_module_bitong\n", "run", {}, "handler.py could not be loaded: ModuleNotFoundError"),
])
async def test_a_handler_that_cannot_be_called_says_why(define: Define, body: str, method: str,
                                                        params: dict[str, Any], expect: str) -> None:
    schema = "{ " + ", ".join(f"{k}: {{ type: integer }}" for k in params) + " }" if params else "{}"
    out = await RUN.run(py(define, body, method=method, params=schema), params, deadline=soon())
    assert not out.ok and out.exit_code == 2
    assert expect in out.error


async def test_a_return_value_that_is_not_json_is_refused(define: Define) -> None:
    out = await RUN.run(py(define, "def run():\n    return {1, 2}\n"), {}, deadline=soon())
    assert not out.ok and out.exit_code == 3
    assert out.error == "handler returned a value that is not JSON: Object of type set is not JSON serializable"


async def test_without_handler_py_nothing_runs(define: Define) -> None:
    tool = define("nohandler", executor="python", method="run")
    out = await RUN.run(tool, {}, deadline=soon())
    assert not out.ok and out.exit_code == 126 and "there is no handler.py in" in out.error


async def test_the_worker_sees_no_server_secret(define: Define, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BITONG_TEST_SECRET_TOKEN", "hunter2-secret-value")
    tool = py(define, "import os\ndef run():\n    return dict(os.environ)\n",
              extra="permissions: { fs_read: true, fs_read_paths: [\"/tmp/**\"] }\n")
    env = json.loads((await RUN.run(tool, {}, deadline=soon())).stdout)
    assert "BITONG_TEST_SECRET_TOKEN" not in env
    assert json.loads(env["BITONG_FS_READ_PATHS"]) == ["/tmp/**"] and json.loads(env["BITONG_FS_WRITE_PATHS"]) == []


# ---------------------------------------------------------------- deadline, cancellation, size, streams


async def test_the_deadline_kills_the_worker_and_what_it_started(define: Define) -> None:
    tool = py(define, """
        import subprocess, sys, time
        def run():
            child = subprocess.Popen(["sh", "-c", "read p _ < /proc/self/stat; echo $p >&2; exec sleep 300"])
            time.sleep(300)
        """, timeout_ms=1500)
    out = await HOST_PROC.run(tool, {}, deadline=soon(1.5))
    assert out.timed_out and not out.ok and out.signal == 9
    assert re.search(r"timed out after (149\d|1500) ms", out.error), out.error
    assert gone(int(out.stderr.split()[0]))


async def test_cancellation_kills_the_worker(define: Define) -> None:
    tool = py(define, """
        import os, time
        def run():
            with open("ready", "w") as fh:
                fh.write(os.readlink("/proc/self"))
            time.sleep(300)
        """, extra=EXEC)
    runtime_of(tool).mkdir()
    os.mkfifo(runtime_of(tool) / "ready")
    task = asyncio.create_task(HOST_PROC.run(tool, {}, deadline=soon()))
    pid = int(await read_fifo(runtime_of(tool) / "ready"))
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert gone(pid, within=0)


async def test_a_daemon_the_handler_starts_is_gone_when_the_call_returns(define: Define, tmp_path: Path) -> None:
    """Issue 5: a handler that daemonizes a helper (double fork, setsid) left it running after the call."""
    said = tmp_path / "said"
    os.mkfifo(said)
    tool = py(define, f"""
        import os
        def run():
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
        """, extra=EXEC)
    out = await HOST_PROC.run(tool, {}, deadline=soon(20))
    assert out.ok, (out.error, out.stderr)
    daemon = json.loads(out.stdout)
    try:
        assert gone(daemon, within=0), f"the handler's daemon {daemon} outlived the call"
    finally:
        if not gone(daemon, within=0):
            os.kill(daemon, 9)


async def test_output_is_cut_at_max_output_bytes(define: Define) -> None:
    out = await RUN.run(py(define, "def run():\n    return 'x' * 1_000_000\n", cap=1000), {}, deadline=soon())
    assert out.ok and out.truncated and out.stdout == b'"' + b"x" * 999


async def test_streaming_sends_what_the_handler_prints_as_it_prints_it(define: Define) -> None:
    tool = py(define, """
        import sys
        def run():
            print("step 1", flush=True)
            with open("go") as fh:      # blocks until the test saw step 1
                fh.read()
            print("step 2", flush=True)
            return {"done": True}
        """)
    runtime_of(tool).mkdir()
    fifo = runtime_of(tool) / "go"
    os.mkfifo(fifo)
    got: list[tuple[int, bytes]] = []

    def release() -> None:
        fifo.write_text("go")

    async def sink(stream: int, data: bytes) -> None:
        got.append((stream, data))
        if b"step 1" in data:
            threading.Thread(target=release, daemon=True).start()

    out = await RUN.run(tool, {}, deadline=soon(), sink=sink)
    assert out.ok, out.error
    assert b"".join(d for s, d in got if s == STDERR) == b"step 1\nstep 2\n"
    assert b"".join(d for s, d in got if s == STDOUT) == b'{"done": true}'
    assert out.streamed_stdout_bytes == len(b'{"done": true}') and out.stdout == b""


async def test_a_streamed_failure_still_names_the_exception(define: Define) -> None:
    async def sink(stream: int, data: bytes) -> None:
        pass

    out = await RUN.run(py(define, "def run():\n    raise KeyError('gone')\n"), {}, deadline=soon(), sink=sink)
    assert not out.ok and out.error == "handler raised KeyError: 'gone'"


async def test_a_failing_handler_is_never_retried(define: Define) -> None:
    tool = py(define, """
        def run():
            with open("runs", "a") as fh:
                fh.write("x")
            raise ConnectionRefusedError("the handler's own failure")
        """, retry=3)
    out = await RUN.run(tool, {}, deadline=soon())
    assert not out.ok and out.attempts == 1
    assert (runtime_of(tool) / "runs").read_text() == "x"     # a process that failed may have done its work


def test_it_runs_the_same_on_uvloop(define: Define) -> None:
    tool = py(define, "def run(a: int):\n    return a * 2\n", params="{ a: { type: integer } }")
    out = uvloop.run(RUN.run(tool, {"a": 21}, deadline=soon()))
    assert out.ok and out.stdout == b"42"
