"""One comparison, as ``corral energy replay`` and ``bench/energy.py`` run it: train the forecaster on the history
before the window, replay the window under Corral's policy and the two baselines, and report each."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import date, datetime, time, timedelta

import numpy as np
import numpy.typing as npt

from scheduling.energy.forecast import MIN_TRAIN_STEPS, DemandForecaster, ForecastConfig
from scheduling.energy.policies import ForecastPolicy, HeliosCesPolicy, IdleTimeoutPolicy, PowerPolicy
from scheduling.energy.replay import ReplayConfig, ReplayResult, replay
from scheduling.energy.series import STEP_MINUTES, SeriesError, StepSeries


def default_policies() -> tuple[PowerPolicy, ...]:
    """Corral's policy (key ``forecast``) and the two baselines, in the order the report lists them."""
    return (ForecastPolicy(), IdleTimeoutPolicy(), HeliosCesPolicy())


def parse_when(text: str, *, end_of_day: bool) -> datetime:
    """``YYYY-MM-DD`` or an ISO date and time. A bare date as the window's inclusive end means the whole day."""
    try:
        if len(text.strip()) == 10:
            day = date.fromisoformat(text.strip())
            return datetime.combine(day + timedelta(days=1) if end_of_day else day, time())
        moment = datetime.fromisoformat(text.strip()).replace(tzinfo=None)
    except ValueError:
        raise SeriesError(f"bad date {text!r}: use YYYY-MM-DD or YYYY-MM-DDTHH:MM") from None
    return moment + timedelta(minutes=STEP_MINUTES) if end_of_day else moment


@dataclass(frozen=True)
class Window:
    """Steps ``[start, stop)`` of a series: the scored window; everything before ``start`` is history."""

    start: int
    stop: int


def window_of(series: StepSeries, test_from: datetime, test_until: datetime) -> Window:
    """The steps from ``test_from`` up to (not including) ``test_until``; refuses a window that is empty, not
    inside the series, or without a day of history before it (the forecaster's minimum)."""
    first = series.starts[0].astype(datetime)
    end = (series.starts[-1] + np.timedelta64(STEP_MINUTES, "m")).astype(datetime)
    if test_until <= test_from:
        raise SeriesError("the test window is empty: --test-to must not be before --test-from")
    if test_from < first or test_until > end:
        raise SeriesError(
            f"the test window must lie inside the series, which covers {first:%Y-%m-%d %H:%M} to {end:%Y-%m-%d %H:%M}"
        )
    start, stop = series.index_at(test_from), series.index_at(test_until)
    if start < MIN_TRAIN_STEPS + 2:
        raise SeriesError(
            f"no history before --test-from to train on: need at least a day, the series starts {first:%Y-%m-%d %H:%M}"
        )
    if stop <= start:
        raise SeriesError("the test window holds no whole 10-minute step")
    return Window(start, stop)


@dataclass
class Comparison:
    results: dict[str, ReplayResult]
    forecast_mae: float
    train_steps: int
    window: Window

    def as_dict(self, series: StepSeries, replay_config: ReplayConfig) -> dict[str, object]:
        data: dict[str, object] = {name: r.summary() for name, r in self.results.items()}
        w = self.window
        demand = series.demand[w.start : w.stop]
        data["replay"] = {
            "from": str(series.starts[w.start]),
            "to": str(series.starts[w.stop - 1] + np.timedelta64(STEP_MINUTES, "m")),
            "steps": w.stop - w.start,
            "step_minutes": STEP_MINUTES,
            "wake_minutes": replay_config.wake_minutes,
            "nodes_mean": round(float(series.total[w.start : w.stop].mean()), 2),
            "demand_mean": round(float(demand.mean()), 2),
            "history_steps": self.train_steps,
            "filled_steps": series.filled,
            "forecast_mae_nodes": round(self.forecast_mae, 2),
        }
        return data


def forecasts_for(
    series: StepSeries, window: Window, forecaster: DemandForecaster, replay_config: ReplayConfig
) -> npt.NDArray[np.float64]:
    """The forecasts issued at every replayed step (warm-up included), as :func:`replay` wants them."""
    first = max(1, window.start - replay_config.warmup_steps)
    return forecaster.forecast(series, np.arange(first, window.stop, dtype=np.int64))


def compare(
    series: StepSeries,
    window: Window,
    *,
    policies: Sequence[PowerPolicy] | None = None,
    forecast_config: ForecastConfig | None = None,
    replay_config: ReplayConfig | None = None,
    forecaster: DemandForecaster | None = None,
) -> Comparison:
    """Train on ``series[:window.start]`` (unless a fitted ``forecaster`` is given), then replay each policy."""
    replay_config = replay_config or ReplayConfig()
    forecaster = forecaster or DemandForecaster.fit(series, until=window.start, config=forecast_config)
    forecasts = forecasts_for(series, window, forecaster, replay_config)
    results = {
        p.name: replay(series, p, start=window.start, stop=window.stop, forecasts=forecasts, config=replay_config)
        for p in (policies or default_policies())
    }
    return Comparison(
        results=results,
        forecast_mae=forecast_mae(series, window, forecasts, replay_config),
        train_steps=forecaster.train_steps,
        window=window,
    )


def forecast_mae(
    series: StepSeries, window: Window, forecasts: npt.NDArray[np.float64], replay_config: ReplayConfig
) -> float:
    """Mean absolute error, in nodes, of the forecast for the step a wake-up ordered now would serve (over the
    scored window, where that step is inside it)."""
    first = max(1, window.start - replay_config.warmup_steps)
    k = min(replay_config.wake_steps, forecasts.shape[1] - 1)
    steps = np.arange(window.start, window.stop - k)
    if len(steps) == 0:
        return float("nan")
    predicted = forecasts[steps - first, k]
    return float(np.abs(predicted - series.demand[steps + k]).mean())
