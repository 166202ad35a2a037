"""The server's heap keeps a stream's large blocks (agent/heap.py): checked by the page faults they cost."""

from __future__ import annotations

import resource

import pytest

from bitong.agent.serving import heap


def faults_of_churn(rounds: int = 200) -> int:
    """Minor page faults while a stream's pattern runs: two 256 KiB blocks alive at once, both freed, again."""
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for i in range(rounds):
        read = bytes([i % 251]) * (256 * 1024)       # written through: every page is touched
        message = b"\x0a" + read                     # the serialized message made from it
        del read, message
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before


def test_large_blocks_are_reused_not_mapped_again() -> None:
    if not heap.keep_large_blocks():
        pytest.skip("not glibc: the C library's own policy applies")
    faults_of_churn(5)          # the heap grows once to hold them
    # Mapped and unmapped each time, a round would fault ~128 pages in (25,600 in all).
    assert faults_of_churn() < 2000
