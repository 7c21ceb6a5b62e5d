"""Jobs that held GPUs at chosen times, for the tenants page, its API and its selector.

Allocations get ``created_at`` from the database on insert, so their times are written after (as the fair-share
and dashboard tests do). Active allocations take GPUs nobody holds, so several running jobs can coexist.
"""

from __future__ import annotations

import math
from datetime import datetime

from django.contrib.auth.models import AbstractBaseUser

from portal.jobs.models import Allocation, Job
from portal.jobs.services import job_submit
from portal.nodes.models import Gpu
from scheduling.core.states import JobState


def held(user: AbstractBaseUser, gpus: int, start: datetime, end: datetime | None, tenant: str | None = None) -> Job:
    """A job of ``user`` that held ``gpus`` GPUs from ``start`` to ``end`` (None: still running, holding them)."""
    job = job_submit(user=user, command="past", gpus=gpus, tenant=tenant)
    state = JobState.RUNNING if end is None else JobState.SUCCEEDED
    Job.objects.filter(pk=job.pk).update(state=state.value, started_at=start, finished_at=end)
    taken = Allocation.objects.filter(released_at__isnull=True).values("gpu_id")
    for gpu in Gpu.objects.exclude(pk__in=taken).select_related("node").order_by("node__name", "index")[:gpus]:
        row = Allocation.objects.create(job=job, attempt=1, gpu=gpu, node=gpu.node, rank=0)
        Allocation.objects.filter(pk=row.pk).update(created_at=start, released_at=end)
    return job


def closed_form(gpus: int, start: datetime, end: datetime, now: datetime, half_life: float) -> float:
    """GPU-seconds weighted by 2^-(age / half-life), integrated over [start, end]."""
    age_end, age_start = (now - end).total_seconds(), (now - start).total_seconds()
    return gpus * (2 ** (-age_end / half_life) - 2 ** (-age_start / half_life)) * half_life / math.log(2)
