"""Fixtures for the format tests: every test that takes ``backend`` runs on each twin.

The pure twin always exists; the compiled one exists when the Cython
extension was built. ``BITONG_PURE=1`` only changes which twin ``parse()``
uses by default, so both still run here (``test_parity`` checks the default).
"""

from __future__ import annotations

import pytest

from bitong.parser import _backend

BACKENDS = _backend.backends()


@pytest.fixture(params=BACKENDS, ids=[b.name for b in BACKENDS])
def backend(request: pytest.FixtureRequest) -> _backend.Backend:
    """Each available twin in turn: the pure one, and the compiled one when built."""
    return request.param
