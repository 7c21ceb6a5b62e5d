"""Training and scoring entry points for the control plane's periodic tasks.

Sliding training: every retrain (daily, say) fits a fresh model on the latest ``train_window_s`` of history whose
labels are already known, i.e. rows at least one horizon old. The alarm threshold comes from the newest quarter of
that window, held out from a first fit; the final model is then refitted on the whole window.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import numpy as np

from telemetry.predict.alarms import ScoredRows, choose_threshold, persistent_scores, rows_for
from telemetry.predict.artifact import ModelArtifact, check_compatible, make_header
from telemetry.predict.estimators import DEFAULT_MAX_NEGATIVES, ModelKind, NotEnoughData, fit
from telemetry.predict.features import HOUR, FeatureMatrix, build_features, sampling_period
from telemetry.predict.labels import RowLabels, failure_events, label_rows
from telemetry.schema import FailureLabel
from telemetry.table import TelemetryTable

DAY = 86_400.0
DEFAULT_HORIZON_S = DAY
DEFAULT_TRAIN_WINDOW_S = 60 * DAY
DEFAULT_TARGET_PRECISION = 0.84
#: Alarm only on a score that held this long (telemetry.predict.alarms): three rows of hourly data.
DEFAULT_PERSIST_S = 3 * HOUR
HOLDOUT_FRACTION = 0.25


@dataclass(frozen=True, slots=True)
class GpuRisk:
    gpu_uuid: str
    node: str
    timestamp: float  # of the row that was scored
    score: float
    alarm: bool


def train_model(
    table: TelemetryTable,
    labels: Iterable[FailureLabel],
    *,
    now: float,
    kind: ModelKind = ModelKind.GBDT,
    horizon_s: float = DEFAULT_HORIZON_S,
    train_window_s: float = DEFAULT_TRAIN_WINDOW_S,
    threshold: float | None = None,
    target_precision: float = DEFAULT_TARGET_PRECISION,
    persist_rows: int | None = None,
    seed: int = 0,
    max_negatives: int = DEFAULT_MAX_NEGATIVES,
    first_seen: Mapping[str, float] | None = None,
) -> ModelArtifact:
    """Fit a model on rows in ``[now - train_window_s, now - horizon_s]`` and package it.

    With ``threshold=None`` the alarm threshold is chosen on a held-out final quarter of the window for
    ``target_precision``; pass a threshold to reuse one chosen elsewhere (e.g. by ``corral failures evaluate``).
    ``persist_rows`` defaults to :data:`DEFAULT_PERSIST_S` in rows of the table's sampling period; the artifact
    stores the rows, so score tables of the same period with it. Raises :class:`NotEnoughData` when the window
    holds no failure.
    """
    labels = list(labels)
    if persist_rows is None:
        persist_rows = rows_for(DEFAULT_PERSIST_S, sampling_period(table))
    features = build_features(table, first_seen=first_seen)
    rl = label_rows(table, labels, horizon_s)
    start, end = now - train_window_s, now - horizon_s
    rows = _window(table, rl, start, end)
    metrics: dict[str, object] = {}
    if threshold is None:
        cut = end - HOLDOUT_FRACTION * (end - start)
        early = _window(table, rl, start, cut - horizon_s)
        late = _window(table, rl, cut, end)
        model = fit(kind, features.values[early], rl.positive[early], seed=seed, max_negatives=max_negatives)
        late_scores = persistent_scores(table.gpu[late], model.score(features.values[late]), persist_rows)
        scored = _scored(table, rl, late, late_scores)
        choice = choose_threshold(
            scored,
            horizon_s=horizon_s,
            failures=failure_events(table, labels),
            period=(cut, end + horizon_s),
            target_precision=target_precision,
        )
        threshold = choice.threshold
        metrics = {"holdout": choice.metrics.as_dict(), "target_met": choice.target_met}
    model = fit(kind, features.values[rows], rl.positive[rows], seed=seed, max_negatives=max_negatives)
    _, fail_times = failure_events(table, labels)
    header = make_header(
        model,
        kind=kind,
        created_at=now,
        horizon_s=horizon_s,
        threshold=float(threshold),
        persist_rows=persist_rows,
        train_start=start,
        train_end=end,
        rows=int(rows.size),
        positive_rows=int(rl.positive[rows].sum()),
        failures=int(((fail_times >= start) & (fail_times <= now)).sum()),
        metrics=metrics,
    )
    return ModelArtifact(header=header, model=model)


def score_rows(artifact: ModelArtifact, table: TelemetryTable, features: FeatureMatrix | None = None) -> np.ndarray:
    """A score for every row of ``table`` (history must reach back a week for the weekly windows)."""
    check_compatible(artifact.header)
    features = features if features is not None else build_features(table)
    return artifact.score(features.values)


def score_latest(
    artifact: ModelArtifact, table: TelemetryTable, *, first_seen: Mapping[str, float] | None = None
) -> list[GpuRisk]:
    """The risk of each GPU at its most recent row (after the artifact's persistence rule), and whether that
    crosses its alarm threshold. The caller de-duplicates alarms over time (one per GPU per horizon, see
    :mod:`telemetry.predict.alarms`)."""
    if len(table) == 0:
        return []
    check_compatible(artifact.header)
    last = np.flatnonzero(np.r_[table.gpu[1:] != table.gpu[:-1], True])
    # Score only each GPU's last few rows: persistence needs them, and scoring a week of history is wasted work.
    tail = np.unique(np.concatenate([last - lag for lag in range(artifact.header.persist_rows)]))
    tail = tail[tail >= 0]  # rows of a neighbouring GPU may slip in; persistence never mixes GPUs
    features = build_features(table, first_seen=first_seen)
    raw = artifact.score(features.values[tail])
    tail_scores = persistent_scores(table.gpu[tail], raw, artifact.header.persist_rows)
    scores = tail_scores[np.searchsorted(tail, last)]
    return [
        GpuRisk(
            gpu_uuid=table.gpu_names[table.gpu[i]],
            node=table.node_names[table.node[i]],
            timestamp=float(table.timestamp[i]),
            score=float(s),
            alarm=bool(s >= artifact.header.threshold),
        )
        for i, s in zip(last, scores, strict=True)
    ]


def _window(table: TelemetryTable, rl: RowLabels, start: float, end: float) -> np.ndarray:
    return np.flatnonzero(rl.usable & (table.timestamp >= start) & (table.timestamp <= end))


def _scored(table: TelemetryTable, rl: RowLabels, rows: np.ndarray, scores: np.ndarray) -> ScoredRows:
    return ScoredRows(
        gpu=table.gpu[rows], timestamp=table.timestamp[rows], score=scores, next_failure=rl.next_failure[rows]
    )


__all__ = ["GpuRisk", "NotEnoughData", "score_latest", "score_rows", "train_model"]
