"""The replay's arithmetic on series small enough to work out by hand (issue #19)."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from scheduling.energy.policies import PowerDecision, PowerReason, PowerView
from scheduling.energy.replay import ReplayConfig, replay
from scheduling.energy.series import STEPS_PER_DAY

from .helpers import steps


@dataclass(frozen=True)
class FollowLast:
    """Keep exactly the last step's demand powered: no buffer, no forecast."""

    name: str = "follow"
    needs_forecast: bool = False
    memory_steps: int = 1

    def decide(self, view: PowerView) -> PowerDecision:
        return PowerDecision(view.last, PowerReason.HOLD if view.last == view.powered else PowerReason.WAKE_SHORT)


@dataclass(frozen=True)
class AllOff:
    name: str = "all_off"
    needs_forecast: bool = False
    memory_steps: int = 1

    def decide(self, view: PowerView) -> PowerDecision:
        return PowerDecision(0, PowerReason.DOWN_IDLE)


DEMAND = [2, 2, 2, 5, 5, 5, 1, 1]
# step:   0  1  2  3  4  5  6  7    (step 0 is history; steps 1..7 are replayed, no warm-up)


def test_short_node_minutes_and_wakeups_with_a_one_step_wake_up() -> None:
    result = replay(steps(DEMAND), FollowLast(), start=1, stop=8, config=ReplayConfig(wake_minutes=10, warmup_steps=0))
    # step 1: 10 on -> 2 (the last demand); 3: demand 5 on 2 nodes -> short 3; 4: 3 woken, still booting -> short 3;
    # 5: they are up; 7: back down to 1.
    assert result.short.tolist() == [0, 0, 3, 3, 0, 0, 0]
    assert result.summary()["short_node_minutes"] == 60  # 6 node-steps x 10 minutes
    assert result.wakeups == 3 and result.wake_events == 1
    assert result.powered_on.tolist() == [2, 2, 2, 2, 5, 5, 1]
    assert result.waking.tolist() == [0, 0, 0, 3, 0, 0, 0]
    assert result.powered_off.tolist() == [8, 8, 8, 5, 5, 5, 9]
    assert result.summary()["wakeups_per_day"] == pytest.approx(3 / (7 / STEPS_PER_DAY), abs=0.01)


def test_an_instant_wake_up_is_short_only_for_the_step_that_showed_the_rise() -> None:
    result = replay(steps(DEMAND), FollowLast(), start=1, stop=8, config=ReplayConfig(wake_minutes=0, warmup_steps=0))
    assert result.short.tolist() == [0, 0, 3, 0, 0, 0, 0]
    assert result.summary()["short_node_minutes"] == 30


def test_a_wake_up_of_eleven_minutes_takes_two_steps() -> None:
    assert ReplayConfig(wake_minutes=11).wake_steps == 2
    result = replay(steps(DEMAND), FollowLast(), start=1, stop=8, config=ReplayConfig(wake_minutes=11, warmup_steps=0))
    assert result.short.tolist() == [0, 0, 3, 3, 3, 0, 0]


def test_used_rate_counts_waking_nodes_as_powered() -> None:
    result = replay(steps(DEMAND), FollowLast(), start=1, stop=8, config=ReplayConfig(warmup_steps=0))
    # 2/2, 2/2, 2/2, 2/5 (3 booting), 5/5, 1/5, 1/1
    expected = (1 + 1 + 1 + 0.4 + 1 + 0.2 + 1) / 7
    assert result.summary()["used_rate_powered_on"] == pytest.approx(expected, abs=1e-4)


def test_busy_nodes_are_never_powered_down() -> None:
    demand = [9, 7, 7, 4, 5, 2]
    result = replay(steps(demand), AllOff(), start=1, stop=6, config=ReplayConfig(warmup_steps=0))
    # whatever the policy asks, the nodes that worked in the last finished step stay on (and nothing is woken)
    assert result.powered_on.tolist() == [9, 7, 7, 4, 4]
    assert result.power_offs == 1 + 2 + 3
    assert result.short.tolist() == [0, 0, 0, 1, 0]


def test_only_the_window_is_scored_after_the_warm_up() -> None:
    demand = [2] * 10 + [5] * 4
    result = replay(steps(demand), FollowLast(), start=10, stop=14, config=ReplayConfig(warmup_steps=5))
    assert result.steps == 4
    assert result.short.tolist() == [3, 3, 0, 0]  # the warm-up already powered down to 2
    assert result.wakeups == 3


def test_a_policy_that_needs_a_forecast_is_refused_without_one() -> None:
    from scheduling.energy.policies import ForecastPolicy

    with pytest.raises(ValueError, match="forecast"):
        replay(steps(DEMAND), ForecastPolicy(), start=1, stop=8)
