"""Job time limits: accepted and checked at submit, and enforced exactly once through the kill path cancel uses.
Ref: #4"""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import connection
from django.utils import timezone

from portal.errors import ValidationFailed
from portal.jobs.models import MAX_TIME_LIMIT, Allocation, Job, JobTask
from portal.jobs.services import job_cancel, job_requeue, job_submit, jobs_enforce_time_limits
from portal.nodes.services import TaskReport, node_heartbeat
from portal.scheduler.services import scheduling_round
from tests.concurrency import run_together
from tests.fixtures import World

pg_only = pytest.mark.skipif(connection.vendor != "postgresql", reason="row locks need PostgreSQL (make test runs it)")


def running_job(world: World, *, time_limit: int | None, ran: float, gpus: int = 1) -> Job:
    """A job placed by a real round whose current attempt started ``ran`` seconds ago. (Each call runs a round,
    which enforces limits: back-date jobs only once every job a test needs is running.)"""
    job = job_submit(user=world.alice, command="sleep 600", gpus=gpus, time_limit=time_limit)
    scheduling_round()
    return backdate(job, ran)


def backdate(job: Job, ran: float) -> Job:
    Job.objects.filter(pk=job.pk).update(started_at=timezone.now() - timedelta(seconds=ran))
    job.refresh_from_db()
    assert job.state == "running"
    return job


def test_submit_stores_the_time_limit(world: World) -> None:
    assert job_submit(user=world.alice, command="x", gpus=1, time_limit=7200).time_limit == 7200
    assert job_submit(user=world.alice, command="x", gpus=1).time_limit is None
    assert job_submit(user=world.alice, command="x", gpus=1, time_limit=MAX_TIME_LIMIT).time_limit == MAX_TIME_LIMIT


@pytest.mark.parametrize(
    ("time_limit", "words"),
    [
        (0, "at least 1"),
        (-60, "at least 1"),
        (MAX_TIME_LIMIT + 1, "at most 30d (2592000 seconds); this job asks for 30d 1s"),
        (True, "whole number of seconds"),
        (1.5, "whole number of seconds"),
    ],
)
def test_submit_refuses_a_time_limit_out_of_range(world: World, time_limit: object, words: str) -> None:
    with pytest.raises(ValidationFailed) as refused:
        job_submit(user=world.alice, command="x", gpus=1, time_limit=time_limit)  # type: ignore[arg-type]
    assert refused.value.field == "time_limit"
    assert words in refused.value.message
    assert not Job.objects.exists()


def test_a_job_past_its_limit_is_failed_once_and_its_processes_are_stopped(world: World) -> None:
    job = running_job(world, time_limit=7200, ran=0)
    within = running_job(world, time_limit=7200, ran=7100)
    unlimited = running_job(world, time_limit=None, ran=10**6)
    backdate(job, 7201)

    assert jobs_enforce_time_limits(now=timezone.now()) == [job.pk]
    assert jobs_enforce_time_limits(now=timezone.now()) == []  # exactly once

    job.refresh_from_db()
    assert (job.state, job.exit_code) == ("failed", None) and job.finished_at is not None
    event = job.events.last()
    assert (event.kind, event.from_state, event.to_state, event.actor) == ("failed", "running", "failed", "scheduler")
    assert event.reason == "time limit of 2h exceeded"
    assert job.events.filter(kind="failed").count() == 1
    assert Job.objects.get(pk=within.pk).state == Job.objects.get(pk=unlimited.pk).state == "running"

    # The kill path of cancel: the next heartbeat tells the agent to stop the task (SIGTERM, then SIGKILL after
    # the grace), and the GPUs stay held until the process has exited.
    task = JobTask.objects.get(job=job)
    assert task.kill_requested
    reply = node_heartbeat(node=task.node, reports=[TaskReport(job.pk, 1, 0, "running", pid=4242)])
    assert [k["job"] for k in reply.kill] == [job.pk]
    assert Allocation.objects.filter(job=job, released_at__isnull=True).count() == 1
    node_heartbeat(node=task.node, reports=[TaskReport(job.pk, 1, 0, "exited", exit_code=-15)])
    job.refresh_from_db()
    assert (job.state, job.exit_code) == ("failed", None)  # the SIGTERM exit does not rewrite how it ended
    assert not Allocation.objects.filter(job=job, released_at__isnull=True).exists()
    assert job.events.filter(kind="failed").count() == 1


