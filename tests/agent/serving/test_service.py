"""The service's limits and failure answers, through a real sidecar on a real unix socket;
and, at the end, the service itself (ToolAgent) without gRPC.

Issue parts 3, 4 and 6: no request may stall the event loop or grow without
bound, every failure of a call is a ``CallResult`` in words (never
``UNKNOWN``), and nothing a caller sends can forge a log line.
"""

from __future__ import annotations

import asyncio
import logging
import os
import random
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from collections.abc import AsyncIterator, Awaitable, Callable

import grpc
import pytest
from google.protobuf import struct_pb2

from bitong.v1 import agent_pb2 as pb
from bitong.v1 import agent_pb2_grpc as pb_grpc
from bitong.agent.calling.confirm import ConfirmBook
from bitong.agent.matching.index import SUGGESTION
from bitong.agent.registry.snapshot import Registry
from bitong.agent.serving.server import Sidecar
from bitong.agent.serving.service import (
    DEFAULT_TOP_K,
    MAX_TOP_K,
    Admission,
    LimitExceeded,
    Limits,
    ToolAgent,
    log_text,
)
from tests.support import tool_text, writes_to

WriteTool = Callable[..., Path]


def request(tool: str, **params: object) -> pb.CallRequest:
    struct = struct_pb2.Struct()
    struct.update(params)
    return pb.CallRequest(tool=tool, params=struct)


async def until(predicate: Callable[[], Awaitable[bool] | bool], within: float) -> bool:
    """Wait for a condition driven by the server, up to ``within`` seconds."""
    end = time.monotonic() + within
    while time.monotonic() < end:
        got = predicate()
        if await got if asyncio.iscoroutine(got) else got:
            return True
        await asyncio.sleep(0.01)
    got = predicate()
    return bool(await got if asyncio.iscoroutine(got) else got)


async def started(tools_root: Path, tmp_path: Path, limits: Limits) -> Sidecar:
    car = Sidecar([str(tools_root)], f"unix:{tmp_path}/limits.sock", poll_s=0.1, grace_s=1, limits=limits)
    await car.start()
    return car


@pytest.fixture
async def limited(tools_root: Path, tmp_path: Path, request: pytest.FixtureRequest) -> AsyncIterator[tuple]:
    """(sidecar, stub) with the Limits given by ``@pytest.mark.parametrize("limited", [Limits(...)], indirect=True)``."""
    car = await started(tools_root, tmp_path, request.param)
    try:
        async with grpc.aio.insecure_channel(car.address) as channel:
            yield car, pb_grpc.ToolAgentStub(channel)
    finally:
        await car.stop(0)


# ---------------------------------------------------------------- part 3: Match


async def test_an_intent_past_the_limit_is_invalid_argument_naming_the_limit(stub) -> None:
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await stub.Match(pb.MatchRequest(intent="查" * 2000))   # 6,000 bytes of UTF-8
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert caught.value.details() == ("intent is 6000 bytes; the limit is max_intent_bytes 4096: "
                                      "say what the tool should do in fewer words")
    reply = await stub.Match(pb.MatchRequest(intent="查" * 1365))   # 4,095 bytes: allowed
    assert reply.suggestion or reply.found


def varied_intent(n_words: int) -> str:
    """Varied words (a repeated phrase is cheap for any matcher); ~5 bytes a word."""
    rng = random.Random(7)
    words = ["show", "the", "log", "file", "of", "server", "git", "commit", "read", "write", "delete", "run",
             "查看", "日志", "文件", "提醒", "分钟", "状态"]
    return " ".join(rng.choice(words) for _ in range(n_words))


