"""Celery tasks of the scheduling loop. Thin: each calls one service and is safe to run twice."""

from __future__ import annotations

from celery import shared_task

from portal.queue import PRUNE_ROUNDS, REFRESH_START_FORECASTS, RETRY_ON_DB_ERROR, SCHEDULE_ROUND
from portal.scheduler.services import scheduler_rounds_prune, scheduling_round, start_forecast_refresh


@shared_task(name=SCHEDULE_ROUND, **RETRY_ON_DB_ERROR)
def schedule_round() -> dict[str, float] | None:
    """Stop jobs past their time limit and place pending jobs. Runs on the beat cadence and after every submit,
    finish and cancel."""
    result = scheduling_round()
    if result is None:
        return None
    return {"started": result.started, "pending": result.pending, "timed_out": result.timed_out}


@shared_task(name=REFRESH_START_FORECASTS, **RETRY_ON_DB_ERROR)
def refresh_start_forecasts() -> dict[str, float]:
    """Refresh every pending job's expected start. Each run replaces the last one's answers."""
    result = start_forecast_refresh()
    return {"pending": result.pending, "estimated": result.estimated, "duration_ms": result.duration_ms}


@shared_task(name=PRUNE_ROUNDS, **RETRY_ON_DB_ERROR)
def prune_rounds() -> int:
    """Forget round statistics older than a day."""
    return scheduler_rounds_prune()
