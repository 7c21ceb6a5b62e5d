"""One live scheduling round: lease, snapshot, decide, apply — all in one transaction."""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from portal.jobs.lease import try_acquire_round_lease
from portal.jobs.services import jobs_enforce_time_limits
from portal.scheduler.apply import apply_decision
from portal.scheduler.models import SchedulerRound
from portal.scheduler.policy_cache import live_policy
from portal.scheduler.snapshot import build_snapshot
from scheduling.core import decide
from scheduling.core.placement import resolve_placement


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
        now = timezone.now()
        timed_out = jobs_enforce_time_limits(now=now)
        policy = live_policy(settings.CORRAL_POLICY)
        live = build_snapshot(now=now, fair_share=policy.guarantees)
        placement = resolve_placement(settings.CORRAL_PLACEMENT, short_limit=settings.CORRAL_CORDON_MAX_TIME_LIMIT)
        decision = decide(live.snapshot, now=now.timestamp(), policy=policy, placement=placement)
        applied = apply_decision(decision, live)
        duration_ms = (time.perf_counter() - began) * 1000
        SchedulerRound.objects.create(
            duration_ms=duration_ms,
            policy=settings.CORRAL_POLICY,
            pending=applied.waiting,
            started=applied.started,
            preempted=applied.preempted,
        )
    return LiveRoundResult(applied.started, applied.preempted, applied.waiting, duration_ms, len(timed_out))


#: How long round statistics are kept (dashboards and /metrics look at the last few minutes).
ROUND_HISTORY = timedelta(days=1)


def scheduler_rounds_prune(*, now: datetime | None = None) -> int:
    """Delete round statistics older than :data:`ROUND_HISTORY`; returns how many went."""
    now = now or timezone.now()
    return SchedulerRound.objects.filter(at__lt=now - ROUND_HISTORY).delete()[0]
