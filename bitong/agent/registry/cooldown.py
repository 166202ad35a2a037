"""The reload cooldown: at most N reloads of one tool per window, the latest change never lost.

Seed 002 §2.4: a skill that keeps changing (an agent rewriting it in a loop,
a sync flapping between two commits) must not be reloaded at every write;
two reloads a minute is the field figure. A change past the budget is held,
not dropped: the registry keeps serving the definition it had (marked
``pending_change``) and the cache agent rescans the tool when the window
lets it, so the content applied then is the latest one, whole.
"""

from __future__ import annotations

import collections
import time
from collections.abc import Callable

__all__ = ["Cooldown", "DEFAULT_WINDOW_S", "DEFAULT_RELOADS"]

DEFAULT_WINDOW_S = 60.0
DEFAULT_RELOADS = 2


class Cooldown:
    """A sliding window of reload times per key (a TOOL.hdlp path). Not thread-safe: the registry's lock guards it."""

    def __init__(self, window_s: float = DEFAULT_WINDOW_S, reloads: int = DEFAULT_RELOADS,
                 clock: Callable[[], float] = time.monotonic) -> None:
        if window_s < 0 or reloads < 1:
            raise ValueError(f"reload cooldown needs window_s >= 0 and reloads >= 1, got {window_s}, {reloads}")
        self.window_s = window_s
        self.reloads = reloads
        self._clock = clock
        self._times: dict[str, collections.deque[float]] = {}

    @property
    def off(self) -> bool:
        return self.window_s == 0

    def _recent(self, key: str, now: float) -> collections.deque[float]:
        times = self._times.setdefault(key, collections.deque())
        while times and now - times[0] >= self.window_s:
            times.popleft()
        if not times:
            del self._times[key]
        return times

    def allow(self, key: str) -> bool:
        """True (and the reload counted) when ``key`` may reload now."""
        if self.off:
            return True
        now = self._clock()
        times = self._recent(key, now)
        if len(times) >= self.reloads:
            return False
        self._times.setdefault(key, times).append(now)
        return True

    def due(self, key: str) -> float:
        """When (on the clock) ``key`` may reload next; now or earlier if it may already."""
        now = self._clock()
        times = self._recent(key, now)
        if len(times) < self.reloads:
            return now
        return times[0] + self.window_s

    def forget(self, key: str) -> None:
        self._times.pop(key, None)
