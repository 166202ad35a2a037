"""Keep-alive (issue 13 §4), against a real local HTTP server that counts the connections it accepts.

Reuse, the idle timeout, a connection the server closed while idle, a
failure after the request was sent (never repeated), the bound under 16 in
flight, and TLS still verified on kept-alive connections. Tests wait on the
server's events, never on sleeps.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import uvloop

from bitong.agent.config import from_dict
from bitong.agent.calling.executors import Executors
from bitong.agent.calling.executors import http_client
from bitong.v1.agent_pb2 import ToolDef
from tests.agent.certs import CA
from tests.fakes.scene import soon
from tests.fakes.server import Exchange, FakeServer, Reply

Define = Callable[..., ToolDef]


def web(define: Define) -> ToolDef:
    return define("web", executor="http", method="GET", params="{ url: { type: string } }",
                  extra="permissions: { network: true, network_hosts: [127.0.0.1] }\n")


def runners(**defaults: Any) -> Executors:
    return Executors(from_dict({"defaults": defaults}))


async def get(run: Executors, tool: ToolDef, url: str) -> Any:
    return await run.run(tool, {"url": url}, deadline=soon())


async def until(fn: Callable[[], bool], within: float = 10.0) -> bool:
    """Let the loop run until ``fn()`` holds (a state the loop's own callbacks change), or ``within`` passed."""
    end = asyncio.get_running_loop().time() + within
    while not fn():
        if asyncio.get_running_loop().time() > end:
            return False
        await asyncio.sleep(0.005)
    return True


async def test_calls_to_one_endpoint_share_one_connection(server: FakeServer, define: Define) -> None:
    server.route("GET", r"/n", lambda ex: Reply(200, b"yes"))
    run, tool = runners(), web(define)
    for _ in range(3):
        out = await get(run, tool, server.url + "/n")
        assert out.ok and out.stdout == b"yes", out.error
    assert server.count("GET", "/n") == 3
    assert server.accepted == 1 and run.http_pool.opened == 1
    assert "connection" not in server.requests[-1].headers      # HTTP/1.1: keep-alive unless told otherwise


async def test_a_connection_is_not_kept_when_the_answer_says_close_or_is_cut(server: FakeServer,
                                                                                 define: Define) -> None:
    server.route("GET", r"/close", lambda ex: Reply(200, b"bye", {"Connection": "close"}))
    server.route("GET", r"/big", lambda ex: Reply(200, b"x" * 200_000))
    run = runners()
    tool = define("web", executor="http", method="GET", params="{ url: { type: string } }", cap=1000,
                  extra="permissions: { network: true, network_hosts: [127.0.0.1] }\n")
    assert (await get(run, tool, server.url + "/close")).ok
    cut = await get(run, tool, server.url + "/big")
    assert cut.ok and cut.truncated                       # the rest of the body is never read: dropped
    assert (await get(run, tool, server.url + "/close")).ok
    assert server.accepted == 3 and run.http_pool.idle_count() == 0


async def test_without_keep_alive_each_request_says_close(server: FakeServer, define: Define) -> None:
    server.route("GET", r"/n", lambda ex: Reply(200, b"yes"))
    run, tool = runners(http_idle_ms=0), web(define)
    for _ in range(2):
        assert (await get(run, tool, server.url + "/n")).ok
    assert server.accepted == 2
    assert server.requests[-1].headers["connection"] == "close"


async def test_the_idle_timeout_closes_the_connection(server: FakeServer, define: Define) -> None:
    server.route("GET", r"/n", lambda ex: Reply(200, b"yes"))
    run, tool = runners(http_idle_ms=20), web(define)
    assert (await get(run, tool, server.url + "/n")).ok
    # the client hangs up by itself: the server never closes a keep-alive connection on its own
    assert await asyncio.to_thread(server.wait_closed, 1), "the idle connection must be closed by the client"
    assert run.http_pool.idle_count() == 0
    assert (await get(run, tool, server.url + "/n")).ok
    assert server.accepted == 2


async def test_a_connection_the_server_closed_while_idle_is_replaced_before_sending(server: FakeServer,
                                                                                     define: Define) -> None:
    def answer_then_hang_up(ex: Exchange) -> Reply:
        ex.handler.close_connection = True     # closed after the answer, without saying so in a header
        return Reply(200, b"once")

    server.route("GET", r"/n", answer_then_hang_up)
    run, tool = runners(), web(define)
    assert (await get(run, tool, server.url + "/n")).ok
    assert run.http_pool.idle_count() == 1
    # Block the loop while the server closes: the pool cannot have seen the close when the next call starts.
    assert server.wait_closed(1)
    out = await get(run, tool, server.url + "/n")
    assert out.ok and out.stdout == b"once", out.error
    assert server.count("GET", "/n") == 2 and server.accepted == 2      # each request sent once, on a fresh one
    assert run.http_pool.opened == 2


async def test_an_idle_connection_the_server_closed_is_dropped_at_once(server: FakeServer, define: Define) -> None:
    def answer_then_hang_up(ex: Exchange) -> Reply:
        ex.handler.close_connection = True
        return Reply(200, b"once")

    server.route("GET", r"/n", answer_then_hang_up)
    run, tool = runners(), web(define)
    assert (await get(run, tool, server.url + "/n")).ok
    assert await until(lambda: run.http_pool.idle_count() == 0), "the closed connection must leave the pool"
    assert (await get(run, tool, server.url + "/n")).ok
    assert server.accepted == 2


async def test_a_failure_after_the_request_was_sent_is_an_error_not_a_retry(server: FakeServer,
                                                                              define: Define) -> None:
    seen = {"n": 0}

    def second_goes_unanswered(ex: Exchange) -> Reply | None:
        seen["n"] += 1
        if seen["n"] == 1:
            return Reply(200, b"first")
        ex.handler.close_connection = True     # read the request, then hang up without an answer
        return None

    server.route("POST", r"/exec", second_goes_unanswered)
    run = runners()
    tool = define("web", executor="http", method="POST", params="{ url: { type: string } }", retry=3,
                  extra="permissions: { network: true, network_hosts: [127.0.0.1] }\n")
    assert (await get(run, tool, server.url + "/exec")).ok
    out = await get(run, tool, server.url + "/exec")
    assert not out.ok and not out.retryable and out.attempts == 1
    assert out.error == f"connection closed by 127.0.0.1:{server.port} before it answered"
    assert server.count("POST", "/exec") == 2 and server.accepted == 1     # sent once, on the kept connection


async def test_the_pool_bounds_connections_under_16_in_flight(server: FakeServer, define: Define) -> None:
    server.route("GET", r"/c/\d+", lambda ex: Reply(200, ex.request.path.encode()))
    run, tool = runners(http_max_connections=4), web(define)
    outs = await asyncio.gather(*(get(run, tool, f"{server.url}/c/{i}") for i in range(16)))
    assert [o.stdout for o in outs] == [f"/c/{i}".encode() for i in range(16)]
    assert server.accepted == 4 and server.most_open == 4
    assert run.http_pool.idle_count() == 4


async def test_a_waiter_for_a_connection_gives_up_at_its_deadline(server: FakeServer, define: Define) -> None:
    held, release = threading.Event(), threading.Event()

    def hold(ex: Exchange) -> Reply:
        held.set()
        release.wait(20)
        return Reply(200, b"late")

    server.route("GET", r"/hold", hold)
    run, tool = runners(http_max_connections=1), web(define)
    first = asyncio.create_task(get(run, tool, server.url + "/hold"))
    assert await asyncio.to_thread(held.wait, 10)
    second = await run.run(tool, {"url": server.url + "/hold"}, deadline=soon(0.2))
    assert second.timed_out and "while connecting" in second.error
    release.set()
    assert (await first).ok
    assert server.accepted == 1


def test_keep_alive_under_uvloop_the_servers_loop(server: FakeServer, define: Define) -> None:
    server.route("GET", r"/n", lambda ex: Reply(200, b"yes"))
    run, tool = runners(), web(define)

    async def three() -> list[bool]:
        return [(await get(run, tool, server.url + "/n")).ok for _ in range(3)]

    assert uvloop.run(three()) == [True, True, True]
    assert server.accepted == 1 and server.count("GET", "/n") == 3
    assert server.wait_closed(1), "the loop's end closes the idle connection"


@pytest.fixture
def ca(tmp_path: Path) -> CA:
    return CA(tmp_path)


@pytest.fixture
def tls_server(ca: CA) -> Iterator[FakeServer]:
    issued = ca.issue("localhost", server=True)
    with FakeServer(tls=(str(issued.cert), str(issued.key))) as srv:
        yield srv


@pytest.fixture
def trusted(ca: CA, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The client's TLS context built again, trusting the test CA (the system store, as OpenSSL reads it)."""
    monkeypatch.setenv("SSL_CERT_FILE", str(ca.path))
    http_client._tls.cache_clear()
    yield
    http_client._tls.cache_clear()


async def test_tls_is_verified_and_a_refused_certificate_keeps_nothing(tls_server: FakeServer,
                                                                        define: Define) -> None:
    tls_server.route("GET", r"/n", lambda ex: Reply(200, b"secret"))
    run, tool = runners(), web(define)
    for _ in range(2):
        out = await get(run, tool, tls_server.url + "/n")
        assert not out.ok and out.stdout == b""
        assert out.error.startswith(f"TLS certificate of 127.0.0.1:{tls_server.port} not accepted"), out.error
    assert tls_server.count("GET", "/n") == 0 and run.http_pool.idle_count() == 0


async def test_tls_connections_are_kept_alive_once_verified(tls_server: FakeServer, define: Define,
                                                            trusted: None) -> None:
    tls_server.route("GET", r"/n", lambda ex: Reply(200, b"secret"))
    run, tool = runners(), web(define)
    for _ in range(3):
        out = await get(run, tool, tls_server.url + "/n")
        assert out.ok and out.stdout == b"secret", out.error
    assert tls_server.accepted == 1 and tls_server.count("GET", "/n") == 3


async def test_endpoints_with_nothing_open_leave_the_pool(server: FakeServer, define: Define) -> None:
    server.route("GET", r"/n", lambda ex: Reply(200, b"yes", {"Connection": "close"}))
    run, tool = runners(), web(define)
    for _ in range(3):
        assert (await get(run, tool, server.url + "/n")).ok
    assert run.http_pool._endpoints == {}      # a generic http tool may call any number of hosts


async def test_a_connection_is_never_shared_across_destination_rules(server: FakeServer, define: Define) -> None:
    server.route("GET", r"/n", lambda ex: Reply(200, b"yes"))
    run = Executors(from_dict({"network_hosts": {"other": ["127.0.0.0/8"]}}))
    first = web(define)
    other = define("other", executor="http", method="GET", params="{ url: { type: string } }",
                   extra="permissions: { network: true }\n")
    assert (await get(run, first, server.url + "/n")).ok
    assert (await get(run, other, server.url + "/n")).ok
    assert server.accepted == 2
