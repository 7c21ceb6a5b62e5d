"""From scores to alarms, and how to count them honestly.

The unit that matters to an operator is the *alarm*: "drain GPU X, it will fail within a day". So:

- A GPU raises an alarm the first time its score reaches the threshold, then stays quiet for one horizon (it is
  being drained and inspected; repeating the alarm every hour would inflate both counts).
- An alarm is *true* if the GPU fails within the horizon after it, otherwise *false*. An alarm in the last horizon
  of the data whose GPU has not failed yet has an unknown outcome and is left out (``censored``).
- *Recall* is over failures: the fraction of failures that had a true alarm before them. Failures in the first
  horizon of the period are left out of recall (there was not a full horizon in which to warn about them).
- *Lead time* is from a failure's earliest true alarm to the failure.

:func:`choose_threshold` picks the threshold from scores on *training-period* data only.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True, slots=True)
class ScoredRows:
    """Scored rows in (gpu, time) order. ``next_failure`` is the GPU's next failure time (NaN if none)."""

    gpu: np.ndarray
    timestamp: np.ndarray
    score: np.ndarray
    next_failure: np.ndarray


@dataclass(frozen=True, slots=True)
class AlarmMetrics:
    threshold: float
    alarms: int
    true_alarms: int
    false_alarms: int
    censored_alarms: int
    failures: int
    caught: int
    lead_hours: tuple[float, ...]

    @property
    def precision(self) -> float:
        judged = self.true_alarms + self.false_alarms
        return self.true_alarms / judged if judged else 0.0

    @property
    def recall(self) -> float:
        return self.caught / self.failures if self.failures else 0.0

    @property
    def median_lead_hours(self) -> float | None:
        return float(np.median(self.lead_hours)) if self.lead_hours else None

    def as_dict(self) -> dict[str, object]:
        return {
            "precision": round(self.precision, 4),
            "recall": round(self.recall, 4),
            "median_lead_hours": None if self.median_lead_hours is None else round(self.median_lead_hours, 2),
            "threshold": self.threshold,
            "alarms": self.alarms,
            "true_alarms": self.true_alarms,
            "false_alarms": self.false_alarms,
            "censored_alarms": self.censored_alarms,
            "failures": self.failures,
            "caught": self.caught,
        }


def raise_alarms(rows: ScoredRows, threshold: float, cooldown_s: float) -> np.ndarray:
    """Indices of rows that raise an alarm (score >= threshold, one per GPU per cooldown)."""
    above = np.flatnonzero(rows.score >= threshold)
    keep: list[int] = []
    last_gpu, last_time = -1, -np.inf
    for i in above:
        g, t = int(rows.gpu[i]), float(rows.timestamp[i])
        if g != last_gpu or t >= last_time + cooldown_s:
            keep.append(int(i))
            last_gpu, last_time = g, t
    return np.array(keep, dtype=np.int64)


def measure(
    rows: ScoredRows,
    threshold: float,
    *,
    horizon_s: float,
    failures: tuple[np.ndarray, np.ndarray],
    period: tuple[float, float],
) -> AlarmMetrics:
    """Alarm precision, recall and lead time over ``period`` (start, end) at ``threshold``. ``failures`` is
    (gpu code, time) for every labelled failure."""
    start, end = period
    alarm_rows = raise_alarms(rows, threshold, horizon_s)
    t = rows.timestamp[alarm_rows]
    nxt = rows.next_failure[alarm_rows]
    with np.errstate(invalid="ignore"):
        true = nxt - t <= horizon_s
    censored = ~true & (t + horizon_s > end)
    # Earliest true alarm per failure (gpu, failure time).
    earliest: dict[tuple[int, float], float] = {}
    for i in np.flatnonzero(true):
        key = (int(rows.gpu[alarm_rows[i]]), float(nxt[i]))
        earliest[key] = min(earliest.get(key, np.inf), float(t[i]))
    fail_gpu, fail_time = failures
    scored_gpus = np.unique(rows.gpu)
    eligible = (fail_time >= start + horizon_s) & (fail_time <= end) & np.isin(fail_gpu, scored_gpus)
    caught_leads = [
        (ft - earliest[(int(g), float(ft))]) / 3600.0
        for g, ft in zip(fail_gpu[eligible], fail_time[eligible], strict=True)
        if (int(g), float(ft)) in earliest
    ]
    return AlarmMetrics(
        threshold=float(threshold),
        alarms=int(len(alarm_rows) - censored.sum()),
        true_alarms=int(true.sum()),
        false_alarms=int((~true & ~censored).sum()),
        censored_alarms=int(censored.sum()),
        failures=int(eligible.sum()),
        caught=len(caught_leads),
        lead_hours=tuple(sorted(caught_leads)),
    )


@dataclass(frozen=True, slots=True)
class ThresholdChoice:
    threshold: float
    metrics: AlarmMetrics
    target_met: bool


def choose_threshold(
    rows: ScoredRows,
    *,
    horizon_s: float,
    failures: tuple[np.ndarray, np.ndarray],
    period: tuple[float, float],
    target_precision: float,
    min_true_alarms: int = 3,
    candidates: int = 400,
) -> ThresholdChoice:
    """The threshold with the highest recall whose precision reaches ``target_precision`` (at least
    ``min_true_alarms`` true alarms, so one lucky alarm cannot set it). If no threshold reaches the target, the one
    with the best F0.5 (precision weighted over recall), flagged ``target_met=False``."""
    positive = rows.score[rows.score > 0]
    if positive.size == 0:
        raise ValueError("no positive scores to choose a threshold from")
    top = np.sort(positive)[::-1][: max(candidates * 10, 1000)]
    grid = np.unique(np.quantile(top, np.linspace(0, 1, candidates)))
    best: tuple[tuple[float, ...], AlarmMetrics] | None = None
    fallback: tuple[float, AlarmMetrics] | None = None
    for threshold in grid:
        m = measure(rows, float(threshold), horizon_s=horizon_s, failures=failures, period=period)
        if m.true_alarms >= min_true_alarms and m.precision >= target_precision:
            key = (m.recall, m.precision, -threshold)
            if best is None or key > best[0]:
                best = (key, m)
        f05 = _f_beta(m.precision, m.recall, 0.5)
        if fallback is None or f05 > fallback[0]:
            fallback = (f05, m)
    if best is not None:
        return ThresholdChoice(best[1].threshold, best[1], True)
    assert fallback is not None
    return ThresholdChoice(fallback[1].threshold, fallback[1], False)


def _f_beta(precision: float, recall: float, beta: float) -> float:
    if precision == 0 or recall == 0:
        return 0.0
    b2 = beta * beta
    return (1 + b2) * precision * recall / (b2 * precision + recall)
