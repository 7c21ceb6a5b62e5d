"""Node-demand series: the per-minute ``time,active,total`` file and its 10-minute steps.

The replay, the forecaster and the policies all work on steps, not minutes: a powered-down node takes minutes to
come back, so deciding more often than every few minutes buys nothing, and Helios CES (Hu et al., SC '21) measured
on 10-minute steps too. A step's demand is the *maximum* of ``active`` over its minutes, because a plan that covers
the step's average still leaves jobs waiting at its peak.

Times are naive wall-clock times of the cluster (the calendar features read the hour and weekday from them); no
clock is read here: the caller says which window it wants.
"""

from __future__ import annotations

import csv
import gzip
import io
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import numpy as np
import numpy.typing as npt

STEP_MINUTES = 10
STEPS_PER_HOUR = 60 // STEP_MINUTES
STEPS_PER_DAY = 24 * STEPS_PER_HOUR

IntArray = npt.NDArray[np.int64]


class SeriesError(ValueError):
    """A series file or window that cannot be replayed; the message is one line for the user."""


@dataclass(frozen=True)
class StepSeries:
    """Demand per 10-minute step: ``starts[i]`` (datetime64[m]) begins step ``i``; ``demand[i]`` is the most nodes
    in use during it and ``total[i]`` the most nodes the cluster had. Steps are consecutive: a step with no row in
    the file repeats the step before it (``filled`` counts them), so index arithmetic is time arithmetic."""

    starts: npt.NDArray[np.datetime64]
    demand: IntArray
    total: IntArray
    filled: int = 0

    def __len__(self) -> int:
        return len(self.demand)

    def index_at(self, when: datetime) -> int:
        """The index of the first step that starts at or after ``when`` (``len(self)`` when none does)."""
        return int(np.searchsorted(self.starts, np.datetime64(when, "m"), side="left"))

    def slice(self, start: int, stop: int) -> StepSeries:
        return StepSeries(self.starts[start:stop], self.demand[start:stop], self.total[start:stop], 0)


def steps_from_minutes(times: Iterable[datetime], active: Iterable[int], total: Iterable[int]) -> StepSeries:
    """Group per-minute rows into 10-minute steps (max of each column; Helios resamples the same way). Rows need
    not be sorted; a step with no rows copies the previous step's values."""
    minutes = np.array([np.datetime64(t, "m") for t in times], dtype="datetime64[m]")
    act = np.asarray(list(active), dtype=np.int64)
    tot = np.asarray(list(total), dtype=np.int64)
    if len(minutes) == 0:
        raise SeriesError("the series has no rows")
    if len(act) != len(minutes) or len(tot) != len(minutes):
        raise SeriesError("time, active and total columns differ in length")
    if (act < 0).any() or (tot < 0).any():
        raise SeriesError("active and total must be counts of nodes (>= 0)")
    first = minutes.min() - (minutes.min().astype(np.int64) % STEP_MINUTES)  # align steps to :00, :10, ...
    bins = ((minutes - first).astype(np.int64)) // STEP_MINUTES
    count = int(bins.max()) + 1
    demand = np.full(count, -1, dtype=np.int64)
    totals = np.full(count, -1, dtype=np.int64)
    np.maximum.at(demand, bins, act)
    np.maximum.at(totals, bins, tot)
    filled = 0
    for i in range(count):  # forward-fill steps without rows (the Philly file misses ten hours on 25 Oct)
        if demand[i] < 0:
            demand[i], totals[i] = demand[i - 1], totals[i - 1]
            filled += 1
    starts = first + np.arange(count) * np.timedelta64(STEP_MINUTES, "m")
    return StepSeries(starts.astype("datetime64[m]"), demand, totals, filled)


def zero_runs(series: StepSeries, *, min_steps: int) -> list[tuple[int, int]]:
    """``(first step, length)`` of every run of at least ``min_steps`` steps in which no node was in use, right
    after a step in which some were."""
    runs: list[tuple[int, int]] = []
    demand = series.demand
    i = 1
    while i < len(demand):
        if demand[i] == 0 and demand[i - 1] > 0:
            end = i
            while end < len(demand) and demand[end] == 0:
                end += 1
            if end - i >= max(min_steps, 1):
                runs.append((i, end - i))
            i = end
        else:
            i += 1
    return runs


def fill_outages(series: StepSeries, *, min_steps: int) -> StepSeries:
    """Treat every run of :func:`zero_runs` as a monitoring outage: the run repeats the step before it (and counts
    in ``filled``). Opt-in, because a small cluster may really be idle for hours; a busy 420-node cluster such as
    Philly does not drop to zero nodes in use for 18 hours (26 October, right after ten hours with no rows) or for
    30 minutes (6 December). ``min_steps`` below 1: nothing changes."""
    if min_steps < 1:
        return series
    demand, total = series.demand.copy(), series.total.copy()
    filled = series.filled
    for first, length in zero_runs(series, min_steps=min_steps):
        demand[first : first + length], total[first : first + length] = demand[first - 1], total[first - 1]
        filled += length
    return StepSeries(series.starts, demand, total, filled)


def read_series(path: Path) -> StepSeries:
    """Read a ``time,active,total`` CSV (``.gz`` too) into steps. Any problem is a :class:`SeriesError` naming
    the file and, for a bad row, its line."""
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise SeriesError(f"{path}: {exc.strerror or exc}") from None
    try:
        text = gzip.decompress(raw).decode("utf-8") if raw[:2] == b"\x1f\x8b" else raw.decode("utf-8")
    except (OSError, EOFError, UnicodeDecodeError) as exc:
        raise SeriesError(f"{path}: not a readable CSV ({exc})") from None
    reader = csv.DictReader(io.StringIO(text))
    try:
        fields = set(reader.fieldnames or ())
    except csv.Error as exc:
        raise SeriesError(f"{path}: not a readable CSV ({exc})") from None
    missing = {"time", "active", "total"} - fields
    if missing:
        raise SeriesError(f"{path}: missing column(s) {', '.join(sorted(missing))} (need time,active,total)")
    times: list[datetime] = []
    active: list[int] = []
    total: list[int] = []
    try:
        for row in reader:
            try:
                times.append(datetime.fromisoformat(row["time"]).replace(tzinfo=None))
                active.append(int(float(row["active"])))
                total.append(int(float(row["total"])))
            except (TypeError, ValueError, OverflowError):  # OverflowError: "inf"
                raise SeriesError(f"{path}: line {reader.line_num}: bad row {row!r}") from None
    except csv.Error as exc:  # a NUL byte, an unterminated quote
        raise SeriesError(f"{path}: line {reader.line_num}: {exc}") from None
    try:
        return steps_from_minutes(times, active, total)
    except SeriesError as exc:
        raise SeriesError(f"{path}: {exc}") from None
