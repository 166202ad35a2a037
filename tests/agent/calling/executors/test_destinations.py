"""Where the generic http executor may connect: network_hosts, and loopback/link-local only when listed."""

from __future__ import annotations

import asyncio

import pytest

from bitong.agent.calling.executors.destinations import Refused, resolve


def check(host: str, hosts: list[str]) -> list[str]:
    return asyncio.run(resolve(host, 80, hosts))


@pytest.mark.parametrize("host", ["127.0.0.1", "127.8.9.10", "::1", "[::1]", "169.254.169.254", "fe80::1",
                                  "0.0.0.0", "localhost"])
def test_loopback_and_link_local_are_refused_unless_listed(host: str) -> None:
    with pytest.raises(Refused, match="loopback or link-local"):
        check(host, [])


def test_a_public_address_passes_without_a_list() -> None:
    assert check("93.184.216.34", []) == ["93.184.216.34"]


@pytest.mark.parametrize(("host", "hosts", "addresses"), [
    ("127.0.0.1", ["127.0.0.1"], ["127.0.0.1"]),
    ("127.0.0.1", ["127.0.0.0/8"], ["127.0.0.1"]),
    ("10.1.2.3", ["10.0.0.0/8"], ["10.1.2.3"]),
    ("::1", ["::1"], ["::1"]),
])
def test_listed_addresses_and_networks_pass(host: str, hosts: list[str], addresses: list[str]) -> None:
    assert check(host, hosts) == addresses


def test_a_listed_name_may_resolve_to_loopback() -> None:
    assert set(check("localhost", ["localhost"])) <= {"127.0.0.1", "::1"}


@pytest.mark.parametrize(("host", "hosts"), [
    ("api.example.com", ["other.example.com"]),
    ("example.com", ["*.example.com"]),          # the wildcard is for subdomains only
    ("evil-example.com", ["*.example.com"]),
    ("10.1.2.3", ["192.168.0.0/16"]),
    ("localhost", ["127.0.0.2"]),                # the name is not listed
])
def test_anything_not_listed_is_refused(host: str, hosts: list[str]) -> None:
    with pytest.raises(Refused, match="network_hosts"):
        check(host, hosts)


def test_a_wildcard_covers_subdomains_before_resolution() -> None:
    # matched by name, then resolved: a name that does not resolve fails as a lookup, not as refused
    with pytest.raises(OSError):
        check("nothing.invalid", ["*.invalid"])
