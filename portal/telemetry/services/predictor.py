"""The failure predictor's training and scoring on this site's history.

The pure predictor (``telemetry.predict.training``) fits and scores; these functions feed it this site's hourly
history and store what it returns, and scoring soft-cordons the GPUs at risk (:func:`.health.gpu_cordon`). Its model
libraries run single-threaded by default (``CORRAL_PREDICTOR_THREADS``): the worker shares the machine with the web
processes, and OpenMP thread pools on an oversubscribed machine run an order of magnitude slower than one thread.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import numpy as np
from django.db import transaction
from django.db.models import Max, Min
from django.utils import timezone

from portal.nodes.models import Gpu, GpuHealth
from portal.queue import TRAIN_FAILURE_MODEL, enqueue
from portal.telemetry.models import FailureModel, GpuHealthEvent, GpuRisk, HealthEventKind, Rollup, RollupPeriod
from portal.telemetry.selectors import risk_threshold
from portal.telemetry.services._shared import _dt, _epoch, _setting
from portal.telemetry.services.health import gpu_cordon
from portal.telemetry.services.history import failure_labels, hourly_rows
from telemetry.schema import TelemetryRow
from telemetry.table import TelemetryTable, table_from_rows

log = logging.getLogger(__name__)


def _predictor_threads() -> Any:
    from threadpoolctl import threadpool_limits

    return threadpool_limits(limits=int(_setting("CORRAL_PREDICTOR_THREADS", 1)))


def _history_table(rows: Iterable[TelemetryRow]) -> TelemetryTable | None:
    materialised = list(rows)
    return table_from_rows(materialised) if materialised else None


def _first_seen(gpu_ids: Iterable[int] | None = None) -> dict[str, float]:
    """When each GPU was first seen (its oldest hourly rollup): the predictor's age feature, which a window of
    recent history alone would understate."""
    rollups = Rollup.objects.filter(period=RollupPeriod.HOUR)
    if gpu_ids is not None:
        rollups = rollups.filter(gpu_id__in=list(gpu_ids))
    return {
        uuid: _epoch(first)
        for uuid, first in rollups.values("gpu__uuid").annotate(first=Min("bucket")).values_list("gpu__uuid", "first")
    }


def failure_model_train(
    *,
    now: datetime | None = None,
    window_days: float | None = None,
    horizon_hours: float | None = None,
    min_failures: int | None = None,
    synthetic: Mapping[str, Any] | None = None,
) -> FailureModel:
    """Train a new model version on the latest window (sliding training) and make it the active one.

    Learns from this site's hourly history and its recorded failures (GPUs the health rules drained) when the
    window holds at least ``CORRAL_FAILURE_MIN_TRAINING_FAILURES`` (default 20) of them; otherwise from a
    generated synthetic fleet (``telemetry.synth``, shaped by ``CORRAL_FAILURE_SYNTHETIC_FLEET`` or
    ``synthetic``), so that a new cluster's demo has a model. ``source`` and ``metadata`` say which. Slow (seconds
    to minutes): call it from the periodic task, not from a request.
    """
    from telemetry.predict.training import NotEnoughData, train_model
    from telemetry.synth import FleetConfig, generate

    now = now or timezone.now()
    window_days = float(window_days or _setting("CORRAL_FAILURE_TRAINING_DAYS", 60))
    horizon_s = float(horizon_hours or _setting("CORRAL_FAILURE_HORIZON_HOURS", 24)) * 3600
    if min_failures is None:
        min_failures = int(_setting("CORRAL_FAILURE_MIN_TRAINING_FAILURES", 20))
    since = now - timedelta(days=window_days)
    version = (FailureModel.objects.aggregate(v=Max("version"))["v"] or 0) + 1
    labels = failure_labels(since=since)
    metadata: dict[str, Any] = {"recorded_failures": len(labels), "min_failures": min_failures}
    artifact, source = None, "synthetic"
    with _predictor_threads():
        if len(labels) >= min_failures:
            table = _history_table(hourly_rows(since=since, until=now))
            try:
                if table is not None:
                    artifact = train_model(
                        table,
                        labels,
                        now=_epoch(now),
                        horizon_s=horizon_s,
                        train_window_s=window_days * 86_400,
                        seed=version,
                        first_seen=_first_seen(),
                    )
                    source = "stored"
            except NotEnoughData as exc:
                metadata["stored_data_refused"] = str(exc)
        if artifact is None:
            shape: dict[str, Any] = {"gpus": 128, "days": 30.0, "failure_rate": 2.0}  # FleetConfig's keywords
            shape.update(_setting("CORRAL_FAILURE_SYNTHETIC_FLEET", {}) or {})
            shape.update(synthetic or {})
            config = FleetConfig(seed=version, **shape)
            fleet = generate(config)
            artifact = train_model(
                fleet.table,
                fleet.labels,
                now=fleet.table.end,
                horizon_s=horizon_s,
                train_window_s=config.days * 86_400,
                seed=version,
            )
            source = "synthetic"
            because = metadata.get("stored_data_refused") or (
                f"{len(labels)} recorded failure(s) in the last {window_days:g} days, {min_failures} needed"
            )
            metadata["why_synthetic"] = (
                f"{because}: trained on a synthetic fleet of {config.gpus} GPUs over {config.days:g} days "
                f"(seed {config.seed}) so the predictor has a model. Its scores demonstrate the pipeline; they are "
                "not a forecast for this site."
            )
    header = artifact.header
    metrics = {
        **header.metrics,
        "threshold": header.threshold,
        "rows": header.rows,
        "positive_rows": header.positive_rows,
        "failures": header.failures,
    }
    metadata.update({"kind": str(header.kind), "content_version": header.version, "libraries": header.libraries})
    with transaction.atomic():
        FailureModel.objects.filter(active=True).update(active=False)
        created = FailureModel.objects.create(
            version=version,
            source=source,
            window_start=_dt(header.train_start),
            window_end=_dt(header.train_end),
            horizon_s=header.horizon_s,
            metrics=metrics,
            metadata=metadata,
            artifact=artifact.to_bytes(),
            active=True,
        )
    log.info("trained failure model v%d on %s data: %s", version, source, metrics)
    return created


@dataclass(frozen=True, slots=True)
class ScoreResult:
    model_version: int | None
    scored: int
    cordoned: tuple[str, ...] = ()


def gpus_score(*, now: datetime | None = None, first_training: bool = False) -> ScoreResult:
    """Score every present GPU with recent hourly history using the active model, store each GPU's latest risk,
    and soft-cordon healthy GPUs at or above :func:`risk_threshold`.

    Every GPU with an hourly row in the last two hours is scored (so a fresh cluster's page shows risks at once),
    but only one with at least ``CORRAL_RISK_MIN_HOURS`` (default 6) hours of history is cordoned: a model reading
    two rows of a brand-new GPU mostly sees its youth. A GPU is cordoned at most once per model horizon (an admin
    who cleared a cordon is not overruled by the next run). Does nothing without an active model; with
    ``first_training`` (the periodic task), a site that never had a model asks for its first training at once.
    """
    from telemetry.predict.artifact import ModelArtifact
    from telemetry.predict.training import score_latest

    now = now or timezone.now()
    model = FailureModel.objects.filter(active=True).first()
    if model is None:
        if first_training and not FailureModel.objects.exists():
            enqueue(TRAIN_FAILURE_MODEL)
        return ScoreResult(None, 0)
    artifact = ModelArtifact.from_bytes(bytes(model.artifact))
    recent = set(
        Rollup.objects.filter(period=RollupPeriod.HOUR, bucket__gte=now - timedelta(hours=2), gpu__present=True)
        .values_list("gpu_id", flat=True)
        .distinct()
    )
    table = _history_table(hourly_rows(since=now - timedelta(days=8), gpu_ids=recent))
    if table is None:
        return ScoreResult(model.version, 0)
    rows_per_gpu = np.bincount(table.gpu, minlength=len(table.gpu_names))
    min_hours = int(_setting("CORRAL_RISK_MIN_HOURS", 6))
    enough = {name for code, name in enumerate(table.gpu_names) if rows_per_gpu[code] >= min_hours}
    with _predictor_threads():
        scores = {r.gpu_uuid: r.score for r in score_latest(artifact, table, first_seen=_first_seen(recent))}
    ids = dict(Gpu.objects.filter(uuid__in=scores).values_list("uuid", "pk"))
    GpuRisk.objects.bulk_create(
        [GpuRisk(gpu_id=ids[u], risk=r, model=model, scored_at=now) for u, r in scores.items() if u in ids],
        update_conflicts=True,
        unique_fields=["gpu"],
        update_fields=["risk", "model", "scored_at"],
    )
    threshold = risk_threshold(model)
    if threshold is None:
        return ScoreResult(model.version, len(scores))
    at_risk = {u for u, r in scores.items() if r >= threshold and u in ids and u in enough}
    recently = set(
        GpuHealthEvent.objects.filter(
            gpu__uuid__in=at_risk, kind=HealthEventKind.CORDONED, at__gte=now - timedelta(seconds=model.horizon_s)
        ).values_list("gpu__uuid", flat=True)
    )
    candidates = Gpu.objects.filter(uuid__in=at_risk - recently, health=GpuHealth.HEALTHY).values_list(
        "uuid", flat=True
    )
    cordoned = tuple(u for u in sorted(candidates) if gpu_cordon(gpu_id=ids[u], risk=scores[u], model=model, now=now))
    return ScoreResult(model.version, len(scores), cordoned)
