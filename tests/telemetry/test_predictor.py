"""Training, artifacts and walk-forward evaluation on a small generated fleet (kept to a few seconds)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from sklearn.metrics import average_precision_score

from telemetry.predict.artifact import ArtifactError, ModelArtifact, read_header
from telemetry.predict.estimators import ModelKind, NotEnoughData, fit
from telemetry.predict.evaluate import EvalConfig, evaluate
from telemetry.predict.features import build_features
from telemetry.predict.labels import label_rows
from telemetry.predict.training import score_latest, score_rows, train_model
from telemetry.synth import FleetConfig, generate

DAY = 86_400.0


@pytest.fixture(scope="module")
def fleet():  # noqa: ANN201
    # A failure-heavy fleet so that a small, fast one still has dozens of failures to learn from.
    return generate(FleetConfig(gpus=128, days=30, seed=11, failure_rate=5.0, sudden_fraction=0.1))


@pytest.fixture(scope="module")
def split(fleet):  # noqa: ANN001, ANN201
    table = fleet.table
    x = build_features(table).values
    rl = label_rows(table, fleet.labels, DAY)
    cut = table.start + 20 * DAY
    train = rl.usable & (table.timestamp <= cut - DAY)
    test = rl.usable & (table.timestamp > cut)
    return x, rl.positive, train, test


@pytest.mark.parametrize("kind", list(ModelKind))
def test_every_architecture_learns_something(split, kind: ModelKind) -> None:  # noqa: ANN001
    x, y, train, test = split
    model = fit(kind, x[train], y[train], seed=0, max_negatives=8_000)
    scores = model.score(x[test])
    assert scores.shape == (test.sum(),) and np.all((scores >= 0) & (scores <= 1))
    # Far better than chance (the base rate) at ranking rows that precede a failure.
    assert average_precision_score(y[test], scores) > 5 * y[test].mean()


def test_fit_refuses_a_window_without_failures(split) -> None:  # noqa: ANN001
    x, _, train, _ = split
    with pytest.raises(NotEnoughData):
        fit(ModelKind.GBDT, x[train], np.zeros(train.sum(), dtype=bool))


def test_train_model_artifact_round_trips_and_scores(fleet) -> None:  # noqa: ANN001
    table = fleet.table
    artifact = train_model(table, fleet.labels, now=table.end, train_window_s=30 * DAY, max_negatives=20_000)
    h = artifact.header
    assert h.kind is ModelKind.GBDT and h.horizon_s == DAY and 0 < h.threshold <= 1 and h.persist_rows == 3
    assert h.train_end == table.end - DAY and h.positive_rows > 0 and h.failures > 0
    assert "holdout" in h.metrics and len(h.version) == 16

    blob = artifact.to_bytes()
    assert read_header(blob) == h
    back = ModelArtifact.from_bytes(blob)
    np.testing.assert_array_equal(score_rows(back, table), score_rows(artifact, table))

    risks = score_latest(back, table)
    assert len(risks) == len(table.gpu_names)
    assert all(r.alarm == (r.score >= h.threshold) for r in risks)
    last_uuid = table.gpu_names[table.gpu[-1]]
    assert next(r for r in risks if r.gpu_uuid == last_uuid).timestamp == table.timestamp[-1]


def test_artifact_rejects_garbage_and_other_feature_sets(fleet) -> None:  # noqa: ANN001
    with pytest.raises(ArtifactError, match="not a Corral"):
        ModelArtifact.from_bytes(b"hello")
    table = fleet.table
    artifact = train_model(table, fleet.labels, now=table.end, threshold=0.5, max_negatives=5_000)
    stale = ModelArtifact(dataclasses.replace(artifact.header, feature_names=("old",)), artifact.model)
    with pytest.raises(ArtifactError, match="different feature set"):
        ModelArtifact.from_bytes(stale.to_bytes())


def test_walk_forward_evaluation_reports_the_agreed_keys(fleet) -> None:  # noqa: ANN001
    config = EvalConfig(retrain_every_s=5 * DAY, min_train_s=7 * DAY, max_negatives=10_000)
    report = evaluate(fleet.table, fleet.labels, config)
    data = report.as_dict()
    for key in ("precision", "recall", "median_lead_hours", "threshold", "alarms", "failures", "validation"):
        assert key in data
    assert report.split_at == pytest.approx(fleet.table.start + 2 / 3 * (fleet.table.end - fleet.table.start))
    assert data["failures"] > 0 and report.folds >= 4
    assert data["recall"] > 0 and data["precision"] > 0
    caught = {u for u, _ in report.caught_failures}
    assert len(caught) == report.test.caught
    assert len(report.false_alarm_rows) == data["false_alarms"]
    assert sum(0 < nxt - t <= 3 * DAY for _, t, nxt in report.false_alarm_rows) == data["early_false_alarms"]


def test_evaluation_needs_enough_history(fleet) -> None:  # noqa: ANN001
    short = fleet.table.take(fleet.table.timestamp < fleet.table.start + 10 * DAY)
    with pytest.raises(ValueError, match="shorter than the minimum"):
        evaluate(short, fleet.labels)


def test_the_threshold_is_chosen_on_the_training_part_only(fleet) -> None:  # noqa: ANN001
    # Ref: #4. Dropping every failure of the test part changes what the test part reports, never the threshold.
    config = EvalConfig(retrain_every_s=5 * DAY, min_train_s=7 * DAY, max_negatives=10_000)
    full = evaluate(fleet.table, fleet.labels, config)
    early = [lb for lb in fleet.labels if lb.failed_at < full.split_at]
    assert len(early) < len(fleet.labels)
    blind = evaluate(fleet.table, early, config)
    assert blind.as_dict()["threshold"] == full.as_dict()["threshold"]
    assert blind.validation == full.validation
    assert blind.test.failures == 0 and full.test.failures > 0


def test_static_baseline_fits_once_for_the_test_part(fleet) -> None:  # noqa: ANN001
    kw = dict(retrain_every_s=5 * DAY, min_train_s=7 * DAY, max_negatives=10_000)
    sliding = evaluate(fleet.table, fleet.labels, EvalConfig(**kw))
    static = evaluate(fleet.table, fleet.labels, EvalConfig(sliding=False, **kw))
    # Same training-part walk (so the same threshold), one fit instead of several for the test part.
    assert static.as_dict()["threshold"] == sliding.as_dict()["threshold"]
    assert static.folds < sliding.folds and static.as_dict()["retrain_every_hours"] is None
