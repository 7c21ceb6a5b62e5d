"""Inference demand for the elastic replay (issue #19): how many servers of a loanable pool serve traffic when.

Two sources, both answering "busy servers during step ``k``" (a step is ``step`` seconds, 10 minutes by default):

- :class:`Diurnal`, the default: a day-long cosine between a night trough and an afternoon peak. Busy share at
  ``t`` seconds after the trace's first submission (taken as midnight) is
  ``low + (high - low) x (1 - cos(2 pi (t - trough) / 1 day)) / 2``, lowest at ``trough`` (04:00) and highest
  twelve hours later (16:00). Defaults: 20 % of the pool at night, 95 % at the peak: one region's users, asleep
  and awake, with a little room kept free at the peak.
- :class:`SeriesDemand`, a CSV of busy servers per minute (columns ``minute,busy``), replayed in a loop when the
  run outlasts it.

A step's demand is the most servers busy at any time in it, so the serving side never runs short inside a step.
Pure: no clock; the reader only opens the file it is given.
"""

from __future__ import annotations

import csv
import gzip
import math
from dataclasses import dataclass
from pathlib import Path

DAY = 86_400.0


@dataclass(frozen=True, slots=True)
class Diurnal:
    """A daily cosine of the busy share of the pool (see the module)."""

    low: float = 0.2
    high: float = 0.95
    trough: float = 4 * 3600.0

    def __post_init__(self) -> None:
        if not 0.0 <= self.low <= self.high <= 1.0:
            raise ValueError("need 0 <= low <= high <= 1 for a diurnal demand")

    def share(self, t: float) -> float:
        return self.low + (self.high - self.low) * (1.0 - math.cos(2.0 * math.pi * (t - self.trough) / DAY)) / 2.0

    def busy(self, k: int, step: float, servers: int) -> int:
        """Servers busy during step ``k``: the cosine's largest value over the step (at an end, or at the peak)."""
        start, end = k * step, (k + 1) * step
        top = max(self.share(start), self.share(end))
        peak = self.trough + DAY / 2
        first_peak = peak + DAY * math.ceil((start - peak) / DAY)
        if first_peak <= end:
            top = self.high
        return min(servers, math.ceil(top * servers - 1e-9))


@dataclass(frozen=True, slots=True)
class SeriesDemand:
    """Busy servers per minute, read from a CSV; looped when the replay is longer."""

    minutes: tuple[int, ...]

    def __post_init__(self) -> None:
        if not self.minutes or min(self.minutes) < 0:
            raise ValueError("a demand series needs at least one minute and no negative counts")

    def busy(self, k: int, step: float, servers: int) -> int:
        first = int(k * step // 60)
        last = max(first, int(math.ceil((k + 1) * step / 60)) - 1)
        n = len(self.minutes)
        return min(servers, max(self.minutes[m % n] for m in range(first, last + 1)))


Demand = Diurnal | SeriesDemand


def read_series(path: str | Path) -> SeriesDemand:
    """A ``minute,busy`` CSV (optionally ``.gz``): minutes from 0, busy servers in each. Rows may come in any
    order; a minute that is missing repeats the count before it. Refuses (``ValueError``) a file it cannot use."""
    path = Path(path)
    opener = gzip.open if path.suffix == ".gz" else open
    counts: dict[int, int] = {}
    with opener(path, "rt", encoding="utf-8", newline="") as f:
        reader = csv.DictReader(f)
        if not {"minute", "busy"} <= set(reader.fieldnames or ()):
            raise ValueError(f"{path}: needs the columns minute,busy")
        for line, row in enumerate(reader, start=2):
            try:
                counts[int(row["minute"])] = int(float(row["busy"]))
            except (TypeError, ValueError):
                raise ValueError(f"{path}:{line}: minute and busy must be numbers") from None
    if not counts or min(counts) < 0:
        raise ValueError(f"{path}: no minutes, or a negative minute")
    series: list[int] = []
    last = 0
    for m in range(max(counts) + 1):
        last = counts.get(m, last)
        series.append(last)
    return SeriesDemand(tuple(series))
