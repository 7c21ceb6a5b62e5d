"""Celery tasks of the telemetry pipeline. Thin: each calls one service, takes ids rather than rows, is safe to run
twice, and retries only on transient database errors. Their cadence and expiry are declared in ``portal/celery.py``.
"""

from __future__ import annotations

from typing import TypedDict

from celery import shared_task
from django.core.mail import mail_admins
from django.db import OperationalError

from telemetry import services
from telemetry.models import Alert, FailureModel


class _RetryOptions(TypedDict):
    """The options every task here shares; typed, so that ``shared_task``'s overloads can check them."""

    autoretry_for: tuple[type[Exception], ...]
    retry_backoff: bool
    max_retries: int
    ignore_result: bool


_RETRY: _RetryOptions = {
    "autoretry_for": (OperationalError,),
    "retry_backoff": True,
    "max_retries": 3,
    "ignore_result": True,
}


@shared_task(**_RETRY)
def rollup_samples() -> dict[str, int]:
    """Rebuild the recent 1-minute and 1-hour rollups (and any range a node back-filled)."""
    return services.telemetry_rollup()


@shared_task(**_RETRY)
def prune_samples() -> dict[str, int]:
    """Drop raw samples and rollups past their retention."""
    return services.telemetry_prune()


@shared_task(**_RETRY)
def score_gpus() -> dict[str, object]:
    """Score every GPU with the active failure model; cordon those above the threshold. On a fresh install with
    no model yet, ask for the first training now rather than at the daily retrain (a demo would wait a day)."""
    result = services.gpus_score()
    if result.model_version is None and not FailureModel.objects.exists():
        train_failure_model.delay()
    return {"model": result.model_version, "scored": result.scored, "cordoned": list(result.cordoned)}


@shared_task(**_RETRY)
def train_failure_model() -> int:
    """Train a new failure-model version on the latest window (sliding training) and activate it."""
    return services.failure_model_train().version


@shared_task(**_RETRY)
def notify_admins(alert_id: int) -> bool:
    """Mail ``settings.ADMINS`` about one alert (a no-op when none are configured). Never raises for SMTP
    trouble: the alert is already on the node page and in the API; mail is a convenience."""
    alert = Alert.objects.select_related("node", "gpu").filter(pk=alert_id).first()
    if alert is None:
        return False
    body = f"{alert.message}\n\nNode: {alert.node.name}\nRaised at: {alert.at:%Y-%m-%d %H:%M:%S} UTC\n"
    mail_admins(f"[{alert.severity}] {alert.title}", body, fail_silently=True)
    return True
