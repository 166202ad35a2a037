"""Where the generic ``http`` executor may connect: ``permissions.network_hosts`` (issue 9 §1).

``network: true`` alone reaches any public host; ``network_hosts`` narrows
it to the hosts listed. Loopback and link-local addresses (127.0.0.0/8,
::1, 169.254.0.0/16, fe80::/10, and the unspecified 0.0.0.0 and ::) are
refused unless listed explicitly, with or without a list: a model talked
into ``http://127.0.0.1:50151/`` or a cloud metadata address must not reach
the server's own port or the host's credentials.

An entry is a host name (``api.example.com``, case-insensitive), a
wildcard for its subdomains (``*.example.com``, not the name itself), an
address (``127.0.0.1``, ``::1``) or a network (``10.0.0.0/8``). A name is
checked, then resolved, and every address it resolves to is checked; the
connection then goes to a checked address (with the name kept for TLS and
the Host header), so a second DNS answer cannot lead elsewhere.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from collections.abc import Sequence

__all__ = ["Refused", "resolve"]

_Address = ipaddress.IPv4Address | ipaddress.IPv6Address


class Refused(ValueError):
    """The destination is not allowed; ``str()`` says why, naming the permission."""


def _special(address: _Address) -> bool:
    return address.is_loopback or address.is_link_local or address.is_unspecified


def _address_listed(address: _Address, hosts: Sequence[str]) -> bool:
    for entry in hosts:
        try:
            if address in ipaddress.ip_network(entry.strip(), strict=False):
                return True
        except ValueError:
            continue
    return False


def _name_listed(name: str, hosts: Sequence[str]) -> bool:
    name = name.lower().rstrip(".")
    for entry in hosts:
        entry = entry.strip().lower().rstrip(".")
        if entry == name or (entry.startswith("*.") and name.endswith(entry[1:])):
            return True
    return False


async def resolve(host: str, port: int, hosts: Sequence[str]) -> list[str]:
    """The addresses to connect to for ``host``, in order; or :class:`Refused` (or OSError: no address)."""
    try:
        literal: _Address | None = ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        literal = None
    if literal is not None:
        if _address_listed(literal, hosts) if hosts else not _special(literal):
            return [str(literal)]
        raise Refused(_why(host, literal, hosts))
    named = _name_listed(host, hosts)
    if hosts and not named:
        raise Refused(f"{host} is not in the tool's permissions.network_hosts: {', '.join(hosts)}")
    infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
    addresses = [ipaddress.ip_address(str(info[4][0]).split("%")[0]) for info in infos]
    for address in addresses:
        if _special(address) and not named and not _address_listed(address, hosts):
            raise Refused(_why(host, address, hosts))
    if not addresses:
        raise OSError(f"{host} resolves to no address")
    return list(dict.fromkeys(str(address) for address in addresses))


def _why(host: str, address: _Address, hosts: Sequence[str]) -> str:
    if _special(address):
        return (f"{host} is a loopback or link-local address ({address}): a tool reaches one only when its "
                f"permissions.network_hosts lists it")
    return f"{host} is not in the tool's permissions.network_hosts: {', '.join(hosts)}"
