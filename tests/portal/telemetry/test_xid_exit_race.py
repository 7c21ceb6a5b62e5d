"""A job killed by its GPU is retried as a hardware failure whichever reaches the portal first: its non-zero exit
(heartbeat) or the fatal XID behind it (telemetry batch). Application XIDs, XIDs outside the window, a spent retry
budget and a job its owner already resubmitted are left alone. Ref: #4"""

from __future__ import annotations

import threading
import time
from datetime import timedelta

import pytest
from django.db import connection, transaction

from portal.jobs.lease import hold_round_lease
from portal.jobs.models import Allocation, EventKind, Job, JobEvent, JobTask
from portal.jobs.services import job_submit
from portal.nodes.models import Gpu
from portal.nodes.services import TaskReport, node_heartbeat
from portal.scheduler.services import scheduling_round
from portal.telemetry.models import GpuHealthEvent, XidRecord
from scheduling.core.states import InvalidTransition, JobState, check_transition
from tests.fixtures import World
from tests.portal.telemetry.helpers import post_batch, running_job, sample, xid

pg_only = pytest.mark.skipif(connection.vendor != "postgresql", reason="row locks and advisory locks need PostgreSQL")


def _exit(task: JobTask, code: int) -> None:
    node_heartbeat(node=task.node, reports=[TaskReport(task.job_id, task.attempt, task.rank, "exited", exit_code=code)])


def _kinds(job: Job) -> list[str]:
    return list(JobEvent.objects.filter(job=job).values_list("kind", flat=True))


def _finished_at_epoch(job: Job) -> float:
    job.refresh_from_db()
    assert job.finished_at is not None
    return job.finished_at.timestamp()


def test_exit_first_then_the_fatal_xid_reopens_the_job_as_a_hardware_retry(world: World) -> None:
    job, task, (gpu,) = running_job(world)
    _exit(task, 1)
    failed_at = _finished_at_epoch(job)
    assert job.state == "failed" and job.exit_code == 1

    # The XID the probe saw a moment before the process died, shipped after the exit had been reported.
    response = post_batch(world, gpu.node.name, [sample(gpu.uuid)], [xid(gpu.uuid, 79, failed_at - 0.5)])

    assert response.json()["drained"] == [gpu.uuid]
    job.refresh_from_db()
    assert (job.state, job.hardware_retries, job.exit_code, job.finished_at) == ("pending", 1, None, None)
    assert _kinds(job) == ["submitted", "started", "failed", "requeued"]
    reopened = job.events.get(kind=EventKind.REQUEUED)
    assert (reopened.from_state, reopened.to_state, reopened.actor) == ("failed", "pending", "health")
    assert "XID 79" in reopened.reason and str(gpu) in reopened.reason and "exit code 1" in reopened.reason
    # The state table itself still refuses to leave a terminal state; only the evidence-checking service may.
    with pytest.raises(InvalidTransition):
        check_transition(JobState.FAILED, JobState.PENDING)

    scheduling_round()
    job.refresh_from_db()
    assert job.state == "running" and job.attempt == 2
    assert Allocation.objects.get(job=job, attempt=2).gpu_id != gpu.pk


def test_fatal_xid_first_then_the_exit_is_a_hardware_retry(world: World) -> None:
    """The order the agent now guarantees: the XID drains the GPU and requeues the job; the exit that follows is an
    old attempt's and only frees the GPU."""
    job, task, (gpu,) = running_job(world)
    post_batch(world, gpu.node.name, [sample(gpu.uuid)], [xid(gpu.uuid, 48)])
    _exit(task, -6)
    job.refresh_from_db()
    assert (job.state, job.hardware_retries, job.exit_code) == ("pending", 1, None)
    assert "failed" not in _kinds(job)
    assert not Allocation.objects.filter(gpu=gpu, released_at__isnull=True).exists()


