"""Small hand-made series for the energy tests (never the real trace)."""

from __future__ import annotations

import math
from datetime import datetime, timedelta

import numpy as np

from scheduling.energy.series import STEP_MINUTES, StepSeries

START = datetime(2024, 1, 1)  # a Monday


def steps(demand: list[int], total: int | list[int] = 10) -> StepSeries:
    """A step series from demand per 10-minute step."""
    n = len(demand)
    totals = [total] * n if isinstance(total, int) else total
    starts = np.datetime64(START, "m") + np.arange(n) * np.timedelta64(STEP_MINUTES, "m")
    return StepSeries(starts, np.array(demand, dtype=np.int64), np.array(totals, dtype=np.int64))


def diurnal_minutes(days: int, *, nodes: int = 100, seed: int = 0) -> list[tuple[datetime, int, int]]:
    """Per-minute rows: busy by day, quiet at night, quieter at weekends, with a little noise."""
    rng = np.random.default_rng(seed)
    rows = []
    for minute in range(days * 24 * 60):
        when = START + timedelta(minutes=minute)
        hour = when.hour + when.minute / 60
        level = 55 + 30 * math.sin((hour - 8) / 24 * 2 * math.pi) - (10 if when.weekday() >= 5 else 0)
        rows.append((when, int(max(0, min(nodes, level + rng.normal(0, 2)))), nodes))
    return rows
