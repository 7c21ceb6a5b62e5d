"""Job services on the real database: submit, cancel, transitions, quota enforcement. Ref: #2"""

from __future__ import annotations

import pytest
from django.db import connection

from portal.errors import Conflict, NotAllowed, QuotaExceeded, ValidationFailed
from portal.jobs.models import EventKind, Job, JobTask
from portal.jobs.services import job_cancel, job_submit, job_transition
from portal.scheduler.services import scheduling_round
from portal.tenants.models import Quota
from scheduling.core.states import InvalidTransition, JobState
from tests.concurrency import run_together
from tests.fixtures import World


def test_submit_queues_a_pending_job_with_an_event(world: World) -> None:
    job = job_submit(user=world.alice, command="python train.py", gpus=2)
    assert (job.state, job.tenant, job.name, job.attempt) == ("pending", world.tenant, "python train.py", 0)
    assert list(job.events.values_list("kind", "to_state", "actor")) == [("submitted", "pending", "alice")]


@pytest.mark.parametrize(
    ("kwargs", "field", "words"),
    [
        ({"command": "  ", "gpus": 1}, "command", "empty"),
        ({"command": "x", "gpus": 0}, "gpus", "at least 1"),
        ({"command": "x", "gpus": 7}, "gpus", "at most 6 GPUs"),  # the tenant's cap
        ({"command": "x", "gpus": 1, "tenant": "nope"}, "tenant", "unknown tenant"),
        ({"command": "x", "gpus": 1, "tenant": "other"}, "tenant", "unknown tenant"),  # not a member
        ({"command": "x", "gpus": 1, "env": {"CUDA_VISIBLE_DEVICES": "0"}}, "env", "set by Corral"),
        ({"command": "x", "gpus": 1, "env": {"1BAD": "v"}}, "env", "not a valid"),
    ],
)
def test_submit_refuses_jobs_that_could_never_run(world: World, kwargs: dict, field: str, words: str) -> None:
    with pytest.raises(ValidationFailed) as refused:
        job_submit(user=world.alice, **kwargs)
    assert refused.value.field == field
    assert words in refused.value.message
    assert not Job.objects.exists()


def test_submit_refuses_more_gpus_than_the_cluster_has(world: World) -> None:
    with pytest.raises(ValidationFailed, match="the cluster has 8 GPUs"):
        job_submit(user=world.eve, command="x", gpus=9)  # eve's tenant has no cap; the cluster has 2 x 4


def test_submit_refuses_past_the_active_job_limit(world: World) -> None:
    Quota.objects.filter(tenant=world.tenant).update(max_active_jobs=2)
    job_submit(user=world.alice, command="a", gpus=1)
    job_submit(user=world.bob, command="b", gpus=1)
    with pytest.raises(QuotaExceeded, match="already has 2 jobs"):
        job_submit(user=world.alice, command="c", gpus=1)


@pytest.mark.django_db(transaction=True)
@pytest.mark.skipif(connection.vendor != "postgresql", reason="row locks need PostgreSQL (make test runs it)")
def test_concurrent_submits_cannot_exceed_the_active_job_limit(world: World) -> None:
    """Eight threads race to submit into a tenant allowed three active jobs; the quota row lock lets exactly three
    through. (On SQLite the write lock serialises them too, but this is the PostgreSQL row-lock case.)"""
    Quota.objects.filter(tenant=world.tenant).update(max_active_jobs=3)
    outcomes = run_together(lambda: job_submit(user=world.alice, command="x", gpus=1), threads=8)
    assert sorted("refused" if isinstance(o, QuotaExceeded) else "ok" for o in outcomes) == ["ok"] * 3 + ["refused"] * 5
    assert not [o for o in outcomes if isinstance(o, BaseException) and not isinstance(o, QuotaExceeded)], outcomes
    assert Job.objects.filter(tenant=world.tenant).count() == 3


def test_cancel_pending_job_is_immediate(world: World) -> None:
    job = job_submit(user=world.alice, command="x", gpus=1)
    job = job_cancel(job=job, by=world.alice)
    assert job.state == "cancelled" and job.finished_at is not None
    assert list(job.events.values_list("kind", flat=True)) == ["submitted", "cancelled"]


def test_cancel_running_job_waits_for_its_processes(world: World) -> None:
    job = job_submit(user=world.alice, command="sleep 100", gpus=1)
    scheduling_round()
    job = job_cancel(job=Job.objects.get(pk=job.pk), by=world.alice)
    assert job.state == "running" and job.cancel_requested_at is not None
    assert list(JobTask.objects.filter(job=job).values_list("kill_requested", flat=True)) == [True]
    assert EventKind.CANCEL_REQUESTED in job.events.values_list("kind", flat=True)


def test_cancel_rules(world: World) -> None:
    job = job_submit(user=world.alice, command="x", gpus=1)
    with pytest.raises(NotAllowed):
        job_cancel(job=job, by=world.bob)  # same tenant, not the owner, not an admin
    assert job_cancel(job=job, by=world.admin).state == "cancelled"  # a tenant admin may
    with pytest.raises(Conflict, match="already cancelled"):
        job_cancel(job=job, by=world.alice)


def test_invalid_transitions_are_refused(world: World) -> None:
    job = job_submit(user=world.alice, command="x", gpus=1)
    with pytest.raises(InvalidTransition):
        job_transition(job, JobState.SUCCEEDED, kind=EventKind.SUCCEEDED, actor="t")  # pending -> succeeded
    job_transition(job, JobState.CANCELLED, kind=EventKind.CANCELLED, actor="t")
    with pytest.raises(InvalidTransition):
        job_transition(job, JobState.RUNNING, kind=EventKind.STARTED, actor="t")  # terminal stays terminal
