"""Confirmation tokens: single use, bound to tool, definition and params, expiring."""

from __future__ import annotations

from bitong.agent.calling.confirm import ConfirmBook


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_token_checks_for_its_exact_call_only() -> None:
    book = ConfirmBook()
    issued = book.issue("kill", "sha-1", {"pid": 42})
    assert book.check(issued.token, "kill", "sha-1", {"pid": 42}) == ""
    assert "other parameters" in book.check(issued.token, "kill", "sha-1", {"pid": 43})
    assert "not 'restart'" in book.check(issued.token, "restart", "sha-1", {"pid": 42})
    assert "older definition" in book.check(issued.token, "kill", "sha-2", {"pid": 42})


def test_a_refused_check_does_not_spend_the_token_but_a_run_does() -> None:
    book = ConfirmBook()
    issued = book.issue("kill", "sha", {"pid": 42})
    book.check(issued.token, "kill", "sha", {"pid": 1})
    assert book.check(issued.token, "kill", "sha", {"pid": 42}) == ""
    assert book.spend(issued.token)
    assert not book.spend(issued.token)
    assert "already used" in book.check(issued.token, "kill", "sha", {"pid": 42})


def test_a_token_expires() -> None:
    clock = Clock()
    book = ConfirmBook(ttl_s=300, clock=clock)
    issued = book.issue("kill", "sha", {})
    clock.now += 299
    assert book.check(issued.token, "kill", "sha", {}) == ""
    clock.now += 2
    assert "expired" in book.check(issued.token, "kill", "sha", {})


# ---------------------------------------------------------------- mutation-testing survivors (issue part 7)

import time  # noqa: E402

import pytest  # noqa: E402

from bitong.agent.calling.confirm import DEFAULT_MAX_PENDING, DEFAULT_TTL_S   # noqa: E402


def test_the_expiry_sent_to_clients_is_the_wall_clock_plus_the_ttl() -> None:
    before = time.time()
    issued = ConfirmBook(ttl_s=120).issue("kill", "sha", {})
    after = time.time()
    assert int((before + 120) * 1000) <= issued.expires_unix_ms <= int((after + 120) * 1000)


def test_the_default_ttl_is_five_minutes() -> None:
    assert DEFAULT_TTL_S == 300.0
    clock = Clock()
    book = ConfirmBook(clock=clock)
    assert book.ttl_s == 300.0
    issued = book.issue("kill", "sha", {})
    assert issued.expires_unix_ms - time.time() * 1000 == pytest.approx(300_000, abs=5_000)
    clock.now += 299.999
    assert book.check(issued.token, "kill", "sha", {}) == ""
    clock.now += 0.001
    assert "expired" in book.check(issued.token, "kill", "sha", {})


def test_a_token_is_expired_at_exactly_its_expiry_instant() -> None:
    clock = Clock()
    book = ConfirmBook(ttl_s=10, clock=clock)
    issued = book.issue("kill", "sha", {})
    clock.now = 110.0
    assert book.check(issued.token, "kill", "sha", {}) == "confirm_token expired; call again without it to get a new one"
    assert "unknown" in book.check(issued.token, "kill", "sha", {})   # an expired token is gone, not kept


def test_issuing_purges_expired_tokens_oldest_first_and_stops_at_a_live_one() -> None:
    clock = Clock()
    book = ConfirmBook(ttl_s=10, clock=clock)
    old = book.issue("a", "sha", {})
    clock.now += 5
    young = book.issue("b", "sha", {})
    clock.now += 5           # old expires now, young in 5 s
    book.issue("c", "sha", {})
    assert len(book) == 2
    assert "unknown" in book.check(old.token, "a", "sha", {})
    assert book.check(young.token, "b", "sha", {}) == ""


def test_pending_tokens_are_bounded_and_the_oldest_is_dropped() -> None:
    assert DEFAULT_MAX_PENDING == 1024 and ConfirmBook().max_pending == 1024
    book = ConfirmBook(max_pending=2)
    first, second, third = (book.issue("t", "sha", {"n": i}) for i in range(3))
    assert len(book) == 2
    assert "dropped: at most 2 confirmations wait at once" in book.check(first.token, "t", "sha", {"n": 0})
    assert book.check(second.token, "t", "sha", {"n": 1}) == ""
    assert book.check(third.token, "t", "sha", {"n": 2}) == ""
    with pytest.raises(ValueError, match="max_pending must be at least 1"):
        ConfirmBook(max_pending=0)


def test_a_spent_token_cannot_be_checked_again_and_tokens_are_unguessable() -> None:
    book = ConfirmBook()
    a, b = book.issue("t", "sha", {}), book.issue("t", "sha", {})
    assert a.token != b.token and len(a.token) >= 32
    assert book.spend(a.token) and not book.spend(a.token)
    assert book.check(b.token, "t", "sha", {}) == ""
