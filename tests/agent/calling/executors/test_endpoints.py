"""What each HTTP executor sends: gatekeeper's /exec and endpoint choice, hlpd-api's method mapping,
the http executor's params and its network permission. Real local servers (tests/fakes)."""

from __future__ import annotations

import json
import re
import socket
from collections.abc import Callable, Iterator

import pytest

from bitong.agent.config import from_dict
from bitong.agent.calling.executors import Executors
from bitong.v1.agent_pb2 import ToolDef
from tests.fakes.gatekeeper import Gatekeeper
from tests.fakes.hlpd import HldpApi
from tests.fakes.scene import TOKEN, TOKEN_VAR, soon
from tests.fakes.server import FakeServer, Reply

Define = Callable[..., ToolDef]


# ---------------------------------------------------------------- gatekeeper


@pytest.fixture
def nodes(token: str) -> Iterator[tuple[Gatekeeper, Gatekeeper, Executors]]:
    with Gatekeeper("BS-SG-001", token) as sg, Gatekeeper("BS-GZ-006", token) as gz:
        config = from_dict({"gatekeeper": {"default": "BS-SG-001", "endpoints": {
            "BS-SG-001": {"url": sg.url, "token_env": TOKEN_VAR},
            "BS-GZ-006": {"url": gz.url, "token_env": TOKEN_VAR}}}})
        yield sg, gz, Executors(config)


def gk_tool(define: Define, endpoint: str = "") -> ToolDef:
    return define("gk", executor="gatekeeper", method="exec",
                  params="{ cmd: { type: string }, cwd: { type: string } }",
                  extra=f"endpoint: {endpoint}\n" if endpoint else "")


async def test_gatekeeper_posts_method_and_params_to_exec(nodes: tuple[Gatekeeper, Gatekeeper, Executors],
                                                           define: Define) -> None:
    sg, _, runners = nodes
    out = await runners.run(gk_tool(define), {"cmd": "df -h", "cwd": "/srv"}, deadline=soon())
    assert out.ok
    assert json.loads(out.stdout) == {"node": "BS-SG-001", "method": "exec", "params": {"cmd": "df -h", "cwd": "/srv"}}
    sent = sg.requests[-1]
    assert sent.json() == {"method": "exec", "params": {"cmd": "df -h", "cwd": "/srv"}}
    assert sent.headers["content-type"].startswith("application/json")
    assert sent.headers["authorization"] == f"Bearer {TOKEN}"


async def test_a_tool_picks_its_gatekeeper_by_endpoint_name(nodes: tuple[Gatekeeper, Gatekeeper, Executors],
                                                             define: Define) -> None:
    sg, gz, runners = nodes
    out = await runners.run(gk_tool(define, "BS-GZ-006"), {"cmd": "uptime"}, deadline=soon())
    assert json.loads(out.stdout)["node"] == "BS-GZ-006"
    assert len(gz.requests) == 1 and sg.requests == []


async def test_an_unknown_endpoint_name_runs_nothing_and_lists_the_configured(
        nodes: tuple[Gatekeeper, Gatekeeper, Executors], define: Define) -> None:
    sg, gz, runners = nodes
    out = await runners.run(gk_tool(define, "BS-XX-999"), {"cmd": "uptime"}, deadline=soon())
    assert not out.ok
    assert out.error == "executor gatekeeper has no endpoint named 'BS-XX-999' (configured: BS-GZ-006, BS-SG-001)"
    assert sg.requests == gz.requests == []


async def test_without_a_config_the_http_executors_say_what_to_add(define: Define) -> None:
    out = await Executors().run(gk_tool(define), {"cmd": "x"}, deadline=soon())
    assert not out.ok and "has no endpoint configured: add a [gatekeeper] table" in out.error


async def test_a_token_that_vanished_is_named_not_shown(nodes: tuple[Gatekeeper, Gatekeeper, Executors],
                                                        define: Define, monkeypatch: pytest.MonkeyPatch) -> None:
    _, _, runners = nodes
    monkeypatch.delenv(TOKEN_VAR)
    out = await runners.run(gk_tool(define), {"cmd": "x"}, deadline=soon())
    assert not out.ok and out.error == f"the environment variable {TOKEN_VAR} holds no token (it is unset or empty)"


