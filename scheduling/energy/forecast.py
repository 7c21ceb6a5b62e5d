"""Forecast node demand a few hours ahead with gradient boosting, from the demand history alone.

The features follow Helios CES (Hu et al., SC '21): the calendar (hour of day, weekday), rolling means of recent
demand, and demand "3 h ago". Two things differ, on purpose:

- **Issued at decision time.** Helios's artifact predicts each step from features of that step (demand one and
  three hours before *it*), so its forecast for five hours ahead already contains demand four hours in the future.
  A controller cannot know that. Here a forecast made at the start of step ``i`` uses ``demand[:i]`` only, and one
  model covers every horizon ``k`` (steps ahead, a feature): lags are taken from the decision time, calendar
  features from the target time, plus the demand at the target's time one day and one week earlier (known as long
  as ``k`` is under a day).
- **The change, not the level.** The model learns ``demand[i + k] - demand[i - 1]``; trees cannot extrapolate, and
  the level a month later is often outside what they saw in training, while the shape of a change is not.

Pure: no clock, no files. The caller says which steps to train on (the history before the window it will replay)
and from which step to forecast; the live side will call :meth:`DemandForecaster.forecast_next` with the recent
history it keeps.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
from sklearn.ensemble import HistGradientBoostingRegressor
from threadpoolctl import threadpool_limits

from scheduling.energy.series import STEP_MINUTES, STEPS_PER_DAY, STEPS_PER_HOUR, IntArray, SeriesError, StepSeries

FloatArray = npt.NDArray[np.float64]

MIN_TRAIN_STEPS = STEPS_PER_DAY  # a day of history at least: the "same time yesterday" feature needs it
THREE_HOURS = 3 * STEPS_PER_HOUR
WEEK = 7 * STEPS_PER_DAY
FEATURES = (
    "horizon",
    "hour",
    "weekday",
    "mean_30min",
    "mean_1h",
    "mean_3h",
    "std_1h",
    "ago_3h",
    "ago_3h_soft",
    "day_ago",
    "week_ago",
)
WEEKLY = (FEATURES.index("weekday"), FEATURES.index("week_ago"))


@dataclass(frozen=True)
class ForecastConfig:
    """``horizon``: steps forecast from each decision (60 = 10 h, what the Helios rule looks at); at most a day.
    ``train_stride``: use every n-th decision step for training (neighbouring steps are near duplicates).
    ``threads``: cap on the BLAS/OpenMP threads while fitting, so a replay does not take every core.
    ``weekly``: use the weekday and the demand a week earlier. Off by default: trained on Philly's October and
    November (eight weeks), they made December's forecast worse than "no change" (docs/energy.md); with months of
    history a site may turn them on."""

    horizon: int = 60
    train_stride: int = 3
    max_iter: int = 100
    learning_rate: float = 0.1
    max_leaf_nodes: int = 31
    seed: int = 0
    threads: int = 2
    weekly: bool = False

    def __post_init__(self) -> None:
        if not 1 <= self.horizon < STEPS_PER_DAY:
            raise ValueError(f"horizon must be 1..{STEPS_PER_DAY - 1} steps")
        if self.train_stride < 1:
            raise ValueError("train_stride must be >= 1")


def _calendar(starts: npt.NDArray[Any]) -> tuple[FloatArray, FloatArray]:
    """Hour of day (fractional) and weekday (Monday 0) of each time."""
    minutes = starts.astype("datetime64[m]").astype(np.int64)
    days = minutes // (24 * 60)
    hour = (minutes - days * 24 * 60) / 60.0
    weekday = (days + 3) % 7  # 1970-01-01 was a Thursday
    return hour.astype(np.float64), weekday.astype(np.float64)


def _lag(demand: FloatArray, idx: IntArray, known: IntArray) -> FloatArray:
    """``demand[idx]`` where ``0 <= idx < known`` (``known``: the decision step, nothing at or after it may be
    read), NaN elsewhere; the boosting model treats NaN as "missing" natively."""
    ok = (idx >= 0) & (idx < known)
    out = np.full(idx.shape, np.nan)
    out[ok] = demand[idx[ok]]
    return out


def features(
    demand: IntArray, decisions: IntArray, decision_starts: npt.NDArray[np.datetime64], horizon: int
) -> FloatArray:
    """The feature matrix for forecasting from each decision step ``i`` (which knows ``demand[:i]``) every step
    ``i + k``, ``k`` in ``0..horizon-1``: ``len(decisions) * horizon`` rows, decision-major, columns as
    :data:`FEATURES`. ``decision_starts[n]`` is when decision ``n``'s step begins (it may lie past the series)."""
    d = demand.astype(np.float64)
    cum = np.concatenate(([0.0], np.cumsum(d)))
    cum2 = np.concatenate(([0.0], np.cumsum(d * d)))
    i = decisions.astype(np.int64)

    def window_mean(width: int) -> FloatArray:
        lo = np.maximum(i - width, 0)
        n = np.maximum(i - lo, 1)
        return (cum[i] - cum[lo]) / n

    lo6 = np.maximum(i - STEPS_PER_HOUR, 0)
    n6 = np.maximum(i - lo6, 1)
    mean6 = (cum[i] - cum[lo6]) / n6
    var6 = np.maximum((cum2[i] - cum2[lo6]) / n6 - mean6 * mean6, 0.0)
    ago = _lag(d, i - THREE_HOURS, i)
    soft = 0.5 * ago + 0.25 * (_lag(d, i - THREE_HOURS - 1, i) + _lag(d, i - THREE_HOURS + 1, i))
    last = _lag(d, i - 1, i)
    # Levels as differences from the last known demand: the model learns shapes, which carry over to a month whose
    # level it never saw (with the absolute level as a feature it did worse than "no change" out of sample).
    per_decision = np.column_stack(
        [window_mean(3) - last, mean6 - last, window_mean(THREE_HOURS) - last, np.sqrt(var6), ago - last, soft - last]
    )
    k = np.arange(horizon, dtype=np.int64)
    target = (i[:, None] + k[None, :]).ravel()
    known = np.repeat(i, horizon)
    when = (decision_starts.astype("datetime64[m]")[:, None] + k[None, :] * np.timedelta64(STEP_MINUTES, "m")).ravel()
    hour, weekday = _calendar(when)
    return np.column_stack(
        [
            np.tile(k, len(i)).astype(np.float64),
            hour,
            weekday,
            np.repeat(per_decision, horizon, axis=0),
            _lag(d, target - STEPS_PER_DAY, known) - np.repeat(last, horizon),
            _lag(d, target - WEEK, known) - np.repeat(last, horizon),
        ]
    )


