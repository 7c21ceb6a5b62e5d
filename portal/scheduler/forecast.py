"""Start forecasts for pending jobs: estimate run times, play the queue forward in the core, store the answers.

The core (:mod:`scheduling.core.forecast`) does the look ahead; this module supplies what only the database
knows: the live snapshot, the live policy (with what it learned), and each job's expected remaining run time.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import UTC, datetime

from django.conf import settings
from django.utils import timezone

from portal.jobs.models import Job
from portal.scheduler.policy_cache import live_policy
from portal.scheduler.snapshot import build_snapshot
from scheduling.core.duration_predict import DurationPredictor
from scheduling.core.engine import needs_preemptive_walk
from scheduling.core.forecast import StartOutlook, forecast_starts, round_budget
from scheduling.core.model import JobId, JobState, JobView
from scheduling.core.placement import resolve_placement
from scheduling.core.policies import Qssf

#: Rows written per UPDATE statement.
_BATCH = 500


@dataclass(frozen=True, slots=True)
class ForecastResult:
    pending: int
    estimated: int  # pending jobs given a start time
    duration_ms: float


def remaining_run_time(job: JobView, *, now: float, predictor: DurationPredictor) -> float | None:
    """Seconds ``job`` is expected to keep its GPUs from ``now`` (running) or from its next start (pending).

    Two sources, as a user would reason: the time limit (the job is stopped then, whatever happens) and the mean
    run time of similar finished jobs (Helios's groups: same user, name and GPU count, with fallbacks). The
    nearer of the two wins. A job that has already outlived the history's estimate and has no limit is expected
    to run as long again: deep-learning run times are heavy-tailed, so a job that ran long tends to run longer.
    None: no limit and no history at all.
    """
    attempt_elapsed = now - job.last_started if job.state == JobState.RUNNING and job.last_started else 0.0
    limit_left = None if job.time_limit is None else max(0.0, job.time_limit - attempt_elapsed)
    executed = job.executed_at(now)
    predicted = predictor.predict(job, as_of=now)
    if predicted is not None and predicted > executed:
        left = predicted - executed
        return left if limit_left is None else min(left, limit_left)
    if limit_left is not None:
        return limit_left
    if predicted is not None:
        return max(executed, 60.0)
    return None


def _history() -> DurationPredictor:
    """The run-time history the live QSSF policy learned (kept and topped up per worker process)."""
    policy = live_policy("qssf")
    assert isinstance(policy, Qssf)  # "qssf" always resolves to the Helios policy
    return policy.predictor


def start_forecast_refresh(*, now: datetime | None = None) -> ForecastResult:
    """Forecast when every pending job should start and store it on the job (``Job.start_forecast`` reads it).

    Reads one snapshot and writes only forecast columns, so it needs no scheduler lease: a job that starts
    between the read and the write gets a forecast it never shows (only pending jobs show one, and only when it
    is newer than their entry into the queue).
    """
    clock = time.perf_counter()
    began = timezone.now() if now is None else now
    policy = live_policy(settings.CORRAL_POLICY)
    live = build_snapshot(now=began, fair_share=policy.guarantees)
    now_ts = began.timestamp()
    predictor = _history()
    remaining: dict[JobId, float | None] = {
        job.id: remaining_run_time(job, now=now_ts, predictor=predictor) for job in live.snapshot.jobs
    }
    jobs_in_system = len(live.snapshot.jobs)
    forecasts = forecast_starts(
        live.snapshot,
        now=now_ts,
        remaining=remaining,
        policy=policy,
        placement=resolve_placement(settings.CORRAL_PLACEMENT, short_limit=settings.CORRAL_CORDON_MAX_TIME_LIMIT),
        horizon=settings.CORRAL_FORECAST_HORIZON,
        max_rounds=round_budget(
            jobs_in_system, preemptive=needs_preemptive_walk(policy), work=settings.CORRAL_FORECAST_WORK
        ),
    )
    jobs = []
    for job_id, forecast in forecasts.items():
        at = None if forecast.at is None else datetime.fromtimestamp(forecast.at, tz=UTC)
        jobs.append(Job(pk=job_id, start_outlook=forecast.outlook.value, expected_start_at=at, forecast_at=began))
    Job.objects.bulk_update(jobs, ["start_outlook", "expected_start_at", "forecast_at"], batch_size=_BATCH)  # atomic
    estimated = sum(1 for f in forecasts.values() if f.outlook == StartOutlook.ESTIMATED)
    duration_ms = (time.perf_counter() - clock) * 1000
    return ForecastResult(pending=len(forecasts), estimated=estimated, duration_ms=duration_ms)
