"""The approvals page: real HTTP on loopback against a real server's waiting calls."""

from __future__ import annotations

import asyncio
import http.client
import urllib.parse
from collections.abc import AsyncIterator
from pathlib import Path

import grpc
import pytest

from bitong.agent import config
from bitong.agent.serving.approvals_page import COOKIE, parse_address
from bitong.v1 import agent_pb2_grpc as pb_grpc
from tests.agent.calling.test_humanconfirm import human_tool, request
from tests.support import WriteTool


class Page:
    def __init__(self, car: object, agent: pb_grpc.ToolAgentStub) -> None:
        self.car = car
        self.agent = agent
        self.page = car.page   # type: ignore[attr-defined]
        self.token: str = self.page.token

    def http(self, method: str, path: str, *, body: dict[str, str] | None = None,
             headers: dict[str, str] | None = None) -> http.client.HTTPResponse:
        conn = http.client.HTTPConnection(self.page.host, self.page.port, timeout=30)
        data = urllib.parse.urlencode(body).encode() if body is not None else None
        sent = {"Content-Type": "application/x-www-form-urlencoded"} if data is not None else {}
        conn.request(method, path, body=data, headers={**sent, **(headers or {})})
        response = conn.getresponse()
        response.body = response.read()   # type: ignore[attr-defined]
        conn.close()
        return response

    async def wait_listed(self, tool: str) -> str:
        """The id of the pending request for ``tool``, as the page's JSON lists it."""
        import json

        for _ in range(1000):
            response = await asyncio.to_thread(self.http, "GET", "/pending.json",
                                               headers={"Authorization": f"Bearer {self.token}"})
            listed = [r for r in json.loads(response.body) if r["tool"] == tool and r["state"] == "pending"]  # type: ignore[attr-defined]
            if listed:
                return str(listed[0]["id"])
            await asyncio.sleep(0.01)
        raise AssertionError("never listed")


@pytest.fixture
async def page(tools_root: Path, tmp_path: Path, write_tool: WriteTool) -> AsyncIterator[Page]:
    from bitong.agent.serving.server import Sidecar

    write_tool("guarded", human_tool())
    car = Sidecar([str(tools_root)], f"unix:{tmp_path}/bitong.sock", config=config.from_dict({}, "t.toml"),
                  poll_s=0.1, grace_s=5, approvals_http="127.0.0.1:0")
    await car.start()
    try:
        async with grpc.aio.insecure_channel(car.address) as channel:
            yield Page(car, pb_grpc.ToolAgentStub(channel))
    finally:
        await car.stop(0)


async def test_the_page_lists_the_waiting_call_and_its_approve_button_runs_it(page: Page) -> None:
    call = asyncio.ensure_future(page.agent.Call(request("guarded", word="<script>alert(1)</script>"), timeout=60))
    approval_id = await page.wait_listed("guarded")

    entered = await asyncio.to_thread(page.http, "GET", f"/?token={page.token}")
    assert entered.status == 303 and entered.getheader("Location") == "/"
    cookie = entered.getheader("Set-Cookie") or ""
    assert cookie.startswith(f"{COOKIE}={page.token};") and "HttpOnly" in cookie and "SameSite=Strict" in cookie

    listed = await asyncio.to_thread(page.http, "GET", "/", headers={"Cookie": f"{COOKIE}={page.token}"})
    html = listed.body.decode()   # type: ignore[attr-defined]
    assert listed.status == 200 and approval_id in html and "guarded" in html
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html and "<script>" not in html
    assert listed.getheader("X-Frame-Options") == "DENY" and "default-src 'none'" in listed.getheader(
        "Content-Security-Policy", "")

    # a form posted with the cookie alone (what another site could make the browser send) decides nothing
    forged = await asyncio.to_thread(page.http, "POST", "/approve", body={"id": approval_id},
                                     headers={"Cookie": f"{COOKIE}={page.token}"})
    assert forged.status == 403 and not call.done()

    pressed = await asyncio.to_thread(page.http, "POST", "/approve", body={"id": approval_id, "token": page.token})
    assert pressed.status == 303
    result = await call
    assert result.ok and result.output == b"ran <script>alert(1)</script>\n" and result.approval_id == approval_id


async def test_the_deny_button_refuses_the_waiting_call(page: Page) -> None:
    call = asyncio.ensure_future(page.agent.Call(request("guarded", word="x"), timeout=60))
    approval_id = await page.wait_listed("guarded")
    denied = await asyncio.to_thread(page.http, "POST", "/deny", body={"id": approval_id, "reason": "no"},
                                     headers={"Authorization": f"Bearer {page.token}", "Accept": "application/json"})
    assert denied.status == 200 and b'"state": "denied"' in denied.body   # type: ignore[attr-defined]
    result = await call
    assert not result.ok and result.output == b"" and "denied by the approvals page (127.0.0.1): no" in result.error
    again = await asyncio.to_thread(page.http, "POST", "/approve", body={"id": approval_id, "token": page.token})
    assert again.status == 409


async def test_without_the_token_or_from_another_host_name_nothing_is_shown_or_decided(page: Page) -> None:
    waiting = await page.agent.Call(request("guarded", word="x"), timeout=1)
    assert waiting.needs_confirmation
    bare = await asyncio.to_thread(page.http, "GET", "/")
    assert bare.status == 401 and waiting.approval_id.encode() not in bare.body   # type: ignore[attr-defined]
    wrong = await asyncio.to_thread(page.http, "GET", "/?token=guess")
    assert wrong.status == 401
    guessed = await asyncio.to_thread(page.http, "POST", "/approve", body={"id": waiting.approval_id, "token": "guess"})
    assert guessed.status == 403
    rebound = await asyncio.to_thread(page.http, "GET", "/", headers={"Host": f"evil.example:{page.page.port}",
                                                                     "Authorization": f"Bearer {page.token}"})
    assert rebound.status == 421   # a DNS-rebinding page reaches the port under another name
    unknown = await asyncio.to_thread(page.http, "POST", "/approve", body={"id": "forged", "token": page.token})
    assert unknown.status == 404
    collected = await page.agent.Call(request("guarded", waiting.approval_id, word="x"), timeout=1)
    assert collected.needs_confirmation and collected.output == b""   # still waiting: nothing decided it


@pytest.mark.parametrize("address", ["0.0.0.0:8080", "10.1.2.3:80", "example.org:80", "[::]:80"])
def test_only_a_loopback_address_is_accepted(address: str) -> None:
    with pytest.raises(ValueError, match="loopback address only"):
        parse_address(address)


def test_loopback_addresses_are_accepted() -> None:
    assert parse_address("127.0.0.1:0") == ("127.0.0.1", 0)
    assert parse_address("localhost:8377") == ("127.0.0.1", 8377)
    assert parse_address("[::1]:8377") == ("::1", 8377)