async def test_the_largest_matches_a_caller_can_send_do_not_stall_the_event_loop(stub) -> None:
    """300 KB of varied words stalled the loop 7 s (the matcher's cost grows with the square of the
    intent, partly in C that holds the GIL); the intent limit bounds that cost, and Match runs on the
    match pool, so the loop (the servicer's and this test's are one) keeps ticking and Calls answer."""
    gaps: list[float] = []
    done = asyncio.Event()

    async def ticker() -> None:
        last = time.monotonic()
        while not done.is_set():
            await asyncio.sleep(0.005)
            now = time.monotonic()
            gaps.append(now - last)
            last = now

    tick = asyncio.create_task(ticker())
    largest = varied_intent(800)[:4096]   # ASCII-and-CJK text just under the limit
    while len(largest.encode()) > 4096:
        largest = largest[:-1]
    huge = asyncio.gather(stub.Match(pb.MatchRequest(intent=varied_intent(60_000)), timeout=120),
                          return_exceptions=True)
    allowed = asyncio.gather(*(stub.Match(pb.MatchRequest(intent=largest), timeout=60) for _ in range(8)))
    started_at = time.monotonic()
    echo = await stub.Call(request("shell-exec", cmd="echo alive"), timeout=30)
    echo_s = time.monotonic() - started_at
    [refused] = await huge
    replies = await allowed
    done.set()
    await tick
    assert isinstance(refused, grpc.aio.AioRpcError) and refused.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert all(r.found or r.suggestion for r in replies)
    assert echo.output == b"alive\n"
    assert echo_s < 5.0, f"a Call waited {echo_s:.1f}s behind Matches"
    assert max(gaps) < 0.5, f"the event loop stalled {max(gaps):.2f}s during Matches"


@pytest.mark.parametrize("limited", [Limits(match_workers=1, max_match_queued=1)], indirect=True)
async def test_matches_past_the_match_queue_are_resource_exhausted(limited: tuple) -> None:
    car, stub = limited
    busy = threading.Event()
    hold = car.match_pool.submit(busy.wait, 30)   # the pool's only thread is taken: Matches wait
    try:
        first = asyncio.ensure_future(stub.Match(pb.MatchRequest(intent="看看日志"), timeout=30))
        assert await until(lambda: car.servicer.matches == 1, within=5.0)
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await stub.Match(pb.MatchRequest(intent="看看日志"), timeout=30)
    finally:
        busy.set()
    assert caught.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert caught.value.details() == ("too many Match requests: 1 running or waiting (max_match_queued 1, "
                                      "match_workers 1); try again later")
    assert hold.result(timeout=5) is True
    await first
    assert car.servicer.matches == 0
    await stub.Match(pb.MatchRequest(intent="看看日志"), timeout=30)   # served again


# ---------------------------------------------------------------- part 3: params


async def test_a_call_with_100000_params_is_refused_at_once(stub) -> None:
    struct = struct_pb2.Struct()
    struct.update({f"p{i}": i for i in range(100_000)})
    t0 = time.monotonic()
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await stub.Call(pb.CallRequest(tool="shell-exec", params=struct), timeout=30)
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert caught.value.details() == "100000 parameters; the limit is max_params 64"
    assert time.monotonic() - t0 < 2.0


@pytest.mark.parametrize("limited", [Limits(max_params_bytes=10_000)], indirect=True)
async def test_params_past_max_params_bytes_are_refused(limited: tuple) -> None:
    car, stub = limited
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await stub.StreamCall(request("shell-exec", cmd="echo " + "x" * 20_000)).read()
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "the limit is max_params_bytes 10000" in caught.value.details()
    assert (await stub.Call(request("shell-exec", cmd="echo " + "x" * 100))).ok


def test_in_process_callers_get_the_same_param_limits(sidecar) -> None:
    agent = sidecar.agent
    with pytest.raises(LimitExceeded, match="nest deeper than max_params_depth 32"):
        deep: object = "leaf"
        for _ in range(40):
            deep = [deep]
        agent.check_params({"cmd": deep})
    with pytest.raises(LimitExceeded, match="65 parameters; the limit is max_params 64"):
        agent.check_params({f"p{i}": 1 for i in range(65)})
    agent.check_params({f"p{i}": [1, {"a": "b"}] for i in range(64)})   # at the limit: fine


# ---------------------------------------------------------------- part 3: calls in flight


def fifo(tmp_path: Path, name: str) -> Path:
    path = tmp_path / name
    os.mkfifo(path)
    return path


