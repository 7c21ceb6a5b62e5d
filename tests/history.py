"""Rows of finished jobs, for tests of the history export (``GET /api/v1/history/trace/``, ``corral history``)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from django.contrib.auth.models import AbstractBaseUser

from portal.jobs.models import Job
from portal.tenants.models import Tenant

T0 = datetime(2026, 11, 1, 8, 0, tzinfo=UTC)


def finished_job(
    tenant: Tenant,
    user: AbstractBaseUser,
    *,
    name: str,
    gpus: int,
    state: str,
    submitted: timedelta,
    started: timedelta | None,
    finished: timedelta,
    attained: float = 0.0,
) -> Job:
    """A job row as the services leave it when it ends (``submitted_at`` is auto-set, so it is written after)."""
    job = Job.objects.create(
        tenant=tenant,
        user=user,
        name=name,
        command="train",
        gpus=gpus,
        state=state,
        started_at=T0 + started if started is not None else None,
        finished_at=T0 + finished,
        attained_service=attained,
    )
    Job.objects.filter(pk=job.pk).update(submitted_at=T0 + submitted)
    return job


def small_history(lab: Tenant, other: Tenant, users: dict[str, AbstractBaseUser]) -> dict[str, Job]:
    """Four jobs that ran (one preempted, one cancelled after running) and one that never did, for replays.

    Under ``fifo`` on 2 x 4 GPUs they replay with JCTs of 2 h, 2 h, 1 h and 1 h (average 5400 s); what really
    happened to them took 2.5 h, 4 h, 4 h and 4 h (average 13050 s), 7650 s of it waiting on average.
    """
    h = timedelta(hours=1)
    alice, bob, eve = users["alice"], users["bob"], users["eve"]
    return {
        # Ran 2 h on 2 GPUs after waiting 30 min.
        "plain": finished_job(lab, alice, name="resnet", gpus=2, state="succeeded", submitted=0 * h,
                              started=0.5 * h, finished=2.5 * h),
        # Preempted after 1 h on 4 GPUs (4 x 3600 GPU-s attained), resumed, ran 1 h more, then failed.
        "preempted": finished_job(other, eve, name="bert", gpus=4, state="failed", submitted=1 * h,
                                  started=4 * h, finished=5 * h, attained=4 * 3600.0),
        # Ran 1 h, was requeued, and was cancelled while pending: its service is all in earlier attempts.
        "cancelled_after_running": finished_job(lab, bob, name="gan", gpus=1, state="cancelled",
                                                submitted=2 * h, started=None, finished=6 * h, attained=3600.0),
        # A whole-cluster job: waited 3 h, ran 1 h.
        "big": finished_job(lab, alice, name="llm", gpus=8, state="succeeded", submitted=3 * h, started=6 * h,
                            finished=7 * h),
        # Never ran: not in the trace.
        "never_ran": finished_job(lab, alice, name="typo", gpus=1, state="cancelled", submitted=3.5 * h,
                                  started=None, finished=3.6 * h),
    }  # fmt: skip
