"""Confirmation tokens: single use, bound to tool, definition and params, expiring."""

from __future__ import annotations

from agent.confirm import ConfirmBook


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