def release(path: Path) -> None:
    """Let the ``cat`` blocked on this fifo finish (it is the only reader)."""
    fd = os.open(path, os.O_WRONLY | os.O_NONBLOCK)
    os.write(fd, b"go\n")
    os.close(fd)


@pytest.mark.parametrize("limited", [Limits(max_in_flight=4, max_in_flight_per_tool=1, max_queued=1)],
                         indirect=True)
async def test_per_tool_limit_queues_then_refuses_with_resource_exhausted(limited: tuple, tmp_path: Path) -> None:
    car, stub = limited
    rt = shell_exec_runtime(tmp_path)
    gate, marker = fifo(rt, "gate"), rt / "running"
    running = asyncio.ensure_future(stub.Call(request("shell-exec", cmd=f"touch {marker}; cat {gate}"), timeout=30))
    try:
        assert await until(marker.exists, within=10.0)
        queued = asyncio.ensure_future(stub.Call(request("shell-exec", cmd="echo second"), timeout=30))
        assert await until(lambda: car.agent.admission.queued == 1, within=5.0)
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await stub.Call(request("shell-exec", cmd="echo third"), timeout=30)
        assert caught.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert caught.value.details() == ("too many calls: 1 running (max_in_flight 4, max_in_flight_per_tool 1) "
                                          "and 1 waiting (max_queued 1); try again later")
        other = await stub.Call(request("git-ops", action="status", repo=str(tmp_path)), timeout=30)
        assert other.found and not other.param_errors   # another tool still has room: it ran
    finally:
        release(gate)
    assert (await running).output == b"go\n"
    assert (await queued).output == b"second\n"
    assert await until(lambda: car.agent.admission.running == 0, within=5.0)


@pytest.mark.parametrize("limited", [Limits(max_in_flight=1, max_queued=4)], indirect=True)
async def test_a_call_queued_past_its_deadline_answers_a_result_and_runs_nothing(
        limited: tuple, tmp_path: Path) -> None:
    car, stub = limited
    rt = shell_exec_runtime(tmp_path)
    gate, marker, never = fifo(rt, "gate"), rt / "running", rt / "never"
    running = asyncio.ensure_future(stub.Call(request("shell-exec", cmd=f"touch {marker}; cat {gate}"), timeout=30))
    try:
        assert await until(marker.exists, within=10.0)
        late = await stub.Call(request("git-ops", action="status", repo=str(never)), timeout=0.5)
    finally:
        release(gate)
    assert late.timed_out and not late.ok
    assert "waiting for a free slot" in late.error and "max_in_flight 1" in late.error
    assert (await running).ok
    assert car.agent.admission.queued == 0 and await until(lambda: car.agent.admission.running == 0, 5.0)


async def test_admission_hands_slots_over_in_order_and_survives_cancellation() -> None:
    gate = Admission(Limits(max_in_flight=1, max_queued=3))
    assert await gate.enter("a", None)
    second = asyncio.ensure_future(gate.enter("b", None))
    third = asyncio.ensure_future(gate.enter("a", None))
    assert await until(lambda: gate.queued == 2, within=1.0)
    second.cancel()                      # a caller that gives up frees its place, not a slot
    with pytest.raises(asyncio.CancelledError):
        await second
    gate.leave("a")
    assert await asyncio.wait_for(third, 1.0)
    assert gate.running == 1 and gate.queued == 0
    assert not await gate.enter("c", time.monotonic() + 0.05)   # deadline passes in the queue
    gate.leave("a")
    assert gate.running == 0 and gate.per_tool == {}


# ---------------------------------------------------------------- part 3: confirmations


def test_pending_confirmations_are_bounded_and_the_oldest_go_first() -> None:
    book = ConfirmBook(max_pending=1000)
    issued = [book.issue("rm", "sha", {"n": i}) for i in range(20_000)]
    assert len(book) == 1000
    assert "dropped: at most 1000" in book.check(issued[0].token, "rm", "sha", {"n": 0})
    assert book.check(issued[-1].token, "rm", "sha", {"n": 19_999}) == ""


