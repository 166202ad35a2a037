"""The call semantics every HTTP executor shares, each checked on all four against a real local server.

gatekeeper (POST /exec), hlpd-api (GET /api/modules/{id}), git-forgejo
(GET .../commits) and http (GET <url>): success, an error status, the
deadline, the caller's cancellation, truncation, retries counted on the
server side, and streaming as the body arrives. Tests wait on events the
server sets, never on sleeps.
"""

from __future__ import annotations

import asyncio
import dataclasses
import re
import socket
import threading
from typing import Any
from collections.abc import Callable

import pytest

from bitong.agent.calling.executors import Executors
from bitong.agent.calling.executors.base import STDERR, STDOUT
from bitong.v1.agent_pb2 import ToolDef
from tests.fakes.server import Exchange, FakeServer, Reply

from tests.fakes.scene import TOKEN, config_for, soon

Define = Callable[..., ToolDef]


@dataclasses.dataclass
class Case:
    executor: str
    method: str          # the tool's method:
    params: str          # its params_schema
    verb: str            # what the server sees
    path: str
    call: Callable[[str], dict[str, Any]]      # base URL -> the call's params
    extra: str = ""


CASES = [
    Case("gatekeeper", "exec", "{ cmd: { type: string } }", "POST", "/exec", lambda base: {"cmd": "uptime"},
         "endpoint: BS-GZ-006\n"),
    Case("hlpd-api", "GET /modules/{id}", "{ id: { type: string } }", "GET", "/api/modules/m1",
         lambda base: {"id": "m1"}),
    Case("git-forgejo", "list_commits", "{ limit: { type: integer } }", "GET",
         "/api/v1/repos/zhuyuan/native-repo/commits", lambda base: {"limit": 5}),
    Case("http", "request", "{ url: { type: string } }", "GET", "/probe", lambda base: {"url": base + "/probe"},
         "permissions: { network: true, network_hosts: [127.0.0.1] }\n"),
]


@pytest.fixture(params=CASES, ids=[c.executor for c in CASES])
def case(request: pytest.FixtureRequest) -> Case:
    return request.param


def tool_for(define: Define, case: Case, **options: Any) -> ToolDef:
    return define("probe", executor=case.executor, method=case.method, params=case.params, extra=case.extra,
                  **options)


async def until_set(event: threading.Event, within: float = 10.0) -> bool:
    return await asyncio.to_thread(event.wait, within)


# ---------------------------------------------------------------- results


async def test_success_returns_the_raw_body(case: Case, define: Define, server: FakeServer,
                                            runners: Executors) -> None:
    server.route(case.verb, case.path, lambda ex: Reply(200, b'{"raw": "\xe4\xbd\xa0\xe5\xa5\xbd"}',
                                                        {"Content-Type": "application/json"}))
    out = await runners.run(tool_for(define, case), case.call(server.url), deadline=soon())
    assert out.ok and out.http_status == 200 and out.error == ""
    assert out.stdout == '{"raw": "你好"}'.encode()            # byte for byte, never re-encoded
    assert out.stderr.startswith(b"HTTP/1.1 200 OK\r\n") and b"Content-Type: application/json" in out.stderr
    sent = server.requests[-1]
    assert (sent.method, sent.path) == (case.verb, case.path)
    assert sent.headers["user-agent"] == "bitong-tests"
    if case.executor != "http":   # the configured ones carry the token; the generic one has none
        assert sent.headers["authorization"].endswith(TOKEN)
    else:
        assert "authorization" not in sent.headers


async def test_an_error_status_is_not_ok_with_status_and_body(case: Case, define: Define, server: FakeServer,
                                                               runners: Executors) -> None:
    server.route(case.verb, case.path, lambda ex: Reply(404, {"message": "nothing here"}))
    out = await runners.run(tool_for(define, case), case.call(server.url), deadline=soon())
    assert not out.ok and out.http_status == 404
    assert out.error == "HTTP 404 Not Found"
    assert out.stdout == b'{"message": "nothing here"}'
    assert not out.retryable


async def test_connection_refused_is_named(case: Case, define: Define, token: str) -> None:
    closed = socket.socket()
    closed.bind(("127.0.0.1", 0))
    port = closed.getsockname()[1]
    closed.close()   # nothing listens there now
    runners = Executors(config_for(f"http://127.0.0.1:{port}"))
    out = await runners.run(tool_for(define, case), case.call(f"http://127.0.0.1:{port}"), deadline=soon())
    assert not out.ok and out.http_status == 0 and not out.timed_out
    assert out.error == f"connection refused by 127.0.0.1:{port}"
    assert out.retryable


# ---------------------------------------------------------------- time


async def test_the_deadline_drops_the_request_and_names_the_phase(case: Case, define: Define, server: FakeServer,
                                                                   runners: Executors) -> None:
    gone = threading.Event()

    def hang(ex: Exchange) -> None:
        if ex.wait_client_gone():
            gone.set()

    server.route(case.verb, case.path, hang)
    out = await runners.run(tool_for(define, case, timeout_ms=300), case.call(server.url), deadline=soon(0.3))
    assert out.timed_out and not out.ok
    assert re.search(r"timed out after (29\d|300) ms while waiting for the response", out.error), out.error
    assert await until_set(gone), "the connection must be dropped at the deadline"


async def test_the_deadline_keeps_what_arrived(case: Case, define: Define, server: FakeServer,
                                               runners: Executors) -> None:
    def trickle(ex: Exchange) -> None:
        def chunks():
            yield b"first part;"
            server.release.wait(30)   # the rest never comes while the test runs
        ex.send_chunked(chunks())

    server.route(case.verb, case.path, trickle)
    out = await runners.run(tool_for(define, case), case.call(server.url), deadline=soon(0.4))
    assert out.timed_out and out.http_status == 200
    assert out.stdout == b"first part;"
    assert "while reading the body" in out.error


