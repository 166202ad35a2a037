"""Where the sidecar listens, how a listen address becomes a gRPC target, and what a listener demands.

Its own small module so the CLI can name the default without importing the
server (and grpc) for commands that never start one.

The rules for a listener (issue 9 §4), checked by :func:`check` before
anything binds:

* ``unix:/path``: the peer's uid (SO_PEERCRED) is the caller; the socket is
  created with ``--socket-mode`` (0600). TLS options do not apply.
* TCP on a loopback address: without any authentication configured, calls
  are anonymous (development), with a warning at start.
* TCP on any other address: TLS (``--tls-cert``/``--tls-key``) is required,
  and so is a way for callers to say who they are: client certificates
  (``--tls-client-ca``, mTLS) or bearer tokens (``[auth.tokens]``).
"""

from __future__ import annotations

import os
from typing import NamedTuple

__all__ = ["DEFAULT_LISTEN", "ListenError", "Security", "check", "grpc_address", "is_loopback", "host_of", "parse"]

DEFAULT_LISTEN = "127.0.0.1:50151"


class ListenError(ValueError):
    """The listener cannot start as configured; ``str()`` says what to add or change."""


class Security(NamedTuple):
    """The transport options of ``bitong serve``: TLS files and the unix socket's mode.

    (A NamedTuple, and ipaddress/socket imported where used: ``bitong --help``
    imports this module and must start as fast as ``python -c pass``.)"""

    tls_cert: str = ""
    tls_key: str = ""
    tls_client_ca: str = ""
    socket_mode: int = 0o600

    @property
    def tls(self) -> bool:
        return bool(self.tls_cert)


def grpc_address(listen: str) -> str:
    """``host:port`` or ``unix:/path`` as gRPC wants it (``unix:`` paths must be absolute)."""
    if listen.startswith("unix:") and not listen.startswith("unix:/"):
        return "unix:" + os.path.abspath(listen[5:])
    return listen


def host_of(listen: str) -> str:
    """The host part of ``host:port`` / ``[v6]:port``, brackets removed."""
    host = listen.rsplit(":", 1)[0]
    return host[1:-1] if host.startswith("[") and host.endswith("]") else host


def is_loopback(listen: str) -> bool:
    """True when every address the listen host names is a loopback address (an unresolvable name is not)."""
    import ipaddress
    import socket

    host = host_of(listen)
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        pass
    if not host:
        return False   # ":50151" listens on every address
    try:
        infos = socket.getaddrinfo(host, None, proto=socket.IPPROTO_TCP)
    except OSError:
        return False
    return bool(infos) and all(ipaddress.ip_address(str(info[4][0]).split("%", 1)[0]).is_loopback
                               for info in infos)


def parse(listen: str) -> None:
    """Refuse an address gRPC would misread (ListenError says what is wrong and what to write).

    gRPC itself takes ``127.0.0.1`` (no port) or ``host:70000`` and listens
    on a port of its choosing, or not at all: a sidecar must be where its
    callers were told it is. Port 0 is allowed, spelt out: any free port,
    printed at start (tests use it).
    """
    example = "host:port (127.0.0.1:50151, [::1]:50151) or unix:/path/to.sock"
    if listen.startswith("unix:"):
        if not listen[len("unix:"):].strip():
            raise ListenError(f"--listen {listen!r}: a unix socket needs a path: {example}")
        return
    host, colon, port = listen.rpartition(":")
    bare_v6 = ":" in host and not (host.startswith("[") and host.endswith("]"))
    if not colon or bare_v6 or listen.endswith("]"):
        raise ListenError(f"--listen {listen!r}: the port is missing: expected {example}")
    if not port.isdigit():
        raise ListenError(f"--listen {listen!r}: the port {port!r} is not a number: expected {example}")
    if int(port) > 65535:
        raise ListenError(f"--listen {listen!r}: port {int(port)} is out of range (0-65535; 0 picks a free port)")


def check(listen: str, security: Security, *, tokens: bool) -> bool:
    """Refuse a listener that would let callers in unnamed (ListenError); True when calls will be anonymous."""
    parse(listen)
    if bool(security.tls_cert) != bool(security.tls_key):
        raise ListenError("--tls-cert and --tls-key go together: give both (the server's certificate chain "
                          "and its private key)")
    if security.tls_client_ca and not security.tls:
        raise ListenError("--tls-client-ca needs --tls-cert and --tls-key: client certificates are checked "
                          "during a TLS handshake")
    for option, path in (("--tls-cert", security.tls_cert), ("--tls-key", security.tls_key),
                         ("--tls-client-ca", security.tls_client_ca)):
        if path and not os.path.isfile(path):
            raise ListenError(f"{option} {path}: no such file")
    if listen.startswith("unix:"):
        if security.tls:
            raise ListenError("TLS options apply to a TCP listener; a unix socket's caller is its peer uid")
        return False
    mtls = bool(security.tls_client_ca)
    if is_loopback(listen):
        return not (mtls or tokens)
    if not security.tls:
        raise ListenError(f"--listen {listen} is not a loopback address: anyone who can reach it could run tools. "
                          "Give --tls-cert and --tls-key (and --tls-client-ca or [auth.tokens] in the config so "
                          "callers say who they are), or listen on 127.0.0.1 or a unix socket")
    if not (mtls or tokens):
        raise ListenError(f"--listen {listen} is not a loopback address and no caller would have to say who it "
                          "is: give --tls-client-ca (client certificates) or [auth.tokens] in the config")
    return False
