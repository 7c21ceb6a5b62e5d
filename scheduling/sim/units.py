"""Times for people: one unit per column of a table or axis of a chart, chosen from the values it shows.

``corral simulate``'s table and report, and the what-if page's table and charts, print replayed times through
:func:`time_scale`. One rule in one place, because each of them got it wrong its own way (#18): a column that mixed
"115 s" and "2.3 min" cannot be compared at a glance, a table in hours reads 0.04 in every cell for a history of
short jobs, and a chart of a 20-minute replay in days has ticks like 0.0005.

The rule: the largest unit of s, min, h, d in which the largest value is at least 2 (a value below 120 s stays in
seconds, below 2 h in minutes, below 2 d in hours), printed with three significant digits of that largest value, so
policies that differ by a few percent still read differently. Pure: no Django.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

#: A unit is used once the largest value holds at least this many of it: 119 s, then 2.00 min.
AT_LEAST = 2.0
#: Significant digits of the largest value; the rest of the series gets the same decimals.
DIGITS = 3
MAX_DECIMALS = 3


@dataclass(frozen=True, slots=True)
class TimeScale:
    """A unit and how many decimals to print in it. ``unit`` is the short form a cell shows ("min"), ``name`` the
    long one an axis title shows ("minutes")."""

    unit: str
    name: str
    seconds: float
    decimals: int = 0

    def value(self, seconds: float) -> float:
        """``seconds`` in this unit (what a chart plots)."""
        return seconds / self.seconds

    def number(self, seconds: float) -> str:
        """``seconds`` in this unit as the table prints it, without the unit: ``12.5``."""
        return f"{self.value(seconds):.{self.decimals}f}"

    def text(self, seconds: float) -> str:
        """``seconds`` with the unit: ``12.5 min``."""
        return f"{self.number(seconds)} {self.unit}"

    def title(self, what: str) -> str:
        """An axis or column title: ``job completion time (minutes)``."""
        return f"{what} ({self.name})"


SECONDS = TimeScale("s", "seconds", 1.0)
MINUTES = TimeScale("min", "minutes", 60.0)
HOURS = TimeScale("h", "hours", 3600.0)
DAYS = TimeScale("d", "days", 86_400.0)
UNITS = (SECONDS, MINUTES, HOURS, DAYS)


def time_scale(seconds: Iterable[float]) -> TimeScale:
    """The scale a series of durations (or a time axis, given its length) reads best in; see the module's rule.

    NaN and infinite values (a missing figure) do not choose; an empty series, or one of zeros, is in seconds.
    """
    largest = max((abs(v) for v in seconds if math.isfinite(v)), default=0.0)
    unit = SECONDS
    for candidate in UNITS:
        if largest >= AT_LEAST * candidate.seconds:
            unit = candidate
    shown = largest / unit.seconds
    if shown == 0.0:
        return unit
    decimals = DIGITS - 1 - math.floor(math.log10(shown))
    return TimeScale(unit.unit, unit.name, unit.seconds, min(max(decimals, 0), MAX_DECIMALS))
