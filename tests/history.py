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