def test_the_agent_bounds_its_book_with_the_limit(sidecar) -> None:
    assert sidecar.agent.confirm.max_pending == Limits().max_pending_confirmations == 1024


# ---------------------------------------------------------------- part 4: failures are results

STRICT = ("{ ratio: { type: number }, count: { type: integer }, days: { type: integer, normalize: [duration_days] }, "
          "path: { type: string, normalize: [path] } }")


async def strict_tool(stub, write_tool: WriteTool) -> None:
    text = tool_text("strict", command="echo {count}", params=STRICT)
    text = text.replace("author:", 'permissions: { fs_read: true, fs_read_paths: ["/tmp/**"] }\nauthor:')
    write_tool("strict", text)

    async def loaded() -> bool:
        return (await stub.Call(request("strict", count=1))).found

    assert await until(loaded, within=2.0)


@pytest.mark.parametrize("param, value, words", [
    ("ratio", float("inf"), "expected a finite number; got Infinity"),
    ("ratio", float("-inf"), "expected a finite number; got -Infinity"),
    ("ratio", float("nan"), "expected a finite number; got NaN"),
    ("count", float("nan"), "expected an integer (e.g. 20); got NaN, which is not whole"),
    ("count", "7" * 5000, "expected an integer (e.g. 20); got one with 5000 digits (at most 4000)"),
    ("days", "1e400天", "expected a duration in days"),
    ("days", "9" * 400 + "天", "which is too large"),
    ("days", "一" * 5000 + "天", "expected a duration in days"),
    ("days", "亿" * 40 + "天", "which is too large"),
    ("days", float("inf"), "expected a finite duration in days"),
])
async def test_values_that_used_to_answer_unknown_are_param_errors(
        stub, write_tool: WriteTool, param: str, value: object, words: str) -> None:
    await strict_tool(stub, write_tool)
    result = await stub.Call(request("strict", **{param: value}))
    assert result.found and not result.ok
    assert [p.param for p in result.param_errors] == [param]
    assert words in result.param_errors[0].message
    assert result.error == f"invalid parameters: {param}; nothing ran"


def _unresolvable() -> str | None:
    """A path whose realpath raises here (a /proc link this process may not read), or None."""
    for pid in ("1", str(os.getppid())):
        candidate = f"/proc/{pid}/cwd/x"
        try:
            os.path.realpath(candidate)
        except OSError:
            return candidate
    return None


async def test_an_oserror_from_realpath_is_a_param_error(stub, write_tool: WriteTool) -> None:
    path = _unresolvable()
    if path is None:
        pytest.skip("no /proc link here makes realpath raise")
    await strict_tool(stub, write_tool)
    result = await stub.Call(request("strict", path=path))
    assert result.found and not result.ok
    [problem] = result.param_errors
    assert problem.param == "path"
    assert problem.message.startswith(f"'{path}' cannot be resolved to check it against this tool's fs_read_paths")


async def test_a_symlink_swapped_during_calls_never_answers_unknown(stub, write_tool: WriteTool,
                                                                     tmp_path: Path) -> None:
    """The race itself: a link flipping between file and symlink while calls resolve it."""
    await strict_tool(stub, write_tool)
    link = tmp_path / "flip"
    stop = asyncio.Event()

    def flip() -> None:
        for i in range(200_000):
            if stop.is_set():
                return
            try:
                if i % 2:
                    link.symlink_to("/tmp")
                else:
                    link.touch()
            except FileExistsError:
                pass
            try:
                link.unlink()
            except FileNotFoundError:
                pass

    flipper = asyncio.get_running_loop().run_in_executor(None, flip)
    try:
        for _ in range(100):
            result = await stub.Call(request("strict", path=str(link / "a" / "b"), count=1), timeout=10)
            assert result.found   # any answer but an RPC error: ok, or a param error in words
    finally:
        stop.set()
        await flipper


# ---------------------------------------------------------------- part 6: logs


FORGED = "x\n2026-01-01 00:00:00,000 INFO bitong.call: call shell-exec: FORGED: ran as root"


