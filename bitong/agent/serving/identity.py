"""Who is calling: one :class:`Caller` per request, and how it was established.

A caller is who it says it is only when something the caller cannot forge
says so: the kernel (the peer's uid on a unix socket, SO_PEERCRED), a
certificate chain to the configured client CA (mTLS), or a configured bearer
token. Anything else is the anonymous loopback caller, which the server
accepts only on a loopback TCP listener without any authentication
configured (development), and says so at start.

Identities of different kinds cannot be confused: a token name is letters,
digits, ``.``, ``_`` and ``-`` (see :mod:`bitong.agent.config`), a unix peer is
``uid:N`` and a certificate subject holds ``=`` (``CN=agent-a,O=ops``).
"""

from __future__ import annotations

import dataclasses
import hmac
from collections.abc import Callable, Iterable, Mapping

__all__ = ["Caller", "ANONYMOUS", "Authenticator", "Unauthenticated", "VIA_UNIX", "VIA_MTLS", "VIA_TOKEN",
           "VIA_LOOPBACK", "unix_peer", "check_token", "bearer"]

VIA_UNIX = "unix-peer-uid"     # SO_PEERCRED on the unix socket
VIA_MTLS = "mtls-subject"      # the client certificate's subject, verified against --tls-client-ca
VIA_TOKEN = "bearer-token"     # a configured [auth.tokens.NAME] token
VIA_LOOPBACK = "anonymous-loopback"   # no authentication: a loopback TCP listener in development


@dataclasses.dataclass(frozen=True)
class Caller:
    """One authenticated (or knowingly anonymous) caller.

    ``id`` is what ``[callers.ID]`` policies and the audit trail name;
    ``via`` says how it was established; ``uid`` is the unix peer's uid
    when the connection came over the unix socket (also when a token named
    the caller there), else None.
    """

    id: str
    via: str
    uid: int | None = None

    def describe(self) -> str:
        return f"{self.id} ({self.via})"


ANONYMOUS = Caller("anonymous", VIA_LOOPBACK)

Metadata = Iterable[tuple[str, str | bytes]]


class Unauthenticated(Exception):
    """The request names no caller the server accepts; ``str()`` says why (never a secret)."""


def unix_peer(uid: int) -> Caller:
    return Caller(f"uid:{uid}", VIA_UNIX, uid)


def bearer(metadata: Metadata | None) -> str | None:
    """The token of an ``authorization: Bearer <token>`` header, None without one; raises for a malformed one."""
    found: str | None = None
    for key, value in metadata or ():
        if key.lower() != "authorization":
            continue
        text = value.decode("utf-8", "replace") if isinstance(value, bytes) else value
        scheme, _, token = text.strip().partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            raise Unauthenticated("the authorization header must be 'Bearer <token>'")
        if found is not None:
            raise Unauthenticated("more than one authorization header")
        found = token.strip()
    return found


def check_token(presented: str, tokens: Mapping[str, str]) -> str | None:
    """The name of the configured token equal to ``presented``, or None.

    Every configured token is compared (in constant time each), so the time
    taken does not say which one came close.
    """
    given = presented.encode("utf-8", "replace")
    match: str | None = None
    for name, value in tokens.items():
        if hmac.compare_digest(given, value.encode("utf-8", "replace")):
            match = name
    return match



@dataclasses.dataclass
class Authenticator:
    """Who is calling, from what the transport and the request carry; raises :class:`Unauthenticated`.

    In this order: a bearer token, when one is presented, must match a
    configured one and names the caller (on the unix socket too, where it
    says which of several agents of one uid calls); else the unix peer's uid;
    else the verified client certificate's subject; else, only where
    ``anonymous`` is allowed (loopback TCP without any authentication
    configured), the anonymous caller.
    """

    tokens: Callable[[], Mapping[str, str]] = dict          # name -> current value, read at each request
    unix_peers: Callable[[str], Caller | None] | None = None   # the unix front's peer -> caller map
    mtls: bool = False
    anonymous: bool = False

    def authenticate(self, peer: str, auth_context: Mapping[str, Iterable[bytes]], metadata: Metadata | None
                     ) -> Caller:
        token = bearer(metadata)
        unix = self.unix_peers(peer) if self.unix_peers is not None else None
        if token is not None:
            configured = self.tokens()
            if not configured:
                raise Unauthenticated("a bearer token was presented, but this server has no [auth.tokens] "
                                      "configured")
            name = check_token(token, configured)
            if name is None:
                raise Unauthenticated("the bearer token matches none of the server's [auth.tokens]")
            return Caller(name, VIA_TOKEN, unix.uid if unix is not None else None)
        if self.unix_peers is not None:
            if unix is None:
                raise Unauthenticated("this connection did not come through the server's unix socket, so "
                                      "its peer is unknown")
            return unix
        if self.mtls:
            subject = next(iter(auth_context.get("x509_subject", ())), b"")
            if subject:
                return Caller(subject.decode("utf-8", "replace"), VIA_MTLS)
        if self.anonymous:
            return ANONYMOUS
        how = ["a bearer token (authorization: Bearer <token>)"] if self.tokens() else []
        if self.mtls:
            how.append("a client certificate signed by the server's --tls-client-ca")
        raise Unauthenticated(f"this server needs the caller to say who it is: {' or '.join(how) or 'nothing'}")
