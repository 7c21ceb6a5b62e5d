"""Celery tasks of the telemetry pipeline. Thin: each calls one service, takes ids rather than rows, is safe to run
twice, and retries only on transient database errors. Their cadence and expiry are declared in ``portal/celery.py``.
"""

from __future__ import annotations

from celery import shared_task

from portal.queue import (
    NOTIFY_ADMINS,
    PRUNE_SAMPLES,
    RETRY_ON_DB_ERROR,
    ROLLUP_SAMPLES,
    SCORE_GPUS,
    TRAIN_FAILURE_MODEL,
)
from portal.telemetry.services.health import alert_mail_admins
from portal.telemetry.services.predictor import failure_model_train, gpus_score
from portal.telemetry.services.rollups import telemetry_prune, telemetry_rollup


@shared_task(name=ROLLUP_SAMPLES, **RETRY_ON_DB_ERROR)
def rollup_samples() -> dict[str, int]:
    """Rebuild the recent 1-minute and 1-hour rollups (and any range a node back-filled)."""
    return telemetry_rollup()


@shared_task(name=PRUNE_SAMPLES, **RETRY_ON_DB_ERROR)
def prune_samples() -> dict[str, int]:
    """Drop raw samples and rollups past their retention."""
    return telemetry_prune()


@shared_task(name=SCORE_GPUS, **RETRY_ON_DB_ERROR)
def score_gpus() -> dict[str, object]:
    """Score every GPU with the active failure model; cordon those above the threshold. On a fresh install with
    no model yet, the first training is asked for now rather than at the daily retrain (a demo would wait a day)."""
    result = gpus_score(first_training=True)
    return {"model": result.model_version, "scored": result.scored, "cordoned": list(result.cordoned)}


@shared_task(name=TRAIN_FAILURE_MODEL, **RETRY_ON_DB_ERROR)
def train_failure_model() -> int:
    """Train a new failure-model version on the latest window (sliding training) and activate it."""
    return failure_model_train().version


@shared_task(name=NOTIFY_ADMINS, **RETRY_ON_DB_ERROR)
def notify_admins(alert_id: int) -> bool:
    """Mail ``settings.ADMINS`` about one alert (see ``alert_mail_admins``)."""
    return alert_mail_admins(alert_id=alert_id)
