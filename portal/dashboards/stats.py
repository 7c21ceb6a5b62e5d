"""The dashboard's numbers as plain values, and the arithmetic on them that needs no database.

Pure (no Django, no clock): the selectors fill these from queries, ``charts`` draws them, tests build them by hand.
Durations are seconds, GPU time is GPU-seconds; the ``*_hours`` properties are what the page prints.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

HOUR = 3600.0


def percentile(ordered: Sequence[float], q: float) -> float:
    """The ``q``-th percentile (0-100) of ascending, non-empty ``ordered``, interpolating linearly between the
    closest ranks (numpy's default), so a median of two values is their mean and p95 of few jobs stays inside
    the observed range."""
    if not ordered:
        raise ValueError("percentile of no values")
    position = (len(ordered) - 1) * q / 100.0
    low = math.floor(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


@dataclass(frozen=True, slots=True)
class Spread:
    """A distribution of durations (seconds), summarised: what the tables print and the box plot draws, so the page
    never carries one value per job."""

    count: int
    mean: float
    p5: float
    q1: float
    median: float
    q3: float
    p95: float

    @classmethod
    def of(cls, values: Iterable[float]) -> Spread | None:
        """The summary of ``values``; None when there are none (the page prints a dash, not a zero)."""
        ordered = sorted(values)
        if not ordered:
            return None
        return cls(
            count=len(ordered),
            mean=math.fsum(ordered) / len(ordered),
            p5=percentile(ordered, 5),
            q1=percentile(ordered, 25),
            median=percentile(ordered, 50),
            q3=percentile(ordered, 75),
            p95=percentile(ordered, 95),
        )


@dataclass(frozen=True, slots=True)
class Usage:
    """GPU time of some allocations within the window.

    ``allocated`` is every GPU-second held; ``covered`` the part of it that telemetry (rollups with a ``gpu_util``)
    describes; ``used`` the covered GPU-seconds weighted by the measured utilization. Efficiency is ``used /
    covered``: hours nobody measured are reported as such, never guessed as idle or busy.
    """

    allocated: float = 0.0
    covered: float = 0.0
    used: float = 0.0

    def __add__(self, other: Usage) -> Usage:
        return Usage(self.allocated + other.allocated, self.covered + other.covered, self.used + other.used)

    @property
    def allocated_hours(self) -> float:
        return self.allocated / HOUR

    @property
    def used_hours(self) -> float:
        return self.used / HOUR

    @property
    def uncovered_hours(self) -> float:
        """Allocated GPU-hours no telemetry covers (rounding in the database can leave a hair below zero)."""
        return max(0.0, self.allocated - self.covered) / HOUR

    @property
    def efficiency(self) -> float | None:
        """Used over covered GPU-hours, 0 to 1; None when no telemetry covers any of it."""
        return self.used / self.covered if self.covered > 0 else None


@dataclass(frozen=True, slots=True)
class GroupStats:
    """One row of the tenant or user table (or the whole scope, for the summary cards).

    ``finished`` counts jobs that ended in the window, ``jct`` only those of them that ran (see docs/dashboards.md);
    ``queue`` holds the delays of jobs that first started in the window, which need not be the same jobs.
    """

    label: str
    finished: int = 0
    jct: Spread | None = None
    queue: Spread | None = None
    usage: Usage = field(default_factory=Usage)

    @property
    def never_ran(self) -> int:
        return self.finished - (self.jct.count if self.jct else 0)


@dataclass(frozen=True, slots=True)
class Series:
    """A time series for a chart: ``x`` aware datetimes, ``y`` values, the same length."""

    x: tuple[datetime, ...] = ()
    y: tuple[float, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.x)


def floor_time(moment: datetime, period: int) -> datetime:
    """``moment`` rounded down to a multiple of ``period`` seconds since the epoch (UTC): the rollup bucket holding
    it, since rollups are aligned on whole minutes and hours."""
    return datetime.fromtimestamp(moment.timestamp() // period * period, UTC)


def step_series(*, start: datetime, end: datetime, period: int, initial: int, deltas: Mapping[datetime, int]) -> Series:
    """How many GPUs were allocated (or jobs waiting) at each bucket boundary from ``start`` (a boundary) up to
    ``end``.

    ``initial`` is the count at ``start``; ``deltas`` maps a bucket's start to the allocations created minus those
    released within it, or the jobs that entered the queue minus those that left it (the database groups them, so
    no row is read one by one). The value at a boundary is the count once the previous bucket's changes have
    happened, which a step line ("hv") holds until the next one.
    """
    times: list[datetime] = []
    levels: list[float] = []
    level = initial
    moment = start
    step = timedelta(seconds=period)
    while moment <= end:
        times.append(moment)
        levels.append(float(level))
        level += deltas.get(moment, 0)
        moment += step
    return Series(tuple(times), tuple(levels))


@dataclass(frozen=True, slots=True)
class Window:
    """The time range a dashboard covers, ending now, and the rollup period read for it."""

    key: str
    label: str
    start: datetime
    end: datetime
    period: int  # seconds: 60 (1-minute rollups) or 3600 (1-hour rollups)


@dataclass(frozen=True, slots=True)
class Cluster:
    """Cluster-wide figures, the same for every signed-in user (the node list shows them to everyone already).

    ``util`` is the mean ``gpu_util`` over every rollup in the window (percent); the series hold it per bucket, the
    number of GPUs allocated at each bucket boundary (charted as a share of the GPUs present now) and the number of
    jobs waiting at each bucket boundary (empty when none waited).
    """

    gpus_present: int = 0
    util: float | None = None
    util_series: Series = field(default_factory=Series)
    allocated_series: Series = field(default_factory=Series)
    pending_series: Series = field(default_factory=Series)


@dataclass(frozen=True, slots=True)
class Dashboard:
    """Everything the dashboard page shows for one user, window and (optionally) tenant."""

    window: Window
    scope: str  # "all tenants", "your tenants" or one tenant's slug
    total: GroupStats
    tenants: list[GroupStats]
    users: list[GroupStats]
    cluster: Cluster

    @property
    def has_data(self) -> bool:
        """Anything at all to show: a job that finished or started, a GPU-second allocated, telemetry, or a job
        waiting at some round."""
        t, c = self.total, self.cluster
        waiting = any(c.pending_series.y)
        telemetry = c.util is not None or bool(c.allocated_series)
        return bool(t.finished or t.queue or t.usage.allocated > 0 or telemetry or waiting)
