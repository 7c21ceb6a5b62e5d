"""The live scheduling round: snapshot, decide, apply; the single lease; the database as last defence. Ref: #2"""

from __future__ import annotations

import threading
from datetime import timedelta

import pytest
from django.db import IntegrityError, connection, transaction
from django.utils import timezone

from portal.jobs.lease import try_acquire_round_lease
from portal.jobs.models import Allocation, Job, JobTask
from portal.jobs.services import job_submit
from portal.nodes.models import Gpu
from portal.nodes.services import TaskReport, node_heartbeat
from portal.scheduler.models import SchedulerRound
from portal.scheduler.services import scheduling_round
from tests.concurrency import run_together
from tests.fixtures import World

pg_only = pytest.mark.skipif(connection.vendor != "postgresql", reason="advisory locks need PostgreSQL")


def test_fifo_gang_packing_and_reasons(world: World) -> None:
    a = job_submit(user=world.eve, command="a", gpus=3)
    b = job_submit(user=world.eve, command="b", gpus=2)  # cannot share a node with a's 3: packs onto the other
    c = job_submit(user=world.eve, command="c", gpus=4)  # 3 free, split 1 + 2: waits
    d = job_submit(user=world.eve, command="d", gpus=1)  # strict FIFO: blocked behind c
    result = scheduling_round()
    assert result is not None and result.started == 2
    jobs = {j.pk: j for j in Job.objects.all()}
    assert [jobs[x.pk].state for x in (a, b, c, d)] == ["running", "running", "pending", "pending"]
    for job in (a, b):
        assert len({alloc.node_id for alloc in Allocation.objects.filter(job=job)}) == 1  # packed on one node
    assert jobs[c.pk].reason_code in {"not_enough_free_gpus", "no_node_fits"}
    assert jobs[d.pk].reason_code == "blocked_by_earlier_job"
    assert SchedulerRound.objects.count() == 1


def test_a_tenant_at_its_cap_does_not_block_others(world: World) -> None:
    capped = job_submit(user=world.alice, command="a", gpus=6)
    over = job_submit(user=world.alice, command="b", gpus=1)
    free = job_submit(user=world.eve, command="c", gpus=1)
    scheduling_round()
    states = dict(Job.objects.values_list("pk", "state"))
    assert (states[capped.pk], states[over.pk], states[free.pk]) == ("running", "pending", "running")
    assert Job.objects.get(pk=over.pk).reason_code == "tenant_cap_reached"


def test_the_database_refuses_a_second_active_allocation_of_a_gpu(world: World) -> None:
    one = job_submit(user=world.alice, command="a", gpus=1)
    two = job_submit(user=world.alice, command="b", gpus=1)
    gpu = Gpu.objects.first()
    Allocation.objects.create(job=one, attempt=1, gpu=gpu, node=gpu.node, rank=0)
    with pytest.raises(IntegrityError), transaction.atomic():
        Allocation.objects.create(job=two, attempt=1, gpu=gpu, node=gpu.node, rank=0)


@pg_only
@pytest.mark.django_db(transaction=True)
def test_only_one_round_holds_the_lease(world: World) -> None:
    held = threading.Event()
    release = threading.Event()

    def holder() -> None:
        with transaction.atomic():
            assert try_acquire_round_lease()
            held.set()
            release.wait(10)
        connection.close()

    thread = threading.Thread(target=holder)
    thread.start()
    held.wait(10)
    try:
        assert scheduling_round() is None  # the second round skips instead of racing
    finally:
        release.set()
        thread.join()
    assert scheduling_round() is not None


@pg_only
@pytest.mark.django_db(transaction=True)
def test_concurrent_rounds_never_double_place(world: World) -> None:
    for i in range(12):
        job_submit(user=world.eve, command=f"j{i}", gpus=1)
    outcomes = run_together(scheduling_round, threads=4)
    assert not [o for o in outcomes if isinstance(o, BaseException)], outcomes
    active = list(Allocation.objects.filter(released_at__isnull=True).values_list("gpu_id", flat=True))
    assert len(active) == len(set(active)) == 8
    assert Job.objects.filter(state="running").count() == 8


def test_preemption_is_recorded_as_such_and_waits_for_the_gpus(world: World, settings) -> None:  # noqa: ANN001
    """A preemptive policy requeues the long-running job with a ``preempted`` event; the newcomer starts only once
    the preempted process has exited and released its GPUs. Ref: #3"""
    settings.CORRAL_POLICY = "tiresias-las"
    hog = job_submit(user=world.eve, command="hog", gpus=8)
    scheduling_round()
    # The hog has run for hours: it sinks to the lowest LAS queue.
    Job.objects.filter(pk=hog.pk).update(started_at=timezone.now() - timedelta(hours=10))
    newcomer = job_submit(user=world.eve, command="new", gpus=1)
    scheduling_round()
    hog.refresh_from_db()
    assert hog.state == "pending" and hog.events.last().kind == "preempted"
    assert Job.objects.get(pk=newcomer.pk).state == "pending"  # the hog's processes still hold every GPU
    for task in JobTask.objects.filter(job=hog, attempt=1):
        node_heartbeat(node=task.node, reports=[TaskReport(hog.pk, 1, task.rank, "exited", exit_code=-15)])
    scheduling_round()
    assert Job.objects.get(pk=newcomer.pk).state == "running"