async def test_caller_strings_cannot_forge_a_log_line(stub, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="bitong.call")
    await stub.Call(request(FORGED))
    await stub.Call(request("shell-exec", cmd="true", **{FORGED: 1, "a\rb\u2028c": 2}))
    lines = [r.getMessage() for r in caplog.records if r.name == "bitong.call"]
    assert len(lines) == 2
    assert all("\n" not in line and "\r" not in line and "\u2028" not in line for line in lines)
    assert lines[0] == "call x\\n2026-01-01 00:00:00,000 INFO bitong.call: call shell-exec: FORGED: ran as root: " \
                       "not registered"
    assert "a\\rb\\u2028c" in lines[1]


def test_log_text_escapes_controls_and_cuts_long_text() -> None:
    assert log_text("a\nb\tc\\d\x1b[31m\x85") == "a\\nb\\tc\\\\d\\x1b[31m\\x85"
    assert log_text("调用") == "调用"
    assert log_text("y" * 300) == "y" * 200 + "…(300 chars)"


# ---------------------------------------------------------------- bitong serve options


def test_bitong_serve_takes_the_limits_as_options(tools_root: Path, tmp_path: Path) -> None:
    sock = tmp_path / "opts.sock"
    server = subprocess.Popen([sys.executable, "-m", "bitong", "serve", "--tools", str(tools_root),
                               "--listen", f"unix:{sock}", "--max-intent-bytes", "100", "--max-params", "2"],
                              stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        assert server.stdout is not None
        assert server.stdout.readline().startswith("bitong: serving on unix:")
        with grpc.insecure_channel(f"unix:{sock}") as channel:
            stub = pb_grpc.ToolAgentStub(channel)
            with pytest.raises(grpc.RpcError) as caught:
                stub.Match(pb.MatchRequest(intent="x" * 101), timeout=10)
            assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
            assert "max_intent_bytes 100" in caught.value.details()
            with pytest.raises(grpc.RpcError) as caught:
                stub.Call(request("shell-exec", cmd="true", cwd=".", extra=1), timeout=10)
            assert caught.value.details() == "3 parameters; the limit is max_params 2"
    finally:
        server.send_signal(signal.SIGTERM)
        try:
            server.communicate(timeout=20)  # waits, and closes the pipe (no ResourceWarning)
        except subprocess.TimeoutExpired:
            server.kill()
            server.communicate()


def test_a_limit_that_is_not_a_positive_integer_is_a_usage_error(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, "-m", "bitong", "serve", "--listen", f"unix:{tmp_path}/x.sock",
                           "--max-in-flight", "0"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert "limit max_in_flight must be a positive integer, not 0" in done.stderr


# ---------------------------------------------------------------- the service itself, without gRPC
#
# ToolAgent over a Registry of real tool folders (tmp_path), with real shell children: what
# both the server and the in-process CLI answer, checked where it is decided.

REGIONS = ["alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel", "india", "juliett", "kilo",
           "lima", "mike", "november", "oscar", "papa", "quebec", "romeo", "sierra", "tango", "uniform", "victor",
           "whiskey", "xray", "yankee"]


def shell_exec_runtime(tmp_path: Path) -> Path:
    """The bundled shell-exec's runtime/ in the tools_root copy: the one host folder it may write (sandbox)."""
    rt = tmp_path / "tools" / "shell-exec" / "runtime"
    rt.mkdir(parents=True, exist_ok=True)
    return rt


def put(root: Path, name: str, text: str | None = None, **options: object) -> Path:
    """A tool folder named after its tool, as the format requires."""
    folder = root / name
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "TOOL.hdlp"
    path.write_text(text if text is not None else tool_text(name, **options), encoding="utf-8")
    return path


def agent_over(root: Path, **options: object) -> ToolAgent:
    """A ToolAgent over ``root`` as served: scanned, then calibrated (no embedder: cheap)."""
    registry = Registry([str(root)])
    registry.rescan()
    registry.refresh_semantics()
    return ToolAgent(registry, **options)


async def test_after_a_restart_from_state_a_call_runs_only_what_the_files_define_now(tmp_path: Path) -> None:
    """The saved snapshot answers at once, unchecked; a Call waits until the files are checked."""
    root, state = tmp_path / "tools", str(tmp_path / "state.pb")
    put(root, "kept", command="echo before")
    put(root, "gone")
    first = Registry([str(root)])
    first.rescan()
    first.save_state(state)
    put(root, "kept", command="echo after")   # changed while bitong was down
    (root / "gone" / "TOOL.hdlp").unlink()   # and deleted
    registry = Registry([str(root)])
    assert registry.load_state(state, verify=False)
    checked_at_start = registry.verified
    assert not checked_at_start
    assert {"kept", "gone"} <= set(registry.snapshot.tools)   # as saved, until checked
    agent = ToolAgent(registry)
    refused = await agent.call("gone", {})
    assert not refused.found and "no tool named 'gone'" in refused.error
    assert registry.verified and "gone" not in registry.snapshot.tools
    ran = await agent.call("kept", {})
    assert ran.ok and ran.output == b"after\n"


@pytest.fixture(scope="module")
def reports(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """25 tools that differ by one word: more than MAX_TOP_K of them match a request about reports."""
    root = tmp_path_factory.mktemp("reports")
    for region in REGIONS:
        put(root, f"report-{region}", intent=f"show the sales report for the {region} region")
    return root


def test_match_found_gives_ranked_candidates_with_their_tools(reports: Path) -> None:
    agent = agent_over(reports)
    reply = agent.match("show the sales report for the kilo region")
    assert reply.found and reply.suggestion == ""
    assert reply.candidates[0].name == "report-kilo"
    assert reply.candidates[0].tool.intent == "show the sales report for the kilo region"
    assert all(c.tool.name == c.name for c in reply.candidates)
    scores = [c.score for c in reply.candidates]
    assert scores == sorted(scores, reverse=True) and all(0.0 < s <= 1.0 for s in scores)
    assert not reply.near_misses and reply.explanation == ""   # explain was not asked for


def test_match_not_found_is_the_suggestion_and_no_candidates(reports: Path) -> None:
    agent = agent_over(reports, threshold=1.5)   # scores are in [0, 1]: every hit is a near miss
    reply = agent.match("kilo sales")
    assert not reply.found and reply.suggestion == SUGGESTION
    assert not reply.candidates and not reply.near_misses and reply.explanation == ""
    explained = agent.match("kilo sales", explain=True)
    assert not explained.found and explained.suggestion == SUGGESTION and not explained.candidates
    assert explained.near_misses and explained.near_misses[0].name == "report-kilo"
    assert all(0.0 < c.score <= 1.0 for c in explained.near_misses)
    assert "report-kilo" in explained.explanation and "threshold" in explained.explanation
    nothing = agent.match("给我讲个关于程序员的笑话", explain=True)   # shares no word with any tool
    assert not nothing.found and not nothing.near_misses and nothing.explanation


@pytest.mark.parametrize("top_k, expected", [(0, DEFAULT_TOP_K), (-5, DEFAULT_TOP_K), (1, 1), (5, 5),
                                             (MAX_TOP_K, MAX_TOP_K), (MAX_TOP_K + 1, MAX_TOP_K), (1000, MAX_TOP_K)])
def test_match_top_k_defaults_to_3_and_is_capped(reports: Path, top_k: int, expected: int) -> None:
    agent = agent_over(reports, threshold=0.0)   # every tool that shares a word is a candidate
    reply = agent.match("show the sales report", top_k)
    assert reply.found and len(reply.candidates) == expected
    assert len({c.name for c in reply.candidates}) == expected


def test_list_tools_is_sorted_and_names_a_broken_file_by_line_and_column(tmp_path: Path) -> None:
    for name in ("zulu", "alpha", "mike"):
        put(tmp_path, name)
    text = tool_text("broken").replace("created: 2026-11-30", "created: someday")
    broken = put(tmp_path, "broken", text)
    line = text.splitlines().index("created: someday") + 1
    reply = agent_over(tmp_path).list_tools()
    assert [t.name for t in reply.tools] == ["alpha", "mike", "zulu"]
    [error] = reply.errors
    assert (error.path, error.line, error.column) == (str(broken), line, 10)
    assert error.message == "created must be a date YYYY-MM-DD, found 'someday'"
    assert error.serving_previous == ""


ECHO = "{ word: { type: string, required: true } }"


async def test_call_of_an_unknown_tool_is_not_found_with_a_did_you_mean(tmp_path: Path) -> None:
    put(tmp_path, "say-hello", command="echo {word}", params=ECHO)
    agent = agent_over(tmp_path)
    result = await agent.call("say-helo", {"word": "hi"})
    assert not result.ok and not result.found
    assert result.tool == "say-helo" and result.suggestion == SUGGESTION
    assert result.error == "no tool named 'say-helo' is registered; did you mean 'say-hello'?"
    far = await agent.call("qqqqqqqq", {})
    assert not far.found and far.error == "no tool named 'qqqqqqqq' is registered"


async def test_bad_params_name_the_param_and_nothing_runs(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    put(tmp_path, "count-up", command=f"sh -c \"touch '{marker}'; echo $0\" {{count}}",
        params="{ count: { type: integer, required: true } }", permissions=writes_to(tmp_path))
    agent = agent_over(tmp_path)
    wrong = await agent.call("count-up", {"count": "many"})
    assert wrong.found and not wrong.ok
    assert [p.param for p in wrong.param_errors] == ["count"]
    assert wrong.error == "invalid parameters: count; nothing ran"
    missing = await agent.call("count-up", {})
    assert [p.param for p in missing.param_errors] == ["count"] and not missing.ok
    assert not marker.exists()   # neither call started the command
    right = await agent.call("count-up", {"count": "7"})   # text is coerced by the schema
    assert right.ok and right.output == b"7\n" and marker.exists()


async def test_a_shell_tool_that_echoes_answers_its_output_and_exit_code(tmp_path: Path) -> None:
    put(tmp_path, "say", command="echo {word}", params=ECHO)
    result = await agent_over(tmp_path).call("say", {"word": "hello; rm -rf nothing"})
    assert result.ok and result.found
    assert result.output == b"hello; rm -rf nothing\n"   # one argument, not shell syntax
    assert result.exit_code == 0 and result.stderr == b"" and result.error == ""
    assert (result.tool, result.executor) == ("say", "shell")


async def test_a_failing_shell_tool_answers_its_stderr_and_exit_code(tmp_path: Path) -> None:
    put(tmp_path, "fail", command='sh -c "echo \\"$0\\" >&2; exit 3" {word}', params=ECHO)
    result = await agent_over(tmp_path).call("fail", {"word": "broken-pipe"})
    assert result.found and not result.ok
    assert result.exit_code == 3
    assert result.stderr == b"broken-pipe\n" and result.output == b""


async def test_require_confirm_is_two_steps_and_the_token_runs_once(tmp_path: Path) -> None:
    log = tmp_path / "runs.log"
    put(tmp_path, "wipe", command=f"sh -c \"echo $0 >> '{log}'; echo done\" {{word}}", params=ECHO, confirm=True,
        permissions=writes_to(tmp_path))
    agent = agent_over(tmp_path)
    asked = await agent.call("wipe", {"word": "first"})
    assert asked.found and not asked.ok and asked.needs_confirmation
    assert asked.confirm_token and asked.confirm_expires_unix_ms > time.time() * 1000
    assert "requires confirmation" in asked.error and not log.exists()

    other = await agent.call("wipe", {"word": "second"}, confirm_token=asked.confirm_token)
    assert not other.ok and not other.needs_confirmation
    assert other.error == "confirm_token was issued for other parameters (or an older definition of the tool)"
    assert not log.exists()

    confirmed = await agent.call("wipe", {"word": "first"}, confirm_token=asked.confirm_token)
    assert confirmed.ok and confirmed.output == b"done\n"
    again = await agent.call("wipe", {"word": "first"}, confirm_token=asked.confirm_token)
    assert not again.ok and "unknown or already used confirm_token" in again.error
    assert log.read_text() == "first\n"   # ran exactly once
