"""Callers say who they are: bearer tokens and client certificates, on a real TCP server.

The audit trail (``--audit``) is where the tests read which identity the
server established; a refused caller gets UNAUTHENTICATED and runs nothing.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import grpc
import pytest
from google.protobuf import struct_pb2

from bitong.agent.config import from_dict
from bitong.agent.serving.identity import (
    ANONYMOUS,
    VIA_MTLS,
    VIA_TOKEN,
    VIA_UNIX,
    Authenticator,
    Caller,
    Unauthenticated,
    bearer,
    check_token,
    unix_peer,
)
from bitong.agent.serving.listen import Security
from bitong.v1 import agent_pb2 as pb
from bitong.v1 import agent_pb2_grpc as pb_grpc
from tests.agent.certs import CA

TOKEN_A = "token-of-agent-a-0123456789"
TOKEN_B = "token-of-agent-b-9876543210"


def _echo(text: str = "hi") -> pb.CallRequest:
    params = struct_pb2.Struct()
    params.update({"cmd": f"echo {text}", "cwd": "/tmp"})
    return pb.CallRequest(tool="shell-exec", params=params)


def _lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


@pytest.fixture
def tokens(monkeypatch: pytest.MonkeyPatch) -> Any:
    monkeypatch.setenv("T_AGENT_A", TOKEN_A)
    monkeypatch.setenv("T_AGENT_B", TOKEN_B)
    return from_dict({"auth": {"tokens": {"agent-a": {"token_env": "T_AGENT_A"},
                                          "agent-b": {"token_env": "T_AGENT_B"}}}})


# ---------------------------------------------------------------- the rules, one by one

def test_a_token_names_its_caller_and_nothing_else_does() -> None:
    auth = Authenticator(tokens=lambda: {"agent-a": TOKEN_A})
    assert auth.authenticate("ipv4:127.0.0.1:4000", {}, [("authorization", f"Bearer {TOKEN_A}")]) == \
        Caller("agent-a", VIA_TOKEN)
    with pytest.raises(Unauthenticated, match="matches none"):
        auth.authenticate("ipv4:127.0.0.1:4000", {}, [("authorization", "Bearer guess")])
    with pytest.raises(Unauthenticated, match="needs the caller to say who it is"):
        auth.authenticate("ipv4:127.0.0.1:4000", {}, [])


def test_a_malformed_or_doubled_authorization_header_is_refused() -> None:
    with pytest.raises(Unauthenticated, match="Bearer <token>"):
        bearer([("authorization", f"Basic {TOKEN_A}")])
    with pytest.raises(Unauthenticated, match="more than one"):
        bearer([("authorization", "Bearer a"), ("authorization", "Bearer b")])
    assert bearer([("other", "x")]) is None


def test_every_configured_token_is_compared() -> None:
    assert check_token(TOKEN_B, {"agent-a": TOKEN_A, "agent-b": TOKEN_B}) == "agent-b"
    assert check_token(TOKEN_A[:-1], {"agent-a": TOKEN_A}) is None


def test_on_the_unix_socket_the_uid_unless_a_valid_token_names_the_caller() -> None:
    peers = {"unix:/run/x/c1": unix_peer(1000)}
    auth = Authenticator(tokens=lambda: {"agent-a": TOKEN_A}, unix_peers=peers.get)
    assert auth.authenticate("unix:/run/x/c1", {}, []) == Caller("uid:1000", VIA_UNIX, 1000)
    assert auth.authenticate("unix:/run/x/c1", {}, [("authorization", f"Bearer {TOKEN_A}")]) == \
        Caller("agent-a", VIA_TOKEN, 1000)
    with pytest.raises(Unauthenticated, match="matches none"):   # never downgraded to the uid
        auth.authenticate("unix:/run/x/c1", {}, [("authorization", "Bearer wrong")])
    with pytest.raises(Unauthenticated, match="did not come through"):
        auth.authenticate("unix:", {}, [])


def test_the_certificate_subject_is_the_caller_under_mtls() -> None:
    auth = Authenticator(mtls=True)
    context = {"x509_subject": [b"CN=agent-a,O=ops"], "transport_security_type": [b"ssl"]}
    assert auth.authenticate("ipv4:10.0.0.2:5000", context, []) == Caller("CN=agent-a,O=ops", VIA_MTLS)


def test_anonymous_only_where_allowed() -> None:
    assert Authenticator(anonymous=True).authenticate("ipv4:127.0.0.1:1", {}, []) == ANONYMOUS
    with pytest.raises(Unauthenticated):
        Authenticator(tokens=lambda: {"a": TOKEN_A}).authenticate("ipv4:127.0.0.1:1", {}, [])


def test_token_names_are_checked_and_must_differ(monkeypatch: pytest.MonkeyPatch) -> None:
    from bitong.agent.config import ConfigError

    monkeypatch.setenv("SAME", "one-token-for-two")
    with pytest.raises(ConfigError, match="hold the same token"):
        from_dict({"auth": {"tokens": {"a": {"token_env": "SAME"}, "b": {"token_env": "SAME"}}}})
    with pytest.raises(ConfigError, match="caller's id"):
        from_dict({"auth": {"tokens": {"uid:0": {"token_env": "SAME"}}}})
    with pytest.raises(ConfigError, match="never written in the config"):
        from_dict({"auth": {"tokens": {"a": {"token": "inline-value"}}}})


# ---------------------------------------------------------------- a real TCP server

async def test_tcp_with_tokens_refuses_a_caller_without_one_and_a_wrong_one(
        start_sidecar: Any, tokens: Any, tmp_path: Path) -> None:
    trail = tmp_path / "audit.jsonl"
    car = await start_sidecar("127.0.0.1:0", config=tokens, audit_path=str(trail))
    async with grpc.aio.insecure_channel(car.address) as channel:
        stub = pb_grpc.ToolAgentStub(channel)
        with pytest.raises(grpc.aio.AioRpcError) as none:
            await stub.Call(_echo())
        assert none.value.code() == grpc.StatusCode.UNAUTHENTICATED
        with pytest.raises(grpc.aio.AioRpcError) as wrong:
            await stub.Call(_echo(), metadata=[("authorization", "Bearer not-a-token")])
        assert wrong.value.code() == grpc.StatusCode.UNAUTHENTICATED
        assert "matches none" in (wrong.value.details() or "")
        with pytest.raises(grpc.aio.AioRpcError) as listing:
            await stub.ListTools(pb.ListToolsRequest())
        assert listing.value.code() == grpc.StatusCode.UNAUTHENTICATED
        ok = await stub.Call(_echo("as-b"), metadata=[("authorization", f"Bearer {TOKEN_B}")])
        assert ok.ok and ok.output == b"as-b\n"
    lines = _lines(trail)
    assert [(e["caller"], e["outcome"], e.get("status")) for e in lines] == [
        ("unauthenticated", "refused", "UNAUTHENTICATED"), ("unauthenticated", "refused", "UNAUTHENTICATED"),
        ("agent-b", "ok", None)]
    assert lines[2]["caller_via"] == VIA_TOKEN
    assert TOKEN_B not in trail.read_text()


async def test_mtls_names_the_caller_by_its_certificate_and_refuses_one_without(
        start_sidecar: Any, tmp_path: Path) -> None:
    ca = CA(tmp_path)
    server = ca.issue("localhost", server=True)
    client = ca.issue("agent-a")
    stranger_ca = CA(tmp_path, "stranger CA")
    stranger = stranger_ca.issue("intruder")
    trail = tmp_path / "audit.jsonl"
    car = await start_sidecar("127.0.0.1:0", audit_path=str(trail), security=Security(
        tls_cert=str(server.cert), tls_key=str(server.key), tls_client_ca=str(ca.path)))
    target = f"localhost:{car.port}"

    creds = grpc.ssl_channel_credentials(ca.path.read_bytes(), client.key.read_bytes(), client.cert.read_bytes())
    async with grpc.aio.secure_channel(target, creds) as channel:
        result = await pb_grpc.ToolAgentStub(channel).Call(_echo("mtls"))
    assert result.ok and result.output == b"mtls\n"
    assert [(e["caller"], e["caller_via"]) for e in _lines(trail)] == [("CN=agent-a,O=bitong-tests", VIA_MTLS)]

    for key, cert in ((None, None), (stranger.key.read_bytes(), stranger.cert.read_bytes())):
        creds = grpc.ssl_channel_credentials(ca.path.read_bytes(), key, cert)
        async with grpc.aio.secure_channel(target, creds) as channel:
            with pytest.raises(grpc.aio.AioRpcError) as refused:
                await pb_grpc.ToolAgentStub(channel).Call(_echo(), timeout=10)
        assert refused.value.code() == grpc.StatusCode.UNAVAILABLE   # the TLS handshake itself fails
    assert len(_lines(trail)) == 1   # nothing reached the service


async def test_loopback_without_auth_is_anonymous_and_warned_about(
        start_sidecar: Any, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    trail = tmp_path / "audit.jsonl"
    with caplog.at_level("WARNING", logger="bitong.server"):
        car = await start_sidecar("127.0.0.1:0", audit_path=str(trail))
    assert any("without authentication" in r.getMessage() for r in caplog.records)
    async with grpc.aio.insecure_channel(car.address) as channel:
        assert (await pb_grpc.ToolAgentStub(channel).Call(_echo())).ok
    assert _lines(trail)[0]["caller"] == "anonymous"
