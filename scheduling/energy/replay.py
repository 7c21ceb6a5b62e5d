"""Replay a demand series under a power policy and measure what it saved and what it cost.

The model, step by step (10 minutes each):

1. Nodes whose wake-up has finished join the powered-on pool.
2. The policy sees the finished steps' demand, the forecast issued now and the pool, and names how many nodes
   should be powered (:mod:`scheduling.energy.policies`).
3. More than powered: the difference is ordered on and can run work ``wake_steps`` steps later
   (``ceil(wake_minutes / 10)``; 0 means at once). Fewer: idle nodes are powered down at once, but never a node
   that had work in the last finished step (its demand is the busy count), and never one still waking.
4. The step's demand is met by the powered-on nodes; a step short by ``k`` nodes costs ``k * 10`` node-minutes.

The replay starts ``warmup_steps`` before the scored window with every node on, so each policy reaches its own
steady state before it is measured; only the window counts.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from scheduling.energy.policies import PowerPolicy, PowerReason, PowerView
from scheduling.energy.series import STEP_MINUTES, STEPS_PER_DAY, StepSeries

NEVER_WOKE = 10**9


@dataclass(frozen=True)
class ReplayConfig:
    """``wake_minutes``: from the power-on command to a node that runs work (firmware, OS, agent registration;
    bare-metal GPU servers take several minutes, so one whole step by default). ``warmup_steps``: unscored steps
    before the window."""

    wake_minutes: int = 10
    warmup_steps: int = STEPS_PER_DAY

    @property
    def wake_steps(self) -> int:
        return math.ceil(self.wake_minutes / STEP_MINUTES)


@dataclass
class ReplayResult:
    """What one policy did over the scored window; :meth:`summary` is the ``--json`` shape."""

    policy: str
    steps: int
    powered_off: npt.NDArray[np.int64]
    powered_on: npt.NDArray[np.int64]
    waking: npt.NDArray[np.int64]
    short: npt.NDArray[np.int64]
    demand: npt.NDArray[np.int64]
    wakeups: int = 0
    wake_events: int = 0
    power_offs: int = 0
    reasons: dict[str, int] = field(default_factory=dict)

    @property
    def days(self) -> float:
        return self.steps / STEPS_PER_DAY

    def summary(self) -> dict[str, float | int]:
        powered = np.maximum(self.powered_on + self.waking, 1)
        used = np.minimum(self.demand, self.powered_on) / powered
        return {
            "powered_off_mean_nodes": round(float(self.powered_off.mean()), 2),
            "short_node_minutes": int(self.short.sum()) * STEP_MINUTES,
            "wakeups_per_day": round(self.wakeups / self.days, 2),
            "used_rate_powered_on": round(float(used.mean()), 4),
            "wake_events_per_day": round(self.wake_events / self.days, 2),
            "short_steps": int((self.short > 0).sum()),
            "node_hours_saved": round(float(self.powered_off.sum()) * STEP_MINUTES / 60, 1),
        }


def replay(
    series: StepSeries,
    policy: PowerPolicy,
    *,
    start: int,
    stop: int,
    forecasts: npt.NDArray[np.float64] | None = None,
    config: ReplayConfig | None = None,
) -> ReplayResult:
    """Replay steps ``[start, stop)`` of ``series`` under ``policy``, after the warm-up. ``forecasts[n]`` is the
    forecast issued at the start of step ``first + n`` (``first = max(1, start - warmup_steps)``), needed when the
    policy uses one."""
    config = config or ReplayConfig()
    first = max(1, start - config.warmup_steps)
    if not 1 <= start < stop <= len(series):
        raise ValueError("the scored window must lie inside the series, after its first step")
    if policy.needs_forecast and (forecasts is None or len(forecasts) < stop - first):
        raise ValueError(f"policy {policy.name} needs a forecast for every replayed step")
    demand = series.demand
    memory = max(policy.memory_steps, 1)
    wake = config.wake_steps
    on = int(series.total[first])
    arriving: deque[tuple[int, int]] = deque()  # (step it can run work, nodes)
    waking = 0
    since_wake = NEVER_WOKE
    n = stop - start
    out_off = np.zeros(n, dtype=np.int64)
    out_on = np.zeros(n, dtype=np.int64)
    out_waking = np.zeros(n, dtype=np.int64)
    out_short = np.zeros(n, dtype=np.int64)
    wakeups = events = offs = 0
    reasons: dict[str, int] = {}
    for i in range(first, stop):
        while arriving and arriving[0][0] <= i:
            on += arriving.popleft()[1]
        waking = sum(c for _, c in arriving)
        total = int(series.total[i])
        on = min(on, max(total - waking, 0))  # the cluster shrank: the missing nodes were on
        forecast: tuple[float, ...] = ()
        if forecasts is not None and policy.needs_forecast:
            forecast = tuple(forecasts[i - first].tolist())
        view = PowerView(
            total=total,
            on=on,
            waking=waking,
            recent=tuple(demand[max(0, i - memory) : i].tolist()),
            forecast=forecast,
            wake_steps=wake,
            steps_since_wake=since_wake,
        )
        decision = policy.decide(view)
        target = max(0, min(decision.target, total))
        scored = i >= start
        if target > on + waking:
            count = target - on - waking
            if wake == 0:
                on += count
            else:
                arriving.append((i + wake, count))
                waking += count
            since_wake = 0
            if scored:
                wakeups += count
                events += 1
        elif target < on + waking:
            busy = int(demand[i - 1])
            keep_on = max(target - waking, min(on, busy), 0)
            if keep_on < on:
                if scored:
                    offs += on - keep_on
                on = keep_on
        since_wake = min(since_wake + 1, NEVER_WOKE)
        if scored:
            k = i - start
            out_on[k], out_waking[k] = on, waking
            out_off[k] = max(total - on - waking, 0)
            out_short[k] = max(int(demand[i]) - on, 0)
            if decision.reason is not PowerReason.HOLD:
                reasons[decision.reason.value] = reasons.get(decision.reason.value, 0) + 1
    return ReplayResult(
        policy=policy.name,
        steps=n,
        powered_off=out_off,
        powered_on=out_on,
        waking=out_waking,
        short=out_short,
        demand=demand[start:stop].copy(),
        wakeups=wakeups,
        wake_events=events,
        power_offs=offs,
        reasons=reasons,
    )
