"""What a listener demands before it starts: TLS off loopback, a way to name callers, one server per port."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from bitong.agent.serving.listen import ListenError, Security, check, is_loopback, parse
from tests.agent.certs import CA


def test_loopback_addresses() -> None:
    assert is_loopback("127.0.0.1:50151") and is_loopback("[::1]:9000") and is_loopback("localhost:1")
    assert not is_loopback("0.0.0.0:9000") and not is_loopback("[::]:9000") and not is_loopback(":9000")
    assert not is_loopback("10.1.2.3:9000")


def test_a_non_loopback_listener_needs_tls_and_named_callers(tmp_path: Path) -> None:
    with pytest.raises(ListenError, match="not a loopback address.*--tls-cert"):
        check("0.0.0.0:9000", Security(), tokens=True)
    ca = CA(tmp_path)
    server = ca.issue("localhost", server=True)
    tls = Security(tls_cert=str(server.cert), tls_key=str(server.key))
    with pytest.raises(ListenError, match="--tls-client-ca.*auth.tokens"):
        check("0.0.0.0:9000", tls, tokens=False)
    assert check("0.0.0.0:9000", tls, tokens=True) is False
    mtls = Security(tls_cert=str(server.cert), tls_key=str(server.key), tls_client_ca=str(ca.path))
    assert check("0.0.0.0:9000", mtls, tokens=False) is False


def test_loopback_without_auth_is_the_only_anonymous_case(tmp_path: Path) -> None:
    assert check("127.0.0.1:9000", Security(), tokens=False) is True
    assert check("127.0.0.1:9000", Security(), tokens=True) is False
    assert check("unix:/tmp/x.sock", Security(), tokens=False) is False


def test_tls_options_are_checked_together(tmp_path: Path) -> None:
    with pytest.raises(ListenError, match="go together"):
        check("127.0.0.1:1", Security(tls_cert="/x"), tokens=False)
    with pytest.raises(ListenError, match="needs --tls-cert"):
        check("127.0.0.1:1", Security(tls_client_ca="/x"), tokens=False)
    with pytest.raises(ListenError, match="no such file"):
        check("127.0.0.1:1", Security(tls_cert=str(tmp_path / "a"), tls_key=str(tmp_path / "b")), tokens=False)


async def test_a_second_server_on_a_port_in_use_fails_clearly(start_sidecar: Any) -> None:
    first = await start_sidecar("127.0.0.1:0")
    with pytest.raises(OSError, match=f"cannot listen on 127.0.0.1:{first.port}: port {first.port} is already "
                                      "in use"):
        await start_sidecar(f"127.0.0.1:{first.port}")


async def test_bitong_serve_says_why_it_cannot_start(start_sidecar: Any, tools_root: Path) -> None:
    first = await start_sidecar("127.0.0.1:0")
    base = [sys.executable, "-m", "bitong", "serve", "--tools", str(tools_root), "--no-semantic"]
    taken = subprocess.run([*base, "--listen", f"127.0.0.1:{first.port}"], capture_output=True, text=True,
                           timeout=60)
    assert taken.returncode == 2
    assert f"port {first.port} is already in use" in taken.stderr
    open_to_all = subprocess.run([*base, "--listen", "0.0.0.0:0"], capture_output=True, text=True, timeout=60)
    assert open_to_all.returncode == 2
    assert "is not a loopback address" in open_to_all.stderr


@pytest.mark.parametrize(("listen", "reason"), [
    ("127.0.0.1", "the port is missing"), ("::1", "the port is missing"), ("[::1]", "the port is missing"),
    ("localhost:http", "is not a number"), ("127.0.0.1:70000", "out of range"), ("unix:", "needs a path"),
])
def test_an_address_grpc_would_misread_is_refused_before_anything_binds(listen: str, reason: str) -> None:
    with pytest.raises(ListenError, match=reason):
        parse(listen)
    done = subprocess.run([sys.executable, "-m", "bitong", "serve", "--listen", listen], capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 2
    assert done.stderr.startswith(f"bitong: --listen {listen!r}: ") and reason in done.stderr
    assert "Traceback" not in done.stderr


def test_the_addresses_a_user_writes_are_accepted() -> None:
    for listen in ("127.0.0.1:50151", "[::1]:9000", "localhost:0", ":9000", "0.0.0.0:9000", "unix:/run/b.sock"):
        parse(listen)
