"""Power policies: how many nodes to keep powered for the next step, as a pure function of what is known now.

Every policy answers one question per 10-minute step, ``decide(view) -> PowerDecision``: the number of nodes that
should be powered (on, or on their way up). It sees the cluster's size, how many nodes are on and how many are
still waking, the demand of the steps already finished (never the current one), the forecast issued now, and how
long ago it last woke nodes. It never reads a clock or keeps state between calls, so the replay and the live
controller (which will power nodes through site commands) drive it the same way; the caller applies the answer
and enforces what no policy may break (a node with work is never powered down: see ``replay.step``).

Three policies:

- :class:`ForecastPolicy`, Corral's: keep ``buffer`` nodes above the highest forecast over the time a wake-up
  takes plus ``lead`` steps; wake nodes as soon as that rises above what is powered; power idle nodes down only
  when the recent trend *and* the forecast fall, and not within ``keep`` steps of a wake-up; never below ``floor``.
- :class:`IdleTimeoutPolicy`, Slurm ``power_save`` style: a node idle for ``suspend_steps`` is powered down; nodes
  are woken only when work is waiting for them (here: when the last step's demand exceeded what was powered).
- :class:`HeliosCesPolicy`, the rule of Helios CES as published in its artifact
  (S-Lab-System-Group/HeliosArtifact, ``framework/CES Service/CES_Philly.py``), with its knobs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import StrEnum
from typing import Protocol


class PowerReason(StrEnum):
    """Why a decision changed (or kept) the powered count; the live side will log it beside each command."""

    HOLD = "hold"
    WAKE_FORECAST = "wake: forecast demand"
    WAKE_SHORT = "wake: demand above powered nodes"
    DOWN_FALLING = "power down: demand falling"
    DOWN_IDLE = "power down: idle too long"


@dataclass(frozen=True)
class PowerView:
    """What a policy knows at the start of a step.

    ``recent``: demand (nodes in use, 10-minute maxima) of the finished steps, oldest first, at least one.
    ``forecast``: forecast demand for this step and the ones after it (empty for policies that need none).
    ``wake_steps``: steps a node ordered on now takes before it can run work.
    ``steps_since_wake``: steps since this policy last woke nodes (a large number if it never did).
    """

    total: int
    on: int
    waking: int
    recent: tuple[int, ...]
    forecast: tuple[float, ...]
    wake_steps: int
    steps_since_wake: int

    @property
    def powered(self) -> int:
        return self.on + self.waking

    @property
    def last(self) -> int:
        return self.recent[-1]


@dataclass(frozen=True)
class PowerDecision:
    """How many nodes should be powered (on or waking) from now on, and why."""

    target: int
    reason: PowerReason


class PowerPolicy(Protocol):
    @property
    def name(self) -> str: ...  # the key the replay reports it under

    @property
    def needs_forecast(self) -> bool: ...

    @property
    def memory_steps(self) -> int: ...  # how many finished steps ``recent`` must hold

    def decide(self, view: PowerView) -> PowerDecision: ...


def _mean(values: tuple[float, ...] | tuple[int, ...]) -> float:
    return sum(values) / len(values) if values else math.nan


@dataclass(frozen=True)
class ForecastPolicy:
    """Corral's policy. The defaults are what ``bench/energy.py --tune`` chose on Philly's history before
    December 2017 (six weeks, 17 October to 27 November, each replayed with a forecaster trained before it);
    docs/energy.md says how.

    - ``buffer``: nodes kept above the forecast (the forecast's error is what this pays for).
    - ``lead``: steps looked ahead beyond the wake-up time, so nodes are up before a rise, not as it starts.
    - ``history`` / ``trend``: demand is "falling" when the mean of the ``history`` steps before the last one
      exceeds the last one by at least ``trend`` nodes.
    - ``future``: the forecast is "falling" when its mean over the next ``future`` steps is at most the last
      demand.
    - ``keep``: steps after a wake-up during which nothing is powered down (no flapping).
    - ``floor``: never fewer powered nodes than this.
    - ``spread``: the margin grows by this share of the last ``spread_steps`` steps' range of demand.
    - ``forecast_must_fall``: require the forecast to fall as well as the trend (the issue's rule); off, only the
      trend is asked (the forecast still bounds how far down the policy goes).
    """

    buffer: int = 20
    lead: int = 0
    history: int = 2
    trend: float = 0.0
    future: int = 6
    keep: int = 0
    floor: int = 0
    spread: float = 0.5
    spread_steps: int = 6
    forecast_must_fall: bool = True
    name: str = "forecast"
    needs_forecast: bool = True

    @property
    def memory_steps(self) -> int:
        return max(self.history + 1, self.spread_steps)

    def margin(self, view: PowerView) -> int:
        """``buffer`` plus ``spread`` times how far demand moved over the last ``spread_steps`` steps: a restless
        hour earns a wider margin than a quiet one."""
        window = view.recent[-self.spread_steps :]
        return self.buffer + math.ceil(self.spread * (max(window) - min(window)))

    def decide(self, view: PowerView) -> PowerDecision:
        reach = view.wake_steps + self.lead + 1
        soon = view.forecast[:reach] or (float(view.last),)
        later = view.forecast[view.wake_steps : reach] or soon
        margin = self.margin(view)
        cover = max(math.ceil(max(later)) + margin, self.floor)
        if view.last >= view.powered:  # short now: the forecast was low, trust what is running
            cover = max(cover, view.last + margin)
        cover = min(cover, view.total)
        if cover > view.powered:
            reason = PowerReason.WAKE_SHORT if view.last >= view.powered else PowerReason.WAKE_FORECAST
            return PowerDecision(cover, reason)
        before = view.recent[-1 - self.history : -1]
        trend_falls = bool(before) and _mean(before) - view.last >= self.trend
        forecast_falls = not self.forecast_must_fall or _mean(view.forecast[: self.future] or (0.0,)) <= view.last
        if trend_falls and forecast_falls and view.steps_since_wake >= self.keep:
            # Nodes powered down now cannot be back for ``wake_steps``: cover the whole reach, from this step on.
            down_to = max(math.ceil(max(soon)) + margin, view.last + margin, self.floor)
            if down_to < view.powered:
                return PowerDecision(down_to, PowerReason.DOWN_FALLING)
        return PowerDecision(view.powered, PowerReason.HOLD)


@dataclass(frozen=True)
class IdleTimeoutPolicy:
    """Slurm ``power_save``: ``SuspendTime`` (``suspend_steps`` steps) idle → powered down (SuspendProgram);
    powered up (ResumeProgram) only for work that waits. With nodes interchangeable and work packed onto the
    nodes used last, the nodes idle for the whole window are those above the window's highest demand, so the
    policy keeps exactly that many powered."""

    suspend_steps: int = 3
    name: str = "idle_timeout"
    needs_forecast: bool = False

    @property
    def memory_steps(self) -> int:
        return self.suspend_steps

    def decide(self, view: PowerView) -> PowerDecision:
        window = view.recent[-self.suspend_steps :]
        busy_recently = max(window)
        if view.last > view.powered:
            return PowerDecision(min(view.last, view.total), PowerReason.WAKE_SHORT)
        if busy_recently < view.powered:
            return PowerDecision(busy_recently, PowerReason.DOWN_IDLE)
        return PowerDecision(view.powered, PowerReason.HOLD)


@dataclass(frozen=True)
class HeliosCesPolicy:
    """Helios CES's rule with the artifact's Philly knobs (``hyperparameters()`` in ``CES_Philly.py``): keep
    ``buffer`` nodes above demand; when demand exceeds the powered nodes, power up to demand + ``buffer`` and hold
    for ``keep`` steps; power down to demand + ``buffer`` only when the demand of the ``history`` steps before
    exceeds the current one by ``his_threshold``, the forecast mean over ``future`` steps is at most the current
    demand (by ``fut_threshold``), the forecast over ``2 * future`` steps does not rise, and at least
    ``de_threshold`` nodes would go.

    The artifact decides *after* seeing a step's demand and counts that step's shortfall against the previous
    step's nodes; here "current demand" is the last finished step's, which is the same information at the same
    moment, seen by a controller that acts at the step's start."""

    buffer: int = 20
    keep: int = 10
    history: int = 2
    future: int = 30
    his_threshold: float = 0.1
    fut_threshold: float = 0.0
    de_threshold: int = 1
    name: str = "helios_ces"
    needs_forecast: bool = True

    @property
    def memory_steps(self) -> int:
        return self.history + 1

    def decide(self, view: PowerView) -> PowerDecision:
        last = view.last
        if view.powered < last:
            return PowerDecision(min(last + self.buffer, view.total), PowerReason.WAKE_SHORT)
        before = view.recent[-1 - self.history : -1]
        if not before or view.steps_since_wake < self.keep:
            return PowerDecision(view.powered, PowerReason.HOLD)
        near = _mean(view.forecast[: self.future])
        far = _mean(view.forecast[: 2 * self.future])
        if (
            _mean(before) - last >= self.his_threshold
            and last - near >= self.fut_threshold
            and not near < far
            and view.powered - min(view.powered, last + self.buffer) >= self.de_threshold
        ):
            return PowerDecision(last + self.buffer, PowerReason.DOWN_FALLING)
        return PowerDecision(view.powered, PowerReason.HOLD)
