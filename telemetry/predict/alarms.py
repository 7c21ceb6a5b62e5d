"""From scores to alarms, and how to count them honestly.

The unit that matters to an operator is the *alarm*: "drain GPU X, it will fail within a day". So:

- A GPU raises an alarm the first time its score reaches the threshold, then stays quiet for one horizon (it is
  being drained and inspected; repeating the alarm every hour would inflate both counts).
- An alarm is *true* if the GPU fails within the horizon after it, otherwise *false*. An alarm in the last horizon
  of the data whose GPU has not failed yet has an unknown outcome and is left out (``censored``).
- *Recall* is over failures: the fraction of failures that had a true alarm before them. Failures in the first
  horizon of the period are left out of recall (there was not a full horizon in which to warn about them).
- *Lead time* is from a failure's earliest true alarm to the failure.
- An *early* alarm is a false alarm whose GPU did fail, but later than the horizon (within
  :data:`EARLY_HORIZONS` horizons). It is still false, and counted so; the count tells an operator how many false
  alarms were right about the GPU and wrong only about when.
- Persistence: before thresholding, each row's score is replaced by the minimum over the GPU's last
  ``persist_rows`` rows (:func:`persistent_scores`), so one noisy hour cannot raise an alarm; a real precursor
  keeps the score up. On generated fleets three hours raised precision at equal recall by about a quarter. The
  span is set in time and turned into rows with the file's sampling period (:func:`rows_for`): three rows of hourly
  data, eighteen of 10-minute data.

:func:`choose_threshold` picks the threshold from scores on *training-period* data only.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

#: A false alarm whose GPU fails within this many horizons after it is reported as *early*.
EARLY_HORIZONS = 3


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
    #: False alarms whose GPU failed after the horizon but within :data:`EARLY_HORIZONS` horizons and inside the
    #: measured period (a subset of ``false_alarms``).
    early_alarms: int
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
            "early_false_alarms": self.early_alarms,
            "failures": self.failures,
            "caught": self.caught,
        }


def rows_for(span_s: float, period_s: float) -> int:
    """How many rows sampled every ``period_s`` cover ``span_s`` (at least one)."""
    return max(1, round(span_s / period_s))


def persistent_scores(gpu: np.ndarray, score: np.ndarray, persist_rows: int) -> np.ndarray:
    """Each row's score replaced by the minimum over this and the GPU's previous ``persist_rows - 1`` rows (rows in
    (gpu, time) order). A GPU's first rows, with too little history, get the minimum of what exists."""
    out = score.astype(np.float64, copy=True)
    for lag in range(1, max(1, persist_rows)):
        if lag >= len(score):
            break
        same = gpu[lag:] == gpu[:-lag]
        out[lag:] = np.where(same, np.minimum(out[lag:], score[:-lag]), out[lag:])
    return out


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
    with np.errstate(invalid="ignore"):
        # Only failures inside the period count, so a training-part figure never depends on later labels.
        early = ~true & ~censored & (nxt - t <= EARLY_HORIZONS * horizon_s) & (nxt <= end)
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
        early_alarms=int(early.sum()),
        failures=int(eligible.sum()),
        caught=len(caught_leads),
        lead_hours=tuple(sorted(caught_leads)),
    )


@dataclass(frozen=True, slots=True)
class ThresholdChoice:
    threshold: float
    metrics: AlarmMetrics
    target_met: bool


def threshold_grid(rows: ScoredRows, candidates: int = 400) -> np.ndarray:
    """Candidate thresholds: quantiles of the highest scores (only the top of the ranking can be an operating
    point for a rare event)."""
    positive = rows.score[rows.score > 0]
    if positive.size == 0:
        return np.empty(0)
    top = np.sort(positive)[::-1][: max(candidates * 10, 1000)]
    return np.unique(np.quantile(top, np.linspace(0, 1, candidates)))


def precision_at_recall(
    rows: ScoredRows,
    recalls: tuple[float, ...],
    *,
    horizon_s: float,
    failures: tuple[np.ndarray, np.ndarray],
    period: tuple[float, float],
) -> dict[float, float | None]:
    """For each recall level, the best precision any threshold reaches there. This is a hindsight view of the
    precision/recall curve, for reports only: choosing a threshold this way on test data would be cheating."""
    measured = [
        measure(rows, float(t), horizon_s=horizon_s, failures=failures, period=period) for t in threshold_grid(rows)
    ]
    out: dict[float, float | None] = {}
    for level in recalls:
        reach = [m.precision for m in measured if m.recall >= level and m.true_alarms + m.false_alarms > 0]
        out[level] = round(max(reach), 4) if reach else None
    return out


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
    """The threshold with the highest recall whose precision reaches ``target_precision`` with at least
    ``min_true_alarms`` true alarms (so one lucky alarm cannot set it).

    When no threshold reaches the target, the most *precise* one with that many true alarms, flagged
    ``target_met=False``: an alarm drains a GPU, so when the target is out of reach we would rather raise few,
    better alarms than many. With fewer true alarms than that anywhere, the highest threshold that caught
    anything; with none at all, the highest candidate, so a model that learned nothing stays quiet."""
    grid = threshold_grid(rows, candidates)
    if grid.size == 0:
        raise ValueError("no positive scores to choose a threshold from")
    measured = [measure(rows, float(t), horizon_s=horizon_s, failures=failures, period=period) for t in grid]
    enough = [m for m in measured if m.true_alarms >= min_true_alarms]
    meeting = [m for m in enough if m.precision >= target_precision]
    if meeting:
        best = max(meeting, key=lambda m: (m.recall, m.precision, -m.threshold))
        return ThresholdChoice(best.threshold, best, True)
    if enough:
        best = max(enough, key=lambda m: (m.precision, m.recall, m.threshold))
    else:
        caught = [m for m in measured if m.true_alarms > 0]
        best = max(caught, key=lambda m: m.threshold) if caught else measured[-1]
    return ThresholdChoice(best.threshold, best, False)