async def test_cancellation_drops_the_connection(case: Case, define: Define, server: FakeServer,
                                                 runners: Executors) -> None:
    arrived, gone = threading.Event(), threading.Event()

    def hang(ex: Exchange) -> None:
        arrived.set()
        if ex.wait_client_gone():
            gone.set()

    server.route(case.verb, case.path, hang)
    task = asyncio.create_task(runners.run(tool_for(define, case), case.call(server.url), deadline=soon()))
    assert await until_set(arrived)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert await until_set(gone), "a cancelled call must hang up at once"


# ---------------------------------------------------------------- size and streams


async def test_the_body_is_cut_at_max_output_bytes(case: Case, define: Define, server: FakeServer,
                                                   runners: Executors) -> None:
    server.route(case.verb, case.path, lambda ex: Reply(200, b"x" * 3_000_000))
    out = await runners.run(tool_for(define, case, cap=1000), case.call(server.url), deadline=soon())
    assert out.ok and out.truncated
    assert out.stdout == b"x" * 1000


async def test_streaming_delivers_the_body_as_it_arrives(case: Case, define: Define, server: FakeServer,
                                                         runners: Executors) -> None:
    took_first = threading.Event()

    def stepwise(ex: Exchange) -> None:
        def chunks():
            yield b"one;"
            took_first.wait(10)    # the second part is sent only after the caller received the first
            yield b"two;" + b"z" * 200_000
        ex.send_chunked(chunks())

    server.route(case.verb, case.path, stepwise)
    got: list[tuple[int, bytes]] = []

    async def sink(stream: int, data: bytes) -> None:
        got.append((stream, data))
        if b"one;" in data:
            took_first.set()

    out = await runners.run(tool_for(define, case, cap=100), case.call(server.url), deadline=soon(), sink=sink)
    assert out.ok, out.error
    assert got[0][0] == STDERR and got[0][1].startswith(b"HTTP/1.1 200")
    body = b"".join(d for s, d in got if s == STDOUT)
    assert body == b"one;two;" + b"z" * 200_000          # streams are not capped
    assert out.streamed_stdout_bytes == len(body) and out.stdout == b"" and not out.truncated


async def test_an_error_answer_is_not_streamed_but_returned_whole(case: Case, define: Define, server: FakeServer,
                                                                  runners: Executors) -> None:
    server.route(case.verb, case.path, lambda ex: Reply(500, {"message": "boom"}))
    got: list[bytes] = []

    async def sink(stream: int, data: bytes) -> None:
        got.append(data)

    out = await runners.run(tool_for(define, case), case.call(server.url), deadline=soon(), sink=sink)
    assert got == [] and not out.ok and out.http_status == 500
    assert out.stdout == b'{"message": "boom"}' and out.stderr.startswith(b"HTTP/1.1 500")


# ---------------------------------------------------------------- retry


def flaky(server: FakeServer, case: Case, failures: int, status: int = 503) -> None:
    seen = {"n": 0}

    def answer(ex: Exchange) -> Reply:
        seen["n"] += 1
        if seen["n"] <= failures:
            return Reply(status, {"message": "try later"})
        return Reply(200, b"finally")

    server.route(case.verb, case.path, answer)


async def test_retry_repeats_a_503_and_says_how_many_attempts_ran(case: Case, define: Define, server: FakeServer,
                                                                  runners: Executors) -> None:
    flaky(server, case, failures=2)
    out = await runners.run(tool_for(define, case, retry=2), case.call(server.url), deadline=soon())
    assert out.ok and out.stdout == b"finally"
    assert out.attempts == 3 == server.count(case.verb, case.path)


async def test_retry_gives_up_after_its_budget(case: Case, define: Define, server: FakeServer,
                                               runners: Executors) -> None:
    flaky(server, case, failures=5)
    out = await runners.run(tool_for(define, case, retry=1), case.call(server.url), deadline=soon())
    assert not out.ok and out.http_status == 503
    assert out.attempts == 2 == server.count(case.verb, case.path)
    assert out.error == "HTTP 503 Service Unavailable (after 2 attempts)"


async def test_a_failure_that_is_not_safe_is_never_retried(case: Case, define: Define, server: FakeServer,
                                                           runners: Executors) -> None:
    flaky(server, case, failures=5, status=500)
    out = await runners.run(tool_for(define, case, retry=3), case.call(server.url), deadline=soon())
    assert not out.ok and out.attempts == 1 == server.count(case.verb, case.path)


async def test_502_is_retried_only_for_idempotent_verbs(case: Case, define: Define, server: FakeServer,
                                                        runners: Executors) -> None:
    flaky(server, case, failures=1, status=502)
    out = await runners.run(tool_for(define, case, retry=1), case.call(server.url), deadline=soon())
    if case.verb == "POST":   # gatekeeper's /exec ran something, perhaps: a gateway error is not proof it did not
        assert not out.ok and out.attempts == 1 == server.count(case.verb, case.path)
    else:
        assert out.ok and out.attempts == 2 == server.count(case.verb, case.path)


async def test_retries_stop_at_the_deadline(case: Case, define: Define, server: FakeServer, token: str) -> None:
    runners = Executors(config_for(server.url, defaults={"retry_backoff_ms": 400, "retry_backoff_max_ms": 400}))
    flaky(server, case, failures=10)
    out = await runners.run(tool_for(define, case, retry=5, timeout_ms=600), case.call(server.url), deadline=soon(0.6))
    assert not out.ok and not out.timed_out
    assert out.attempts == server.count(case.verb, case.path) < 6
    assert "no time left before the deadline" in out.error