@dataclass
class DemandForecaster:
    """A fitted model; :meth:`fit` makes one. ``train_steps``: how many steps of history it learned from."""

    config: ForecastConfig
    model: HistGradientBoostingRegressor
    train_steps: int
    blank: tuple[int, ...] = ()  # feature columns the history never filled (a week ago, with days of history)

    @classmethod
    def fit(cls, series: StepSeries, *, until: int, config: ForecastConfig | None = None) -> DemandForecaster:
        """Train on the steps before ``until`` only: every target it learns lies in ``series[:until]``."""
        config = config or ForecastConfig()
        if until < MIN_TRAIN_STEPS + 2:
            raise SeriesError(f"need at least a day ({MIN_TRAIN_STEPS} steps) of history to train the forecaster")
        decisions = np.arange(1, until, config.train_stride, dtype=np.int64)
        x = features(series.demand, decisions, series.starts[decisions], config.horizon)
        target = (decisions[:, None] + np.arange(config.horizon)[None, :]).ravel()
        last = np.repeat(series.demand[decisions - 1], config.horizon)
        keep = target < until
        y = series.demand[np.minimum(target, len(series) - 1)] - last
        x = x[keep]
        # A column with no value at all cannot be binned; it carries nothing either, so it becomes a constant.
        blank = tuple(int(c) for c in np.flatnonzero(np.isnan(x).all(axis=0)))
        if not config.weekly:
            blank = tuple(sorted({*blank, *WEEKLY}))
        x[:, list(blank)] = 0.0
        model = HistGradientBoostingRegressor(
            max_iter=config.max_iter,
            learning_rate=config.learning_rate,
            max_leaf_nodes=config.max_leaf_nodes,
            loss="absolute_error",
            early_stopping=False,
            categorical_features=[FEATURES.index("weekday")] if config.weekly else None,
            random_state=config.seed,
        )
        with threadpool_limits(limits=config.threads):
            model.fit(x, y[keep].astype(np.float64))
        return cls(config=config, model=model, train_steps=until, blank=blank)

    def forecast(self, series: StepSeries, decisions: IntArray) -> FloatArray:
        """Forecast demand for steps ``i .. i + horizon - 1`` from each decision step ``i`` (knowing
        ``demand[:i]``): shape ``(len(decisions), horizon)``, never below zero."""
        decisions = np.asarray(decisions, dtype=np.int64)
        if len(decisions) == 0:
            return np.zeros((0, self.config.horizon))
        if decisions.min() < 1:
            raise ValueError("a decision needs at least one known step before it")
        starts = series.starts[0] + decisions * np.timedelta64(STEP_MINUTES, "m")
        return self._predict(series.demand, decisions, starts)

    def forecast_next(self, history: IntArray, next_start: np.datetime64) -> FloatArray:
        """The live side's call: ``history`` is the demand of consecutive steps up to the one before
        ``next_start``; returns the forecast for ``next_start`` and the ``horizon - 1`` steps after it."""
        history = np.asarray(history, dtype=np.int64)
        if len(history) == 0:
            raise ValueError("empty history")
        at = np.array([len(history)], dtype=np.int64)
        forecast: FloatArray = self._predict(history, at, np.array([next_start], dtype="datetime64[m]"))[0]
        return forecast

    def _predict(self, demand: IntArray, decisions: IntArray, starts: npt.NDArray[np.datetime64]) -> FloatArray:
        h = self.config.horizon
        x = features(demand, decisions, starts, h)
        x[:, list(self.blank)] = 0.0
        with threadpool_limits(limits=self.config.threads):
            change = np.asarray(self.model.predict(x), dtype=np.float64).reshape(len(decisions), h)
        last = demand[decisions - 1].astype(np.float64)[:, None]
        return np.asarray(np.maximum(last + change, 0.0), dtype=np.float64)