@pg_only
@pytest.mark.django_db(transaction=True)
def test_an_exit_landing_between_the_xid_and_its_drain_is_a_hardware_retry(world: World) -> None:
    """The XID is stored, but its drain waits for the scheduler's lease (a round is running); the exit arrives in
    that gap. The heartbeat finds the XID itself and requeues the job; the drain then finds nothing to requeue."""
    job, task, (gpu,) = running_job(world)
    lease_held, release = threading.Event(), threading.Event()
    answers: list[dict] = []

    def scheduling_round_in_progress() -> None:
        with transaction.atomic():
            hold_round_lease()
            lease_held.set()
            release.wait(20)
        connection.close()

    def ship_xid() -> None:
        answers.append(post_batch(world, gpu.node.name, [sample(gpu.uuid)], [xid(gpu.uuid, 79)]).json())
        connection.close()

    holder = threading.Thread(target=scheduling_round_in_progress)
    holder.start()
    assert lease_held.wait(10)
    shipper = threading.Thread(target=ship_xid)
    shipper.start()
    try:
        deadline = time.monotonic() + 10
        while not XidRecord.objects.filter(gpu=gpu).exists():  # stored and committed; the drain is now waiting
            assert time.monotonic() < deadline, "the XID was never stored"
            time.sleep(0.02)
        _exit(task, 1)
    finally:
        release.set()
        holder.join()
        shipper.join()

    job.refresh_from_db()
    assert (job.state, job.hardware_retries) == ("pending", 1)
    (requeued,) = job.events.filter(kind=EventKind.REQUEUED)
    assert requeued.actor == "agent:n1" and "XID 79" in requeued.reason and "rank 0: exit code 1" in requeued.reason
    assert "failed" not in _kinds(job)
    assert answers == [{"accepted": 1, "duplicates": 0, "rejected": 0, "xid_events": 1, "drained": [gpu.uuid]}]
    assert GpuHealthEvent.objects.get(gpu=gpu).requeued_jobs == []  # the heartbeat had already requeued it


@pytest.mark.parametrize("code", [13, 31, 43, 45, 68])
@pytest.mark.parametrize("xid_first", [True, False])
def test_an_application_xid_with_a_non_zero_exit_is_not_retried(world: World, code: int, xid_first: bool) -> None:
    job, task, (gpu,) = running_job(world)
    if xid_first:
        post_batch(world, gpu.node.name, [sample(gpu.uuid, xid=code)], [xid(gpu.uuid, code)])
        _exit(task, 1)
    else:
        _exit(task, 1)
        post_batch(world, gpu.node.name, [sample(gpu.uuid, xid=code)], [xid(gpu.uuid, code)])
    job.refresh_from_db()
    gpu.refresh_from_db()
    assert (job.state, job.exit_code, job.hardware_retries) == ("failed", 1, 0)
    assert _kinds(job)[-1] == "failed" and gpu.health == "healthy"


@pytest.mark.parametrize("offset", [-20.0, 20.0])
def test_a_fatal_xid_outside_the_window_is_not_associated(world: World, settings, offset: float) -> None:  # noqa: ANN001
    settings.CORRAL_XID_EXIT_WINDOW = 10
    job, task, (gpu,) = running_job(world)
    _exit(task, 1)
    failed_at = _finished_at_epoch(job)
    response = post_batch(world, gpu.node.name, [], [xid(gpu.uuid, 79, failed_at + offset)])
    assert response.json()["drained"] == [gpu.uuid]  # the GPU is still drained: it is broken either way
    job.refresh_from_db()
    assert (job.state, job.exit_code, job.hardware_retries) == ("failed", 1, 0)


def test_a_failed_job_is_final_once_the_window_has_passed(world: World, settings) -> None:  # noqa: ANN001
    """An XID stamped right at the exit, but arriving a window later (a long telemetry outage), reopens nothing:
    nobody should find a job they saw fail minutes ago back in the queue."""
    settings.CORRAL_XID_EXIT_WINDOW = 10
    job, task, (gpu,) = running_job(world)
    _exit(task, 1)
    long_ago = Job.objects.get(pk=job.pk).finished_at - timedelta(seconds=60)
    Job.objects.filter(pk=job.pk).update(finished_at=long_ago)  # it failed a minute ago
    post_batch(world, gpu.node.name, [], [xid(gpu.uuid, 79, long_ago.timestamp())])
    job.refresh_from_db()
    assert job.state == "failed" and job.hardware_retries == 0


