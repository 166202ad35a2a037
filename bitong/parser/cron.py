"""Five-field cron expressions (minute hour day-of-month month day-of-week), as crontab(5) reads them.

One implementation for both sides: the parser checks a ``schedule: { cron: ... }``
with :func:`parse` (a ValueError says which field is wrong), the scheduler asks
:meth:`Cron.next_after` when to run. Supported: ``*``, numbers, ``a-b``,
``*/n``, ``a-b/n``, lists with ``,``; day-of-week 0-7 (0 and 7 are Sunday).
When both day fields are restricted, a day matching either runs (crontab's rule).
No names (``mon``, ``jan``) and no ``@hourly`` shorthands: say it in numbers.
"""

from __future__ import annotations

import dataclasses
import datetime

__all__ = ["Cron", "parse"]

_FIELDS = (("minute", 0, 59), ("hour", 0, 23), ("day of month", 1, 31), ("month", 1, 12), ("day of week", 0, 7))


@dataclasses.dataclass(frozen=True)
class Cron:
    minutes: frozenset[int]
    hours: frozenset[int]
    days: frozenset[int]
    months: frozenset[int]
    weekdays: frozenset[int]   # 0 = Sunday
    any_day: bool              # day of month is *
    any_weekday: bool          # day of week is *

    def _day_ok(self, day: datetime.date) -> bool:
        dom = day.day in self.days
        dow = (day.isoweekday() % 7) in self.weekdays
        if self.any_day or self.any_weekday:
            return dom and dow
        return dom or dow

    def next_after(self, when: datetime.datetime) -> datetime.datetime:
        """The first minute after ``when`` (same timezone) the expression matches; ValueError if none in 5 years."""
        t = when.replace(second=0, microsecond=0) + datetime.timedelta(minutes=1)
        limit = t + datetime.timedelta(days=366 * 5)
        while t < limit:
            if t.month not in self.months or not self._day_ok(t.date()):
                t = (t + datetime.timedelta(days=1)).replace(hour=0, minute=0)
                continue
            if t.hour not in self.hours:
                t = (t + datetime.timedelta(hours=1)).replace(minute=0)
                continue
            if t.minute not in self.minutes:
                t += datetime.timedelta(minutes=1)
                continue
            return t
        raise ValueError("the cron expression matches no time in the next five years")


def _field(text: str, name: str, low: int, high: int) -> frozenset[int]:
    out: set[int] = set()
    for part in text.split(","):
        step = 1
        if "/" in part:
            part, _, step_text = part.partition("/")
            if not step_text.isdigit() or int(step_text) < 1:
                raise ValueError(f"{name}: step {step_text!r} must be a whole number of at least 1")
            step = int(step_text)
        if part == "*":
            first, last = low, high
        elif "-" in part:
            a, _, b = part.partition("-")
            if not (a.isdigit() and b.isdigit()):
                raise ValueError(f"{name}: {part!r} is not a range such as 1-5")
            first, last = int(a), int(b)
        elif part.isdigit():
            first = last = int(part)
            if step != 1:
                last = high
        else:
            raise ValueError(f"{name}: {part!r} is not a number, a range or * (names are not supported)")
        if not (low <= first <= high and low <= last <= high) or first > last:
            raise ValueError(f"{name}: {part} is outside {low}-{high}")
        out.update(range(first, last + 1, step))
    return frozenset(out)


def parse(expression: str) -> Cron:
    """Read a five-field cron expression; ValueError says which field is wrong."""
    parts = expression.split()
    if len(parts) != 5:
        raise ValueError(f"a cron expression has five fields (minute hour day month weekday), found {len(parts)}")
    sets = [_field(p, name, low, high) for p, (name, low, high) in zip(parts, _FIELDS, strict=True)]
    weekdays = frozenset(d % 7 for d in sets[4])
    return Cron(sets[0], sets[1], sets[2], sets[3], weekdays, parts[2] == "*", parts[4] == "*")
