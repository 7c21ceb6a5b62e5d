"""The live scheduling loop's services: one round (lease, time limits, snapshot, decide, apply, all in one
transaction), the start forecast for pending jobs, and the pruning of round statistics.

The core does the deciding (``scheduling.core.decide``) and the looking ahead (``scheduling.core.forecast``); this
module supplies what only the database knows (the snapshot from ``portal.scheduler.selectors``, the live policy
with what it learned, each job's expected remaining run time) and writes the answers through the jobs services
(``portal.scheduler.apply``, ``portal.jobs.waiting``).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from datetime import datetime, timedelta

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from portal.jobs.elastic_services import jobs_stop_due
from portal.jobs.lease import try_acquire_round_lease
from portal.jobs.selectors import pending_start_overdue
from portal.jobs.services import jobs_enforce_time_limits
from portal.jobs.waiting import StartForecast, jobs_set_start_forecasts
from portal.rounds import (
    mark_forecast_stale,
    note_forecast_ran,
    round_requested,
    take_forecast_staleness,
    take_round_request,
)
from portal.scheduler.apply import ACTOR, apply_decision
from portal.scheduler.elastic import apply_elastic, size_elastic_jobs
from portal.scheduler.models import SchedulerRound
from portal.scheduler.policy_cache import live_policy
from portal.scheduler.selectors import build_snapshot
from portal.scheduler.share_forecast import share_forecasts
from portal.scheduler.shares import share_round
from scheduling.core import decide
from scheduling.core.duration_predict import DurationPredictor
from scheduling.core.engine import needs_preemptive_walk
from scheduling.core.forecast import StartOutlook, forecast_starts, remaining_run_time, round_budget
from scheduling.core.model import JobId
from scheduling.core.placement import resolve_placement
from scheduling.core.policies import Qssf


@dataclass(frozen=True, slots=True)
class LiveRoundResult:
    started: int
    preempted: int
    pending: int
    duration_ms: float
    timed_out: int = 0  # running jobs stopped this round for running past their time limit


def scheduling_round() -> LiveRoundResult | None:
    """Run one round with the policy and placement named in settings; None when another round holds the lease.

    The clock is read here, once, and handed to the core, which never reads it itself. The round first fails the
    running jobs that are past their time limit (their processes are stopped through the next heartbeats), then
    decides. Soft-cordoned GPUs go only to jobs with a time limit of at most ``CORRAL_CORDON_MAX_TIME_LIMIT``.
    """
    began = time.perf_counter()
    with transaction.atomic():
        if not try_acquire_round_lease():
            return None
        take_round_request()  # before the reads: a change committed from now on asks for the next round
        now = timezone.now()
        timed_out = jobs_enforce_time_limits(now=now)
        stopped = jobs_stop_due(now=now)
        policy = live_policy(settings.CORRAL_POLICY)
        live = build_snapshot(now=now, fair_share=policy.guarantees)
        placement = resolve_placement(settings.CORRAL_PLACEMENT, short_limit=settings.CORRAL_CORDON_MAX_TIME_LIMIT)
        decision = decide(live.snapshot, now=now.timestamp(), policy=policy, placement=placement)
        # Elastic jobs (issue #19) grow into what the minimums left idle: starts are widened before they apply.
        elastic = size_elastic_jobs(live=live, decision=decision, now=now, history=_history)
        applied = apply_decision(replace(decision, start=elastic.start), live)
        resized = apply_elastic(outcome=elastic, now=now, actor=ACTOR)
        # Shares of shared GPUs (issue #17), after the whole-GPU decision: its starts count against the caps.
        shares_started = share_round(live=live, now=now.timestamp())
        duration_ms = (time.perf_counter() - began) * 1000
        SchedulerRound.objects.create(
            duration_ms=duration_ms,
            policy=settings.CORRAL_POLICY,
            pending=applied.waiting,
            started=applied.started + shares_started,
            preempted=applied.preempted,
        )
    if applied.started or applied.preempted or timed_out or shares_started or stopped or resized:
        mark_forecast_stale()
    started = applied.started + shares_started
    return LiveRoundResult(started, applied.preempted, applied.waiting, duration_ms, len(timed_out))


def round_is_due(*, now: datetime) -> bool:
    """Whether the beat's round should run: a change asked for one (and its message may be lost), the policy
    preempts (priorities move with attained service, so time alone can change the answer), or no round ran for
    ``CORRAL_IDLE_ROUND_EVERY`` seconds (a safety net, and what lets time-limit expiry and health changes act).
    A quiet cluster then costs one cheap query per beat instead of a full round."""
    if round_requested() or needs_preemptive_walk(live_policy(settings.CORRAL_POLICY)):
        return True
    last = SchedulerRound.objects.order_by("-at").values_list("at", flat=True).first()
    return last is None or (now - last).total_seconds() >= settings.CORRAL_IDLE_ROUND_EVERY


def beat_round() -> LiveRoundResult | None:
    """The periodic round: time limits are enforced every beat (one query when none is due); the full round runs
    when :func:`round_is_due`. None when it did not run or another round held the lease."""
    now = timezone.now()
    if round_is_due(now=now):
        return scheduling_round()
    with transaction.atomic():
        if jobs_enforce_time_limits(now=now) or jobs_stop_due(now=now):
            mark_forecast_stale()
    return None


#: How long round statistics are kept (dashboards and /metrics look at the last few minutes).
ROUND_HISTORY = timedelta(days=1)


def scheduler_rounds_prune(*, now: datetime | None = None) -> int:
    """Delete round statistics older than :data:`ROUND_HISTORY`; returns how many went."""
    now = now or timezone.now()
    return SchedulerRound.objects.filter(at__lt=now - ROUND_HISTORY).delete()[0]


@dataclass(frozen=True, slots=True)
class ForecastResult:
    pending: int
    estimated: int  # pending jobs given a start time
    duration_ms: float


def _history() -> DurationPredictor:
    """The run-time history the live QSSF policy learned (kept and topped up per worker process)."""
    policy = live_policy("qssf")
    assert isinstance(policy, Qssf)  # "qssf" always resolves to the Helios policy
    return policy.predictor


#: A forecast with nothing changed since is still right (its times are absolute) but is redone after this long,
#: for what time alone changes (a running job outliving its estimate is expected to run as long again).
FORECAST_MAX_AGE = timedelta(minutes=10)
#: How soon a forecast is redone when a pending job's expected start has passed while nothing else changed (the jobs
#: ahead of it ran long): not every beat, since a queue whose head stays overdue would then cost a forecast each time.
FORECAST_OVERDUE_AGE = timedelta(minutes=2)
_last_forecast: datetime | None = None  # per worker process: when this process last refreshed for real


def start_forecast_refresh_if_stale(*, now: datetime | None = None) -> ForecastResult | None:
    """The periodic forecast: refresh only when something changed since the last one (``portal.rounds``) or it
    is older than :data:`FORECAST_MAX_AGE`, or older than :data:`FORECAST_OVERDUE_AGE` with a pending job whose
    expected start has passed; None when skipped. A quiet queue of 50,000 jobs then costs nothing."""
    global _last_forecast
    now = now or timezone.now()
    stale = take_forecast_staleness()
    age = now - _last_forecast if _last_forecast is not None else None
    if age is not None and FORECAST_OVERDUE_AGE <= age < FORECAST_MAX_AGE and not stale:
        stale = pending_start_overdue(now=now)
    if not stale and age is not None and age < FORECAST_MAX_AGE:
        note_forecast_ran(now)  # nothing changed: what is stored still holds
        return None
    _last_forecast = now
    return start_forecast_refresh(now=now)


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
    # Shares of a GPU (issue #17) are placed apart, and forecast apart, on the shared GPUs.
    shares = share_forecasts(live=live, now=now_ts, predictor=predictor, horizon=settings.CORRAL_FORECAST_HORIZON)
    every = forecasts | shares
    jobs_set_start_forecasts(
        forecasts={int(job_id): StartForecast(outlook=f.outlook, at=f.at) for job_id, f in every.items()},
        made_at=began,
    )
    note_forecast_ran(began)
    estimated = sum(1 for f in every.values() if f.outlook == StartOutlook.ESTIMATED)
    duration_ms = (time.perf_counter() - clock) * 1000
    return ForecastResult(pending=len(every), estimated=estimated, duration_ms=duration_ms)