def test_a_task_not_started_yet_is_dropped_on_the_next_heartbeat(world: World) -> None:
    job = running_job(world, time_limit=60, ran=61)
    jobs_enforce_time_limits(now=timezone.now())
    task = JobTask.objects.get(job=job)
    node_heartbeat(node=task.node, reports=[])  # the agent never received the start order
    task.refresh_from_db()
    assert task.state == "exited"
    assert not Allocation.objects.filter(job=job, released_at__isnull=True).exists()
    assert Job.objects.get(pk=job.pk).state == "failed"


def test_a_cancel_under_way_wins_over_the_time_limit(world: World) -> None:
    job = running_job(world, time_limit=60, ran=600)
    job_cancel(job=job, by=world.alice)
    assert jobs_enforce_time_limits(now=timezone.now()) == []
    task = JobTask.objects.get(job=job)
    node_heartbeat(node=task.node, reports=[TaskReport(job.pk, 1, 0, "exited", exit_code=-15)])
    assert Job.objects.get(pk=job.pk).state == "cancelled"


def test_the_limit_counts_from_the_start_of_the_current_attempt(world: World) -> None:
    job = running_job(world, time_limit=3600, ran=3000)
    job = Job.objects.select_for_update().get(pk=job.pk)
    job_requeue(job, actor="test", reason="node lost", hardware=True)
    for task in JobTask.objects.filter(job=job, attempt=1):
        node_heartbeat(node=task.node, reports=[TaskReport(job.pk, 1, 0, "exited", exit_code=-15)])
    scheduling_round()
    job.refresh_from_db()
    assert (job.state, job.attempt) == ("running", 2)
    # 3000 s of the first attempt plus 1000 s of this one: over an hour in all, yet this attempt is within it.
    Job.objects.filter(pk=job.pk).update(started_at=timezone.now() - timedelta(seconds=1000))
    assert jobs_enforce_time_limits(now=timezone.now()) == []
    assert jobs_enforce_time_limits(now=timezone.now() + timedelta(seconds=2601)) == [job.pk]


def test_the_scheduling_round_enforces_limits_before_it_places(world: World) -> None:
    """The 8-GPU cluster is full with an overdue job; the round fails it, yet does not hand its GPUs out before
    its processes have exited."""
    overdue = running_job(world, time_limit=120, ran=0, gpus=4)
    job_submit(user=world.eve, command="fill", gpus=4)
    scheduling_round()
    backdate(overdue, 121)
    waiting = job_submit(user=world.eve, command="next", gpus=4)
    result = scheduling_round()
    assert result is not None and result.timed_out == 1
    assert Job.objects.get(pk=overdue.pk).state == "failed"
    assert Job.objects.get(pk=waiting.pk).state == "pending"  # the overdue job's GPUs are still held
    for task in JobTask.objects.filter(job=overdue):
        node_heartbeat(node=task.node, reports=[TaskReport(overdue.pk, 1, task.rank, "exited", exit_code=-15)])
    scheduling_round()
    assert Job.objects.get(pk=waiting.pk).state == "running"


@pg_only
@pytest.mark.django_db(transaction=True)
def test_concurrent_enforcement_fails_each_job_once(world: World) -> None:
    jobs = [backdate(job, 61) for job in [running_job(world, time_limit=60, ran=0) for _ in range(4)]]
    outcomes = run_together(lambda: jobs_enforce_time_limits(now=timezone.now()), threads=4)
    assert all(isinstance(ids, list) for ids in outcomes), outcomes
    assert sorted(i for ids in outcomes if isinstance(ids, list) for i in ids) == sorted(j.pk for j in jobs)
    for job in jobs:
        assert Job.objects.get(pk=job.pk).events.filter(kind="failed").count() == 1