def test_the_retry_bound_holds_when_the_exit_came_first(world: World, settings) -> None:  # noqa: ANN001
    settings.CORRAL_MAX_HARDWARE_RETRIES = 1
    job, task, (gpu,) = running_job(world)
    post_batch(world, gpu.node.name, [], [xid(gpu.uuid, 79)])  # first fault: requeued, retry 1 of 1
    _exit(task, -9)
    scheduling_round()
    job.refresh_from_db()
    assert (job.state, job.attempt, job.hardware_retries) == ("running", 2, 1)
    task = JobTask.objects.select_related("node").get(job=job, attempt=2)
    node_heartbeat(node=task.node, reports=[TaskReport(job.pk, 2, 0, "running", pid=7)])
    (second,) = (a.gpu for a in Allocation.objects.filter(job=job, attempt=2).select_related("gpu", "node"))
    _exit(task, 1)
    post_batch(world, second.node.name, [], [xid(second.uuid, 79, _finished_at_epoch(job))])
    job.refresh_from_db()
    assert (job.state, job.exit_code, job.hardware_retries) == ("failed", 1, 1)
    assert _kinds(job) == ["submitted", "started", "requeued", "started", "failed"]


def test_the_retry_bound_holds_when_the_xid_came_first(world: World, settings) -> None:  # noqa: ANN001
    settings.CORRAL_MAX_HARDWARE_RETRIES = 0
    job, task, (gpu,) = running_job(world)
    post_batch(world, gpu.node.name, [], [xid(gpu.uuid, 79)])
    _exit(task, 1)
    job.refresh_from_db()
    assert (job.state, job.exit_code) == ("failed", None)
    assert "gave up after 0 hardware retries" in job.events.get(kind=EventKind.FAILED).reason


def test_a_job_its_owner_already_resubmitted_is_not_reopened(world: World) -> None:
    job, task, (gpu,) = running_job(world)
    _exit(task, 1)
    again = job_submit(user=world.alice, command=job.command, gpus=1)
    post_batch(world, gpu.node.name, [], [xid(gpu.uuid, 79, _finished_at_epoch(job))])
    job.refresh_from_db()
    assert job.state == "failed" and Job.objects.get(pk=again.pk).state == "pending"


def test_a_gang_that_failed_on_one_node_is_reopened_by_an_xid_on_another(world: World) -> None:
    """Hardware evidence counts for the whole gang: rank 1's GPU fails, and rank 0's collective errors out first."""
    job = job_submit(user=world.eve, command="torchrun train.py", gpus=8)
    scheduling_round()
    job.refresh_from_db()
    rank0, rank1 = JobTask.objects.filter(job=job, attempt=1).select_related("node").order_by("rank")
    for task in (rank0, rank1):
        node_heartbeat(node=task.node, reports=[TaskReport(job.pk, 1, task.rank, "running", pid=100 + task.rank)])
    _exit(rank0, 134)
    bad = Gpu.objects.get(node=rank1.node, index=3)
    post_batch(world, bad.node.name, [], [xid(bad.uuid, 74, _finished_at_epoch(job) + 1.0)])
    job.refresh_from_db()
    assert (job.state, job.hardware_retries) == ("pending", 1)
    assert "XID 74" in job.events.get(kind=EventKind.REQUEUED).reason


def test_a_sample_repeating_an_already_shipped_xid_is_not_recorded_twice(world: World) -> None:
    """The agent ships a dying job's XIDs ahead of the samples, and the next sample's ``xid`` field repeats it."""
    now = time.time()
    post_batch(world, "n1", [sample("GPU-n1-2", now - 10)])
    post_batch(world, "n1", [], [xid("GPU-n1-2", 79, now - 5)])
    post_batch(world, "n1", [sample("GPU-n1-2", now, xid=79)])
    assert list(XidRecord.objects.filter(gpu__uuid="GPU-n1-2").values_list("xid", flat=True)) == [79]
    # A later fault of the same code, seen only in a sample, is a new record.
    post_batch(world, "n1", [sample("GPU-n1-2", now + 10, xid=79)])
    assert XidRecord.objects.filter(gpu__uuid="GPU-n1-2").count() == 2
