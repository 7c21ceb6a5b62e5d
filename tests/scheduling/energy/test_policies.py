"""The power policies, decision by decision, and the floor as a property (issue #19)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from scheduling.energy.policies import (
    ForecastPolicy,
    HeliosCesPolicy,
    IdleTimeoutPolicy,
    PowerReason,
    PowerView,
)
from scheduling.energy.replay import ReplayConfig, replay

from .helpers import steps


def view(**kw: object) -> PowerView:
    base: dict[str, object] = {
        "total": 100,
        "on": 60,
        "waking": 0,
        "recent": (50, 50, 50),
        "forecast": (50.0,) * 12,
        "wake_steps": 1,
        "steps_since_wake": 1000,
    }
    base.update(kw)
    return PowerView(**base)  # type: ignore[arg-type]


def test_forecast_policy_wakes_ahead_of_a_forecast_rise() -> None:
    policy = ForecastPolicy(buffer=5, lead=1, spread=0)
    decision = policy.decide(view(forecast=(50.0, 52.0, 70.0) + (70.0,) * 9))
    # nodes ordered now serve steps 1..2 (one step to wake, one of lead): cover 70 + 5
    assert decision.target == 75 and decision.reason is PowerReason.WAKE_FORECAST


def test_forecast_policy_powers_down_only_when_trend_and_forecast_fall() -> None:
    policy = ForecastPolicy(buffer=5, lead=0, history=2, future=3, keep=0, spread=0)
    falling = view(on=80, recent=(60, 60, 50), forecast=(45.0, 45.0, 45.0) + (45.0,) * 9)
    assert policy.decide(falling).target == 55 and policy.decide(falling).reason is PowerReason.DOWN_FALLING
    rising_history = view(on=80, recent=(40, 40, 50), forecast=(45.0,) * 12)
    assert policy.decide(rising_history).reason is PowerReason.HOLD
    rising_forecast = view(on=80, recent=(60, 60, 50), forecast=(50.0, 60.0, 60.0) + (45.0,) * 9)
    assert policy.decide(rising_forecast).reason is PowerReason.HOLD


def test_forecast_policy_holds_for_keep_steps_after_a_wake_up() -> None:
    policy = ForecastPolicy(buffer=5, lead=0, future=3, keep=4, spread=0)
    falling = dict(on=80, recent=(60, 60, 50), forecast=(45.0,) * 12)
    assert policy.decide(view(**falling, steps_since_wake=3)).reason is PowerReason.HOLD
    assert policy.decide(view(**falling, steps_since_wake=4)).reason is PowerReason.DOWN_FALLING


def test_forecast_policy_trusts_demand_over_a_low_forecast_when_short() -> None:
    decision = ForecastPolicy(buffer=5, spread=0).decide(view(on=60, recent=(50, 60, 70), forecast=(30.0,) * 12))
    assert decision.target == 75 and decision.reason is PowerReason.WAKE_SHORT


def test_without_forecast_must_fall_a_falling_trend_is_enough() -> None:
    rising_forecast = view(on=80, recent=(60, 60, 50), forecast=(50.0, 60.0, 60.0) + (45.0,) * 9)
    policy = ForecastPolicy(buffer=5, lead=0, future=3, keep=0, spread=0, forecast_must_fall=False)
    # it powers down, but only to the highest forecast over the reach (this step and the next) plus the buffer
    assert policy.decide(rising_forecast).target == 65


def test_spread_widens_the_margin_after_a_restless_hour() -> None:
    quiet = view(recent=(50,) * 6)
    restless = view(recent=(30, 70, 40, 60, 50, 50))
    policy = ForecastPolicy(buffer=4, spread=0.5)
    assert policy.margin(quiet) == 4 and policy.margin(restless) == 4 + 20


@settings(max_examples=200, deadline=None)
@given(
    floor=st.integers(0, 120),
    total=st.integers(1, 100),
    on=st.integers(0, 100),
    recent=st.lists(st.integers(0, 100), min_size=1, max_size=8),
    forecast=st.lists(st.floats(0, 100), min_size=0, max_size=12),
    since=st.integers(0, 20),
)
def test_forecast_policy_never_asks_for_less_than_the_floor(
    floor: int, total: int, on: int, recent: list[int], forecast: list[float], since: int
) -> None:
    on = min(on, total)
    v = view(total=total, on=on, recent=tuple(recent), forecast=tuple(forecast), steps_since_wake=since)
    target = ForecastPolicy(floor=floor, keep=0, buffer=0).decide(v).target
    assert target >= min(floor, total)


@settings(max_examples=30, deadline=None)
@given(demand=st.lists(st.integers(0, 20), min_size=12, max_size=40), floor=st.integers(0, 20))
def test_a_replay_under_the_forecast_policy_never_goes_below_the_floor(demand: list[int], floor: int) -> None:
    series = steps(demand, total=20)
    forecasts = [[float(d)] * 12 for d in demand]  # a perfect-ish forecast: this step's demand, flat
    import numpy as np

    result = replay(
        series,
        ForecastPolicy(floor=floor, buffer=0, keep=0),
        start=1,
        stop=len(demand),
        forecasts=np.array(forecasts[1:], dtype=float),
        config=ReplayConfig(warmup_steps=0),
    )
    assert (result.powered_on + result.waking >= floor).all()


def test_idle_timeout_powers_down_nodes_idle_for_the_whole_window_and_wakes_for_waiting_work() -> None:
    policy = IdleTimeoutPolicy(suspend_steps=3)
    assert policy.decide(view(on=60, recent=(55, 40, 40))).target == 55  # 5 of them idle for 3 steps
    assert policy.decide(view(on=60, recent=(40, 40, 40))).reason is PowerReason.DOWN_IDLE
    short = policy.decide(view(on=40, recent=(40, 40, 48)))
    assert short.target == 48 and short.reason is PowerReason.WAKE_SHORT  # exactly what waits, no buffer
    assert policy.decide(view(on=40, waking=8, recent=(40, 40, 48))).reason is PowerReason.HOLD


def test_helios_ces_rule_as_published() -> None:
    helios = HeliosCesPolicy()  # buffer 20, keep 10, history 2, future 30
    assert helios.decide(view(on=40, recent=(40, 40, 50))).target == 70  # short: demand + buffer
    falling = dict(on=90, recent=(60, 60, 50), forecast=(45.0,) * 60)
    assert helios.decide(view(**falling)).target == 70
    assert helios.decide(view(**falling, steps_since_wake=9)).reason is PowerReason.HOLD  # within keep
    later_rise = (45.0,) * 30 + (80.0,) * 30  # the next 30 steps fall, the 30 after rise: Helios holds
    assert helios.decide(view(on=90, recent=(60, 60, 50), forecast=later_rise)).reason is PowerReason.HOLD
    assert helios.decide(view(on=70, recent=(60, 60, 50), forecast=(45.0,) * 60)).reason is PowerReason.HOLD
