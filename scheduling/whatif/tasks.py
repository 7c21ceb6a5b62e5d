"""The what-if replay task. Thin: it takes the run's id, calls one service, and is safe to run twice."""

from __future__ import annotations

from celery import shared_task
from django.db import OperationalError

from scheduling.whatif.services import whatif_execute, whatif_sweep


@shared_task(autoretry_for=(OperationalError,), retry_backoff=True, max_retries=3, ignore_result=True)
def whatif_run(run_id: int) -> None:
    """Replay what-if run ``run_id``. A redelivered message finds the run no longer queued and does nothing; a
    database error while reading the history puts the run back in the queue for the retry."""
    whatif_execute(run_id)


@shared_task(autoretry_for=(OperationalError,), retry_backoff=True, max_retries=3, ignore_result=True)
def sweep_whatif_runs() -> None:
    """Send again runs whose message was lost, and fail runs whose worker died (beat, every few minutes)."""
    whatif_sweep()
