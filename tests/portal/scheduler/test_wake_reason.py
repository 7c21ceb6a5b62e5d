"""A job short of GPUs while energy saving wakes nodes says it waits for a wake-up. Ref: #19"""

from __future__ import annotations

from portal.jobs.models import Job
from portal.jobs.services import job_submit
from portal.nodes.models import Node, NodePower
from portal.scheduler.services import scheduling_round
from tests.fixtures import World


def test_a_job_short_of_gpus_hears_of_the_nodes_waking(world: World) -> None:
    Node.objects.filter(name="n2").update(power=NodePower.WAKING)
    job = job_submit(user=world.eve, command="big", gpus=6)
    scheduling_round()
    job.refresh_from_db()
    assert job.state == "pending"
    assert job.reason.endswith("waiting for a wake-up: 4 GPUs on nodes being powered on)"), job.reason


def test_without_waking_nodes_the_reason_says_nothing_of_it(world: World) -> None:
    job = job_submit(user=world.eve, command="big", gpus=4)
    blocker = job_submit(user=world.eve, command="fill", gpus=6)
    scheduling_round()
    assert "wake-up" not in Job.objects.get(pk=blocker.pk).reason
    assert Job.objects.get(pk=job.pk).state == "running"
