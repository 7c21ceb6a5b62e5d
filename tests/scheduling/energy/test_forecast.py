"""The forecaster on a small synthetic diurnal series: it trains on the past only and beats naive guesses."""

from __future__ import annotations

import numpy as np
import pytest

from scheduling.energy.forecast import FEATURES, DemandForecaster, ForecastConfig, features
from scheduling.energy.series import STEPS_PER_DAY, SeriesError, steps_from_minutes

from .helpers import diurnal_minutes


@pytest.fixture(scope="module")
def diurnal():  # type: ignore[no-untyped-def]
    rows = diurnal_minutes(10)
    return steps_from_minutes([r[0] for r in rows], [r[1] for r in rows], [r[2] for r in rows])


@pytest.fixture(scope="module")
def fitted(diurnal):  # type: ignore[no-untyped-def]
    config = ForecastConfig(horizon=12, max_iter=60)
    return DemandForecaster.fit(diurnal, until=8 * STEPS_PER_DAY, config=config)


def test_it_forecasts_a_diurnal_cycle_better_than_persistence_and_the_mean(diurnal, fitted) -> None:  # type: ignore[no-untyped-def]
    test = np.arange(8 * STEPS_PER_DAY, 10 * STEPS_PER_DAY - 12)
    predicted = fitted.forecast(diurnal, test)
    assert predicted.shape == (len(test), 12)
    k = 11  # two hours ahead
    truth = diurnal.demand[test + k]
    error = np.abs(predicted[:, k] - truth).mean()
    persistence = np.abs(diurnal.demand[test - 1] - truth).mean()
    mean_guess = np.abs(diurnal.demand[: 8 * STEPS_PER_DAY].mean() - truth).mean()
    assert error < 0.6 * persistence and error < 0.3 * mean_guess
    assert (predicted >= 0).all()


def test_features_never_read_the_decision_step_or_later() -> None:
    demand = np.arange(1, 2 * STEPS_PER_DAY + 1, dtype=np.int64)
    at = np.array([STEPS_PER_DAY + 5])
    starts = np.array(["2024-01-02T00:50"], dtype="datetime64[m]")
    x = features(demand, at, starts, horizon=6)
    poisoned = demand.copy()
    poisoned[STEPS_PER_DAY + 5 :] = 10_000  # the future: must change nothing
    assert np.array_equal(x, features(poisoned, at, starts, horizon=6), equal_nan=True)
    last = demand[STEPS_PER_DAY + 4]  # levels are differences from the last known step
    assert x[0, FEATURES.index("mean_30min")] == pytest.approx(
        demand[STEPS_PER_DAY + 2 : STEPS_PER_DAY + 5].mean() - last
    )
    assert x[3, FEATURES.index("day_ago")] == demand[3 + 5] - last  # target step i + 3, one day earlier
    assert x[0, FEATURES.index("hour")] == pytest.approx(50 / 60)
    assert x[0, FEATURES.index("weekday")] == 1  # 2024-01-02 was a Tuesday


def test_the_live_call_gives_the_replay_forecast(diurnal, fitted) -> None:  # type: ignore[no-untyped-def]
    at = 9 * STEPS_PER_DAY
    from_replay = fitted.forecast(diurnal, np.array([at]))[0]
    live = fitted.forecast_next(diurnal.demand[:at], diurnal.starts[at])
    assert np.allclose(from_replay, live)


def test_training_needs_a_day_of_history(diurnal) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(SeriesError, match="a day"):
        DemandForecaster.fit(diurnal, until=100)


def test_the_horizon_stays_under_a_day() -> None:
    with pytest.raises(ValueError, match="horizon"):
        ForecastConfig(horizon=STEPS_PER_DAY)
