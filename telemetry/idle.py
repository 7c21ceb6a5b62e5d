"""When a job's GPUs count as idle: the one rule behind the job page's warning, the dashboard's list of idle jobs
and its wasted GPU-hours.

A job holds GPUs whether it uses them or not, and the cluster pays for the holding. Measured utilization (the GPU
metric ``gpu_util``, a percentage) tells the two apart, but only where telemetry was measured: a job is called idle
only when its GPUs' readings cover enough of the window (``min_coverage`` of the GPU-seconds it could have held in
it), so a job that started two minutes ago, or whose node sends no telemetry, is never accused on thin evidence.

Pure: no Django, no clock. The portal reads the rule's numbers from its settings (``CORRAL_IDLE_GPU_*``) and the
readings from its rollups; this module only decides.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class IdleRule:
    """Below ``threshold`` percent of measured utilization over the last ``window`` seconds, with readings covering
    at least ``min_coverage`` (0-1) of the GPU-seconds the job could have held in that window, a job is idle."""

    threshold: float
    window: float
    min_coverage: float

    def reading_is_idle(self, util: float) -> bool:
        """Whether one reading (a rollup's mean utilization, percent) counts as idle time: what the dashboard's
        wasted GPU-hours add up."""
        return util < self.threshold


@dataclass(frozen=True, slots=True)
class GpuTime:
    """GPU-seconds of one job within a window: ``covered`` by utilization readings, and ``used``, the same seconds
    each weighted by its reading / 100."""

    covered: float = 0.0
    used: float = 0.0

    def __add__(self, other: GpuTime) -> GpuTime:
        return GpuTime(covered=self.covered + other.covered, used=self.used + other.used)

    @property
    def util(self) -> float | None:
        """Mean measured utilization in percent, or None without any reading."""
        return 100.0 * self.used / self.covered if self.covered > 0 else None


@dataclass(frozen=True, slots=True)
class IdleVerdict:
    """A job found idle: it holds ``gpus`` GPUs and used ``util`` percent of them over ``window`` seconds."""

    gpus: int
    util: float
    window: float
    coverage: float

    @property
    def text(self) -> str:
        """The warning in words: "holds 4 GPUs and used 3 % of them over the last 30 min"."""
        gpus = f"{self.gpus} GPU" if self.gpus == 1 else f"{self.gpus} GPUs"
        them = "it" if self.gpus == 1 else "them"
        return f"holds {gpus} and used {self.util:.0f} % of {them} over the last {window_words(self.window)}"


def window_words(seconds: float) -> str:
    """``1800`` -> ``30 min``, ``7200`` -> ``2 h``, ``5400`` -> ``90 min``: how the warning names its window."""
    minutes = round(seconds / 60)
    if minutes >= 120 and minutes % 60 == 0:
        return f"{minutes // 60} h"
    return f"{max(1, minutes)} min"


def judge(rule: IdleRule, *, gpus: int, time: GpuTime) -> IdleVerdict | None:
    """The verdict on a job holding ``gpus`` GPUs whose readings over the rule's window add up to ``time``: idle
    (a verdict) when they cover enough of the window and their mean is below the threshold, else None."""
    possible = gpus * rule.window
    util = time.util
    if gpus < 1 or possible <= 0 or util is None:
        return None
    coverage = min(1.0, time.covered / possible)
    if coverage < rule.min_coverage or not rule.reading_is_idle(util):
        return None
    return IdleVerdict(gpus=gpus, util=util, window=rule.window, coverage=coverage)