# ---------------------------------------------------------------- hlpd-api


@pytest.fixture
def hldp(token: str) -> Iterator[tuple[HldpApi, Executors]]:
    with HldpApi() as api:
        yield api, Executors(from_dict({"hlpd-api": {"url": api.url + "/api", "token_env": TOKEN_VAR}}))


async def test_hlpd_get_fills_path_holes_and_sends_the_rest_as_query(hldp: tuple[HldpApi, Executors],
                                                                     define: Define) -> None:
    api, runners = hldp
    tool = define("mod", executor="hlpd-api", method="GET /modules/{id}",
                  params="{ id: { type: string }, depth: { type: integer }, tags: { type: array } }")
    out = await runners.run(tool, {"id": "L4/TOOL 003", "depth": 2, "tags": ["a", "b"]}, deadline=soon())
    assert out.ok
    sent = api.requests[-1]
    assert sent.path == "/api/modules/L4/TOOL 003"            # one segment: the slash arrived encoded
    assert json.loads(out.stdout) == {"id": "L4/TOOL 003", "query": {"depth": ["2"], "tags": ["a", "b"]}}
    assert sent.headers["authorization"] == f"Bearer {TOKEN}"


async def test_hlpd_bare_method_name_is_an_rpc_post_with_a_json_body(hldp: tuple[HldpApi, Executors],
                                                                     define: Define) -> None:
    api, runners = hldp
    tool = define("mem", executor="hlpd-api", method="memory.write",
                  params="{ key: { type: string }, value: { type: object } }")
    out = await runners.run(tool, {"key": "记忆", "value": {"n": 1}}, deadline=soon())
    assert out.ok and out.http_status == 201
    assert api.requests[-1].method == "POST" and api.requests[-1].path == "/api/memory.write"
    assert json.loads(out.stdout) == {"wrote": {"key": "记忆", "value": {"n": 1}}}


async def test_hlpd_delete_and_error_statuses(hldp: tuple[HldpApi, Executors], define: Define) -> None:
    _, runners = hldp
    drop = define("drop", executor="hlpd-api", method="DELETE /modules/{id}", params="{ id: { type: string } }")
    out = await runners.run(drop, {"id": "m1"}, deadline=soon())
    assert out.ok and out.http_status == 204 and out.stdout == b""
    get = define("get", executor="hlpd-api", method="GET /modules/{id}", params="{ id: { type: string } }")
    missing = await runners.run(get, {"id": "missing"}, deadline=soon())
    assert not missing.ok and missing.http_status == 404 and b"no module missing" in missing.stdout
    holeless = await runners.run(get, {}, deadline=soon())
    assert not holeless.ok and "needs id for its path" in holeless.error


async def test_hlpd_a_method_that_maps_to_nothing_is_a_definition_error(hldp: tuple[HldpApi, Executors],
                                                                        define: Define) -> None:
    _, runners = hldp
    out = await runners.run(define("bad", executor="hlpd-api", method="fetch the modules"), {}, deadline=soon())
    assert not out.ok and out.error.startswith("tool definition: method 'fetch the modules' is neither")


# ---------------------------------------------------------------- http


HTTP_PARAMS = ("{ url: { type: string }, method: { type: string }, headers: { type: object }, "
               "body: { type: string }, timeout_s: { type: number } }")


def http_tool(define: Define, network: bool = True, method: str = "request") -> ToolDef:
    """The generic http tool; it names the loopback fake server in network_hosts (loopback must be listed)."""
    perms = "network: true, network_hosts: [127.0.0.1, localhost]" if network else "network: false"
    return define("web", executor="http", method=method, params=HTTP_PARAMS, extra=f"permissions: {{ {perms} }}\n")


async def test_http_refuses_a_tool_without_the_network_permission(server: FakeServer, define: Define) -> None:
    out = await Executors().run(http_tool(define, network=False), {"url": server.url + "/x"}, deadline=soon())
    assert not out.ok and "does not declare permissions: { network: true }" in out.error
    assert server.requests == []


