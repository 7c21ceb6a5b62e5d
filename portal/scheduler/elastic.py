"""Elastic jobs in the live round (issue #19): what only the database knows for the core's elastic step
(``scheduling.core.elastic_round``), and writing its answer through the jobs services.

The core widens the round's elastic starts before they are applied (a job that starts grows for free), and names
the running jobs to resize: each gets the checkpoint signal and is restarted at its new size after
``CORRAL_CHECKPOINT_SECONDS`` (``portal.jobs.elastic_services``). Pending jobs that were grown but now wait for GPUs
go back to their minimum.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime

from django.conf import settings

from portal.jobs.elastic_services import job_stop_with_notice, jobs_reset_size
from portal.jobs.elastic_spec import scaling_curve
from portal.jobs.round_rows import elastic_scaling, jobs_stopping_with_notice
from portal.scheduler.selectors import LiveSnapshot
from scheduling.core.duration_predict import DurationPredictor
from scheduling.core.elastic import Hysteresis, ScalingCurve
from scheduling.core.elastic_round import ElasticOutcome, ElasticRules, elastic_step
from scheduling.core.forecast import remaining_run_time
from scheduling.core.model import Decision, JobId, gpu_count


def elastic_rules() -> ElasticRules:
    """The live loop's elastic settings (docs/elastic.md)."""
    return ElasticRules(
        restart_seconds=settings.CORRAL_RESTART_SECONDS,
        hysteresis=Hysteresis(
            min_gain=settings.CORRAL_ELASTIC_MIN_GAIN, min_interval=settings.CORRAL_ELASTIC_MIN_INTERVAL
        ),
        default_remaining=settings.CORRAL_ELASTIC_DEFAULT_REMAINING,
    )


def size_elastic_jobs(
    *, live: LiveSnapshot, decision: Decision, now: datetime, history: Callable[[], DurationPredictor]
) -> ElasticOutcome:
    """The core's elastic step on this round's snapshot and decision. No query at all when no job is elastic (the
    run-time ``history`` is fetched only then: topping it up costs a query)."""
    if not any(job.elastic for job in live.snapshot.jobs):
        return ElasticOutcome(start=decision.start)
    now_ts = now.timestamp()
    predictor = history()
    remaining: dict[JobId, float | None] = {
        job.id: remaining_run_time(job, now=now_ts, predictor=predictor) for job in live.snapshot.jobs if job.elastic
    }
    curves: dict[JobId, ScalingCurve] = {job_id: scaling_curve(raw) for job_id, raw in elastic_scaling().items()}
    return elastic_step(
        live.snapshot,
        decision,
        now=now_ts,
        rules=elastic_rules(),
        curves=curves,
        remaining=remaining,
        frozen=jobs_stopping_with_notice(),
    )


def apply_elastic(*, outcome: ElasticOutcome, now: datetime, actor: str) -> int:
    """Ask the running jobs ``outcome`` resizes to checkpoint, and send grown jobs that wait back to their
    minimum. Returns how many resizes were asked for. Precondition: inside the round's transaction."""
    asked = 0
    for job_id, size in sorted(outcome.resize.items()):
        asked += job_stop_with_notice(
            job_id=int(job_id),
            actor=actor,
            reason=f"resized to {gpu_count(size)} by the elastic step",
            notice_seconds=settings.CORRAL_CHECKPOINT_SECONDS,
            now=now,
            resize_to=size,
        )
    if outcome.reset:
        jobs_reset_size(job_ids=[int(job_id) for job_id in outcome.reset])
    return asked
