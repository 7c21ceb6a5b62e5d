"""Celery tasks of the scheduling loop. Thin: each calls one service and is safe to run twice."""

from __future__ import annotations

from datetime import timedelta

from celery import shared_task
from django.db import OperationalError
from django.utils import timezone

from portal.nodes.services import nodes_mark_stale_down
from scheduling.live.forecast import start_forecast_refresh
from scheduling.live.models import SchedulerRound
from scheduling.live.round import scheduling_round


@shared_task(autoretry_for=(OperationalError,), retry_backoff=True, max_retries=3, ignore_result=True)
def schedule_round() -> dict[str, float] | None:
    """Stop jobs past their time limit and place pending jobs. Runs on the beat cadence and after every submit,
    finish and cancel."""
    result = scheduling_round()
    if result is None:
        return None
    return {"started": result.started, "pending": result.pending, "timed_out": result.timed_out}


@shared_task(autoretry_for=(OperationalError,), retry_backoff=True, max_retries=3, ignore_result=True)
def sweep_nodes() -> list[str]:
    """Mark silent nodes down (their jobs are requeued) and prune old round statistics."""
    down = nodes_mark_stale_down()
    SchedulerRound.objects.filter(at__lt=timezone.now() - timedelta(days=1)).delete()
    if down:
        schedule_round.delay()
    return down


@shared_task(autoretry_for=(OperationalError,), retry_backoff=True, max_retries=3, ignore_result=True)
def refresh_start_forecasts() -> dict[str, float]:
    """Refresh every pending job's expected start. Each run replaces the last one's answers."""
    result = start_forecast_refresh()
    return {"pending": result.pending, "estimated": result.estimated, "duration_ms": result.duration_ms}
