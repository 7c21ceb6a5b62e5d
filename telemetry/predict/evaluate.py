"""Walk-forward evaluation: ``corral failures evaluate`` and the benchmark.

The history is split in time: the earlier part (default two thirds) is the *training part*, the rest the *test
part*. In both, the model is retrained every ``retrain_every_s`` on the latest ``train_window_s`` of rows whose
labels are already known at that moment (rows at least one horizon old), then scores the next period it has not
seen: sliding training exactly as the control plane runs it. Scores from the training part (its own walk-forward
folds) choose the alarm threshold; the test part is scored with that threshold and never influences it.

Any file in the schema can be evaluated, whoever wrote it. Every span (windows, horizon, retraining, persistence) is
set in time; persistence becomes rows with the file's sampling period, which the report states. A training part
without a failure to learn from is refused (:class:`NotEnoughData`); a test part without a failure is evaluated,
but its precision and recall are reported as not measurable (``None``) with :data:`NOTHING_TO_MEASURE`, since
neither has anything to be a fraction of.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import numpy as np
from sklearn.metrics import average_precision_score

from telemetry.predict.alarms import (
    AlarmMetrics,
    ScoredRows,
    choose_threshold,
    measure,
    persistent_scores,
    precision_at_recall,
    raise_alarms,
    rows_for,
)
from telemetry.predict.estimators import DEFAULT_MAX_NEGATIVES, ModelKind, NotEnoughData, fit
from telemetry.predict.features import build_features, sampling_period
from telemetry.predict.labels import RowLabels, failure_events, label_rows
from telemetry.predict.training import (
    DAY,
    DEFAULT_HORIZON_S,
    DEFAULT_PERSIST_S,
    DEFAULT_TARGET_PRECISION,
    DEFAULT_TRAIN_WINDOW_S,
)
from telemetry.schema import FailureLabel
from telemetry.table import TelemetryTable

#: Recall levels at which reports show the best precision any threshold reached on the test part (hindsight).
HINDSIGHT_RECALLS = (0.25, 0.5)
#: Why a report has no test precision or recall.
NOTHING_TO_MEASURE = "the test period has no failure: nothing to measure precision/recall against"


@dataclass(frozen=True, slots=True)
class EvalConfig:
    kind: ModelKind = ModelKind.GBDT
    horizon_s: float = DEFAULT_HORIZON_S
    test_fraction: float = 1 / 3
    retrain_every_s: float = 7 * DAY
    train_window_s: float = DEFAULT_TRAIN_WINDOW_S
    #: Sliding training in the test part (the default, as the control plane runs it). ``False`` keeps the model
    #: fitted at the split for the whole test part: the static baseline that sliding training is measured against.
    #: The training part is walked forward either way, since that is how the threshold is chosen.
    sliding: bool = True
    min_train_s: float = 14 * DAY
    target_precision: float = DEFAULT_TARGET_PRECISION
    #: Alarm only on a score that held this long; in rows of the file's sampling period (at least one).
    persist_s: float = DEFAULT_PERSIST_S
    seed: int = 0
    max_negatives: int = DEFAULT_MAX_NEGATIVES

    def __post_init__(self) -> None:
        if not 0 < self.test_fraction < 1:
            raise ValueError("test_fraction must be between 0 and 1")
        if min(self.horizon_s, self.retrain_every_s, self.train_window_s, self.min_train_s, self.persist_s) <= 0:
            raise ValueError(
                "horizon, retrain period, training window, minimum training span and persistence must be positive"
            )


@dataclass(frozen=True)
class EvaluationReport:
    config: EvalConfig
    test: AlarmMetrics
    validation: AlarmMetrics
    target_met_on_training_part: bool
    split_at: float
    test_row_average_precision: float | None
    folds: int
    train_seconds: float
    score_seconds: float
    feature_seconds: float
    rows: int
    gpus: int
    #: The file's sampling period (median gap between a GPU's rows) and the persistence it gave, in rows.
    sampling_period_s: float
    persist_rows: int
    hindsight_precision_at_recall: dict[float, float | None] = field(default_factory=dict)
    caught_failures: tuple[tuple[str, float], ...] = field(default=())  # (gpu uuid, failed_at) in the test part
    missed_failures: tuple[tuple[str, float], ...] = field(default=())
    #: The test part's false alarms as (gpu uuid, alarm time, the GPU's next failure or NaN), for the benchmark's
    #: breakdown of what raised them.
    false_alarm_rows: tuple[tuple[str, float, float], ...] = field(default=())

    @property
    def nothing_to_measure(self) -> str | None:
        """Why the test part has no precision or recall, or ``None`` when it has them."""
        return NOTHING_TO_MEASURE if self.test.failures == 0 else None

    def as_dict(self) -> dict[str, Any]:
        out = _measured(self.test)
        out.update(
            {
                "model": str(self.config.kind),
                "horizon_hours": self.config.horizon_s / 3600,
                "target_precision": self.config.target_precision,
                "target_met_on_training_part": self.target_met_on_training_part,
                "validation": _measured(self.validation),
                "test_row_average_precision": None
                if self.test_row_average_precision is None
                else round(self.test_row_average_precision, 4),
                "hindsight_precision_at_recall": {str(k): v for k, v in self.hindsight_precision_at_recall.items()},
                "split_at": self.split_at,
                "nothing_to_measure": self.nothing_to_measure,
                "sampling_period_s": self.sampling_period_s,
                "persist_rows": self.persist_rows,
                "persist_hours": self.config.persist_s / 3600,
                "retrain_every_hours": self.config.retrain_every_s / 3600 if self.config.sliding else None,
                "train_window_days": self.config.train_window_s / DAY,
                "folds": self.folds,
                "rows": self.rows,
                "gpus": self.gpus,
                "feature_seconds": round(self.feature_seconds, 2),
                "train_seconds": round(self.train_seconds, 2),
                "score_seconds": round(self.score_seconds, 2),
            }
        )
        return out


def _measured(metrics: AlarmMetrics) -> dict[str, Any]:
    """``metrics.as_dict()``, with precision and recall ``None`` over a period without failures: every judged alarm
    there is false by construction, and "precision 0.0, recall 0.0" would read as a model that failed."""
    out = metrics.as_dict()
    if metrics.failures == 0:
        out.update(precision=None, recall=None)
    return out


def evaluate(
    table: TelemetryTable,
    labels: Iterable[FailureLabel],
    config: EvalConfig = EvalConfig(),  # noqa: B008 - frozen, so a shared default is safe
) -> EvaluationReport:
    """Walk-forward evaluation of ``config`` on ``table``. Raises ``ValueError`` when the history is too short and
    :class:`NotEnoughData` when the training part has no failure a fold could learn from."""
    labels = list(labels)
    horizon = config.horizon_s
    period = sampling_period(table)
    persist_rows = rows_for(config.persist_s, period)
    start, end = table.start, table.end
    split = start + (1 - config.test_fraction) * (end - start)
    if split - start < config.min_train_s + horizon:
        raise ValueError(
            f"the training part ({(split - start) / DAY:.1f} days) is shorter than the minimum training span "
            f"plus one horizon ({(config.min_train_s + horizon) / DAY:.1f} days); provide a longer history"
        )
    rl = label_rows(table, labels, horizon)
    failures = failure_events(table, labels)
    _check_trainable(table, rl, failures, config, split)
    t0 = time.perf_counter()
    features = build_features(table)
    feature_seconds = time.perf_counter() - t0

    timer = _Timer()
    # Validation folds score up to split - horizon, so every alarm's outcome is known at the split.
    first_fold = start + config.min_train_s
    validation = _walk_forward(
        table, rl, features.values, config, first_fold, split - horizon, timer, persist_rows, sliding=True
    )
    test = _walk_forward(
        table, rl, features.values, config, split, end + 1, timer, persist_rows, sliding=config.sliding
    )
    choice = choose_threshold(
        validation,
        horizon_s=horizon,
        failures=failures,
        period=(start + config.min_train_s, split),
        target_precision=config.target_precision,
    )
    test_metrics = measure(test, choice.threshold, horizon_s=horizon, failures=failures, period=(split, end))
    hindsight = precision_at_recall(test, HINDSIGHT_RECALLS, horizon_s=horizon, failures=failures, period=(split, end))
    caught, missed, false_alarms = _alarm_outcomes(table, test, choice.threshold, horizon, failures, (split, end))
    y_test = _positive(test, horizon)
    ap = float(average_precision_score(y_test, test.score)) if 0 < y_test.sum() < len(y_test) else None
    return EvaluationReport(
        config=config,
        test=test_metrics,
        validation=choice.metrics,
        target_met_on_training_part=choice.target_met,
        split_at=split,
        test_row_average_precision=ap,
        folds=timer.folds,
        train_seconds=timer.train,
        score_seconds=timer.score,
        feature_seconds=feature_seconds,
        rows=len(table),
        gpus=len(table.gpu_names),
        sampling_period_s=period,
        persist_rows=persist_rows,
        hindsight_precision_at_recall=hindsight,
        caught_failures=caught,
        missed_failures=missed,
        false_alarm_rows=false_alarms,
    )


def _check_trainable(
    table: TelemetryTable,
    rl: RowLabels,
    failures: tuple[np.ndarray, np.ndarray],
    config: EvalConfig,
    split: float,
) -> None:
    """Refuse, before any work, a training part whose walk-forward folds would have no failure to learn from.

    The validation folds retrain at ``start + min_train_s``, then every ``retrain_every_s`` up to one horizon before
    the split, each on rows at least one horizon older than the fold. The latest of them sees the most: if no
    positive row lies in its training rows or in an earlier fold's, no fold can fit a model, and there would be
    no scores to choose a threshold from."""
    start = table.start
    first = start + config.min_train_s
    last = split - config.horizon_s
    folds = first + config.retrain_every_s * np.arange(max(1, int(np.ceil((last - first) / config.retrain_every_s))))
    ts = table.timestamp
    pos_times = ts[rl.positive]
    trainable = any(
        ((pos_times >= f - config.train_window_s) & (pos_times <= f - config.horizon_s)).any() for f in folds
    )
    if trainable:
        return
    _, fail_time = failures
    in_part = int(((fail_time >= start) & (fail_time < split)).sum())
    from_, to = _day(start), _day(split)
    if in_part == 0:
        raise NotEnoughData(
            f"the training part ({from_} to {to}) has no failure in the labels: cannot train a model; it needs "
            "labelled failures in the earlier part of the history (a smaller --test-fraction gives it more)"
        )
    raise NotEnoughData(
        f"the training part ({from_} to {to}) has {in_part} failure(s), none early enough to train on (walk-forward "
        f"folds start on day {config.min_train_s / DAY:g} and train on rows at least one horizon old): cannot train "
        "a model; provide a longer history"
    )


def _day(epoch_s: float) -> str:
    return datetime.fromtimestamp(epoch_s, tz=UTC).strftime("%Y-%m-%d %H:%M UTC")


@dataclass
class _Timer:
    train: float = 0.0
    score: float = 0.0
    folds: int = 0


def _walk_forward(
    table: TelemetryTable,
    rl: RowLabels,
    x: np.ndarray,
    config: EvalConfig,
    first: float,
    last: float,
    timer: _Timer,
    persist_rows: int,
    *,
    sliding: bool,
) -> ScoredRows:
    """Retrain at ``first``, ``first + retrain_every``, ... and score each following period up to ``last`` (with
    ``sliding=False``, fit once at ``first`` and score everything up to ``last``)."""
    ts = table.timestamp
    picked: list[np.ndarray] = []
    scores: list[np.ndarray] = []
    fold_start = first
    while fold_start < last:
        fold_end = min(fold_start + config.retrain_every_s, last) if sliding else last
        train = np.flatnonzero(
            rl.usable & (ts >= fold_start - config.train_window_s) & (ts <= fold_start - config.horizon_s)
        )
        target = np.flatnonzero(rl.usable & (ts >= fold_start) & (ts < fold_end))
        if target.size:
            t0 = time.perf_counter()
            try:
                model = fit(
                    config.kind, x[train], rl.positive[train], seed=config.seed, max_negatives=config.max_negatives
                )
            except NotEnoughData:
                model = None
            t1 = time.perf_counter()
            scores.append(model.score(x[target]) if model is not None else np.zeros(target.size))
            timer.train += t1 - t0
            timer.score += time.perf_counter() - t1
            timer.folds += 1
            picked.append(target)
        fold_start = fold_end
    rows = np.concatenate(picked) if picked else np.empty(0, dtype=np.int64)
    score = np.concatenate(scores) if scores else np.empty(0)
    order = np.argsort(rows, kind="stable")  # back to (gpu, time) order, which persistence and alarms rely on
    rows, score = rows[order], score[order]
    score = persistent_scores(table.gpu[rows], score, persist_rows)
    return ScoredRows(gpu=table.gpu[rows], timestamp=ts[rows], score=score, next_failure=rl.next_failure[rows])


def _positive(rows: ScoredRows, horizon: float) -> np.ndarray:
    with np.errstate(invalid="ignore"):
        positive: np.ndarray = rows.next_failure - rows.timestamp <= horizon
    return positive


def _alarm_outcomes(
    table: TelemetryTable,
    rows: ScoredRows,
    threshold: float,
    horizon: float,
    failures: tuple[np.ndarray, np.ndarray],
    period: tuple[float, float],
) -> tuple[tuple[tuple[str, float], ...], tuple[tuple[str, float], ...], tuple[tuple[str, float, float], ...]]:
    """The test part's failures caught and missed, as (gpu uuid, failed at), and its false alarms as (gpu uuid,
    alarm time, next failure or NaN), judged as :func:`measure` judges them: for the benchmark's per-kind recall
    and its breakdown of what raised the false alarms."""
    start, end = period
    true: set[tuple[int, float]] = set()
    false: list[tuple[str, float, float]] = []
    for i in raise_alarms(rows, threshold, horizon):
        g, t, nxt = int(rows.gpu[i]), float(rows.timestamp[i]), float(rows.next_failure[i])
        if nxt - t <= horizon:
            true.add((g, nxt))
        elif t + horizon <= end:  # judged: its horizon ends inside the data (else censored)
            false.append((table.gpu_names[g], t, nxt))
    scored = set(np.unique(rows.gpu).tolist())
    caught: list[tuple[str, float]] = []
    missed: list[tuple[str, float]] = []
    for g, ft in zip(*failures, strict=True):
        if not (start + horizon <= ft <= end) or int(g) not in scored:
            continue
        entry = (table.gpu_names[int(g)], float(ft))
        (caught if (int(g), float(ft)) in true else missed).append(entry)
    return tuple(caught), tuple(missed), tuple(false)
