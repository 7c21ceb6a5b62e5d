"""The what-if replay tasks. Thin: each takes ids, calls one service, and is safe to run twice."""

from __future__ import annotations

from celery import shared_task

from portal.queue import RETRY_ON_DB_ERROR, SWEEP_WHATIF_RUNS, WHATIF_RUN
from portal.whatif.services import whatif_execute, whatif_sweep


@shared_task(name=WHATIF_RUN, **RETRY_ON_DB_ERROR)
def whatif_run(run_id: int) -> None:
    """Replay what-if run ``run_id``. A redelivered message finds the run no longer queued and does nothing; a
    database error while reading the history puts the run back in the queue for the retry."""
    whatif_execute(run_id)


@shared_task(name=SWEEP_WHATIF_RUNS, **RETRY_ON_DB_ERROR)
def sweep_whatif_runs() -> None:
    """Send again runs whose message was lost, and fail runs whose worker died (beat, every few minutes)."""
    whatif_sweep()
