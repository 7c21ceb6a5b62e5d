"""The database holds the ledger's invariants whatever the application does (issue #15): each constraint refuses
the row that would break it."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import IntegrityError, transaction
from django.utils import timezone

from portal.jobs.models import Allocation, Job, JobTask
from portal.jobs.services import job_submit
from portal.nodes.models import Gpu
from portal.scheduler.services import scheduling_round
from tests.fixtures import World


def _running(world: World) -> tuple[Job, Allocation, JobTask]:
    job = job_submit(user=world.alice, command="x", gpus=1)
    scheduling_round()
    job.refresh_from_db()
    return job, Allocation.objects.get(job=job), JobTask.objects.get(job=job)


def test_a_gpu_is_released_after_it_was_given(world: World) -> None:
    _, allocation, _ = _running(world)
    with pytest.raises(IntegrityError), transaction.atomic():
        Allocation.objects.filter(pk=allocation.pk).update(released_at=allocation.created_at - timedelta(seconds=1))


def test_an_attempt_holds_a_gpu_once(world: World) -> None:
    job, allocation, _ = _running(world)
    Allocation.objects.filter(pk=allocation.pk).update(released_at=timezone.now())
    with pytest.raises(IntegrityError), transaction.atomic():
        Allocation.objects.create(job=job, attempt=job.attempt, gpu=allocation.gpu, node=allocation.node, rank=0)


def test_a_gpu_has_one_active_allocation(world: World) -> None:
    job, allocation, _ = _running(world)
    other = job_submit(user=world.eve, command="y", gpus=1)
    with pytest.raises(IntegrityError), transaction.atomic():
        Allocation.objects.create(job=other, attempt=1, gpu=allocation.gpu, node=allocation.node, rank=0)
    assert Gpu.objects.filter(pk=allocation.gpu_id).exists()


def test_a_task_that_is_over_says_when(world: World) -> None:
    _, _, task = _running(world)
    for state in ("exited", "lost"):
        with pytest.raises(IntegrityError), transaction.atomic():
            JobTask.objects.filter(pk=task.pk).update(state=state, finished_at=None)
    with pytest.raises(IntegrityError), transaction.atomic():
        JobTask.objects.filter(pk=task.pk).update(state="vanished")