async def test_http_sends_method_headers_and_body(server: FakeServer, define: Define) -> None:
    server.route("PATCH", r"/items/.*", lambda ex: Reply(200, {"got": ex.request.json(), "path": ex.request.path}))
    out = await Executors().run(http_tool(define), {
        "url": server.url + "/items/笔 筒?q=中文 字", "method": "PATCH",
        "headers": {"X-Request-Id": "42", "Content-Type": "application/json"}, "body": '{"a": 1}'}, deadline=soon())
    assert out.ok, out.error
    sent = server.requests[-1]
    assert sent.method == "PATCH" and sent.path == "/items/笔 筒" and sent.query == {"q": ["中文 字"]}
    assert sent.headers["x-request-id"] == "42" and sent.json() == {"a": 1}


async def test_http_default_verb_is_the_tools_method_when_it_is_one(server: FakeServer, define: Define) -> None:
    server.route("HEAD", r"/health", lambda ex: Reply(200, b"ignored for HEAD"))
    out = await Executors().run(http_tool(define, method="HEAD"), {"url": server.url + "/health"}, deadline=soon())
    assert out.ok and out.stdout == b"" and server.requests[-1].method == "HEAD"


async def test_http_redirects_are_reported_not_followed(server: FakeServer, define: Define) -> None:
    server.route("GET", r"/old", lambda ex: Reply(301, b"", {"Location": "/new"}))
    out = await Executors().run(http_tool(define), {"url": server.url + "/old"}, deadline=soon())
    assert not out.ok and out.http_status == 301
    assert out.error == "HTTP 301 Moved Permanently (redirects are not followed; Location: /new)"
    assert [r.path for r in server.requests] == ["/old"]


async def test_http_timeout_s_bounds_the_request_below_the_tools_timeout(server: FakeServer, define: Define) -> None:
    server.route("GET", r"/slow", lambda ex: server.release.wait(30) and None)
    out = await Executors().run(http_tool(define), {"url": server.url + "/slow", "timeout_s": 0.2}, deadline=soon())
    assert out.timed_out and re.search(r"timed out after (19\d|200) ms while waiting for the response", out.error)


@pytest.mark.parametrize("url, why", [
    ("ftp://example.org/x", "must start with http:// or https://"),
    ("http://user:pw@127.0.0.1/x", "carries a user or password"),
    ("http://localhost:notaport/", "not valid"),
])
async def test_http_refuses_urls_it_cannot_send(define: Define, url: str, why: str) -> None:
    out = await Executors().run(http_tool(define), {"url": url}, deadline=soon())
    assert not out.ok and out.error.startswith("cannot send the request:") and why in out.error


async def test_http_refused_on_every_address_of_a_name_is_refused(define: Define) -> None:
    probe = socket.socket()
    probe.bind(("127.0.0.1", 0))
    port = probe.getsockname()[1]
    probe.close()
    out = await Executors().run(http_tool(define), {"url": f"http://localhost:{port}/x"}, deadline=soon())
    assert not out.ok and out.error == f"connection refused by localhost:{port}" and out.retryable


def test_several_addresses_refusing_count_as_refused() -> None:
    # asyncio 3.11 joins one error per address (::1, 127.0.0.1) into an OSError without an errno.
    from bitong.agent.calling.executors.http_client import _all_refused

    joined = OSError("Multiple exceptions: [Errno 111] Connect call failed ('::1', 9, 0, 0), "
                     "[Errno 111] Connect call failed ('127.0.0.1', 9)")
    assert _all_refused(joined)
    assert not _all_refused(OSError("Multiple exceptions: [Errno 111] x, [Errno 113] No route to host"))


async def test_http_hosts_in_the_config_replace_the_definitions(server: FakeServer, define: Define) -> None:
    plain = define("web-plain", executor="http", method="request", params=HTTP_PARAMS,
                   extra="permissions: { network: true }\n")
    refused = await Executors().run(plain, {"url": server.url + "/x"}, deadline=soon())
    assert not refused.ok and "loopback or link-local" in refused.error and server.requests == []
    granted = Executors(from_dict({"network_hosts": {"web-plain": ["127.0.0.1"]}}))
    assert (await granted.run(plain, {"url": server.url + "/x"}, deadline=soon())).http_status == 404
    narrowed = Executors(from_dict({"network_hosts": {"web": ["api.example.com"]}}))
    out = await narrowed.run(http_tool(define), {"url": server.url + "/x"}, deadline=soon())
    assert not out.ok and "network_hosts" in out.error and "nothing was sent" in out.error   # 127.0.0.1 no more
