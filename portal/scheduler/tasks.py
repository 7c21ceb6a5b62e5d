"""Celery tasks of the scheduling loop. Thin: each calls one service and is safe to run twice."""

from __future__ import annotations

from celery import shared_task

from portal.queue import BEAT_ROUND, PRUNE_ROUNDS, REFRESH_START_FORECASTS, RETRY_ON_DB_ERROR, SCHEDULE_ROUND
from portal.rounds import retry_round_if_requested
from portal.scheduler.services import (
    LiveRoundResult,
    beat_round,
    scheduler_rounds_prune,
    scheduling_round,
    start_forecast_refresh_if_stale,
)


def _summary(result: LiveRoundResult | None) -> dict[str, float] | None:
    if result is None:
        return None
    return {"started": result.started, "pending": result.pending, "timed_out": result.timed_out}


@shared_task(name=SCHEDULE_ROUND, **RETRY_ON_DB_ERROR)
def schedule_round() -> dict[str, float] | None:
    """Stop jobs past their time limit and place pending jobs: the round a change asked for (``portal.rounds``).
    If another round holds the lease, the request stands and this tries again shortly."""
    result = scheduling_round()
    if result is None:
        retry_round_if_requested()
    return _summary(result)


@shared_task(name=BEAT_ROUND, **RETRY_ON_DB_ERROR)
def schedule_beat_round() -> dict[str, float] | None:
    """The beat's round: a full round only when one is due (asked for, preemptive policy, or idle too long)."""
    return _summary(beat_round())


@shared_task(name=REFRESH_START_FORECASTS, **RETRY_ON_DB_ERROR)
def refresh_start_forecasts() -> dict[str, float] | None:
    """Refresh every pending job's expected start when anything changed. Each run replaces the last one's answers."""
    result = start_forecast_refresh_if_stale()
    if result is None:
        return None
    return {"pending": result.pending, "estimated": result.estimated, "duration_ms": result.duration_ms}


@shared_task(name=PRUNE_ROUNDS, **RETRY_ON_DB_ERROR)
def prune_rounds() -> int:
    """Forget round statistics older than a day."""
    return scheduler_rounds_prune()
