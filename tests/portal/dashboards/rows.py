"""Hand-built rows with known answers for the dashboard tests: jobs, allocations and rollups at chosen times.

``submitted_at`` and ``created_at`` are set by the database on insert, so they are written after, as the
history tests do.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from django.contrib.auth.models import AbstractBaseUser

from portal.jobs.models import Allocation, Job
from portal.nodes.models import Gpu
from portal.telemetry.models import Rollup, RollupPeriod
from portal.tenants.models import Tenant

#: A fixed "now", on a whole hour, so hourly and minute buckets line up with it.
NOW = datetime(2026, 11, 10, 12, 0, tzinfo=UTC)
H = timedelta(hours=1)


def job(
    tenant: Tenant,
    user: AbstractBaseUser,
    *,
    submitted: datetime,
    state: str | None = None,
    started: datetime | None = None,
    finished: datetime | None = None,
    attained: float = 0.0,
    gpus: int = 1,
    name: str = "train",
) -> Job:
    row = Job.objects.create(
        tenant=tenant,
        user=user,
        name=name,
        command="train",
        gpus=gpus,
        state=state or ("succeeded" if finished is not None else "running"),
        started_at=started,
        finished_at=finished,
        attained_service=attained,
    )
    Job.objects.filter(pk=row.pk).update(submitted_at=submitted)
    row.refresh_from_db()
    return row


def gpu(uuid: str) -> Gpu:
    return Gpu.objects.select_related("node").get(uuid=uuid)


def allocate(job: Job, gpu: Gpu, *, start: datetime, end: datetime | None, attempt: int = 1) -> Allocation:
    row = Allocation.objects.create(job=job, attempt=attempt, gpu=gpu, node=gpu.node, rank=0)
    Allocation.objects.filter(pk=row.pk).update(created_at=start, released_at=end)
    return row


def rollups(gpu: Gpu, first: datetime, utils: list[float | None], *, period: int = RollupPeriod.HOUR) -> None:
    """Consecutive rollups of ``gpu`` from bucket ``first``, one per value of ``utils``."""
    Rollup.objects.bulk_create(
        Rollup(period=period, gpu=gpu, bucket=first + timedelta(seconds=period * k), samples=6, gpu_util=u)
        for k, u in enumerate(utils)
    )
