"""The http client's URL parse, kept for the URLs a tool calls again."""

from __future__ import annotations

import dataclasses

import pytest

from bitong.agent.calling.executors import http_client
from bitong.agent.calling.executors.http_client import _parse, _parsed, _Refused, _target


def test_a_kept_parse_is_the_parse_and_cannot_be_changed_by_one_request_for_the_next() -> None:
    url = "http://[::1]:8080/a b/c?q=x y&r=1"
    first = _target(url)
    assert first == _parse(url) and _target(url) is first   # the second call got the kept value
    assert (first.host, first.port, first.target, first.host_header) == ("::1", 8080, "/a%20b/c?q=x%20y&r=1",
                                                                        "[::1]:8080")
    with pytest.raises(dataclasses.FrozenInstanceError):
        first.target = "/elsewhere"   # type: ignore[misc]


def test_a_bad_url_is_refused_every_time() -> None:
    for _ in range(2):
        with pytest.raises(_Refused, match="http:// or https://"):
            _target("ftp://example.org/file")


def test_a_long_url_is_parsed_each_time_and_not_kept() -> None:
    url = "http://127.0.0.1:1/q?" + "x" * (http_client._CACHED_URL + 1)
    before = _parsed.cache_info().currsize
    got = _target(url)
    assert got.target == "/q?" + "x" * (http_client._CACHED_URL + 1)
    assert _target(url) is not got and _parsed.cache_info().currsize == before
