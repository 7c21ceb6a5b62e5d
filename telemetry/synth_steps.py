"""The synthetic fleet's time axis, and when random episodes happen on it.

Every process of the generator (node load, node-wide events, GPU faults and look-alikes) is a per-step array over
the same grid of readings, ``interval_s`` apart; episodes start as a Poisson process over it.
"""

from __future__ import annotations

import numpy as np

from telemetry.synth_types import HOUR, FleetConfig

_HOURS_PER_YEAR = 8760.0


class StepGrid:
    """``steps`` readings, ``dt_h`` hours apart; ``t`` is each reading's epoch time (the first one ``interval_s``
    after the configured start)."""

    __slots__ = ("steps", "dt_h", "t")

    def __init__(self, config: FleetConfig) -> None:
        self.steps = int(round(config.days * 86_400 / config.interval_s))
        self.dt_h = config.interval_s / HOUR
        self.t = config.start + config.interval_s * np.arange(1, self.steps + 1, dtype=np.float64)

    def starts(self, rng: np.random.Generator, *, rate_per_year: float, span: int) -> list[int]:
        """Start steps of a Poisson process with ``rate_per_year`` over ``span`` steps."""
        expected = rate_per_year * span * self.dt_h / _HOURS_PER_YEAR
        return [int(rng.integers(0, max(1, span))) for _ in range(rng.poisson(expected))]

    def episodes(
        self, rng: np.random.Generator, *, rate_per_year: float, hours: tuple[float, float]
    ) -> list[tuple[int, int]]:
        """(start, length) of episodes over the whole simulation, lengths uniform in ``hours``."""
        out = []
        for _ in range(rng.poisson(rate_per_year * self.steps * self.dt_h / _HOURS_PER_YEAR)):
            start = int(rng.integers(0, self.steps))  # start, then length: reordering draws changes every fleet
            out.append((start, max(1, int(round(rng.uniform(*hours) / self.dt_h)))))
        return out

    def span(self, start: int, length: int) -> tuple[float, float]:
        """Epoch times of the first and last reading of an episode (cut off at the end of the simulation)."""
        end = min(start + length, self.steps) - 1
        return float(self.t[start]), float(self.t[end])
