"""Soft cordon in the live round: a GPU predicted to fail takes short jobs, never long ones, and a long job kept
off it says why. Ref: #4"""

from __future__ import annotations

from portal.jobs.models import Allocation, Job
from portal.jobs.services import job_submit
from portal.nodes.models import Gpu, GpuHealth
from portal.scheduler.services import scheduling_round
from tests.fixtures import World

HOUR = 3600


def cordon(node: str, index: int) -> Gpu:
    Gpu.objects.filter(node__name=node, index=index).update(health=GpuHealth.CORDONED, health_detail="risk 0.93")
    return Gpu.objects.get(node__name=node, index=index)


def gpus_of(job: Job) -> set[int]:
    return set(Allocation.objects.filter(job=job, released_at__isnull=True).values_list("gpu_id", flat=True))


def test_a_cordoned_gpu_takes_a_short_job_but_not_a_long_one(world: World, settings) -> None:  # noqa: ANN001
    settings.CORRAL_POLICY = "fifo-backfill"
    hot = cordon("n1", 3)
    fill = job_submit(user=world.eve, command="fill", gpus=7)  # no time limit: a long job
    scheduling_round()
    assert Job.objects.get(pk=fill.pk).state == "running" and hot.pk not in gpus_of(fill)

    long_job = job_submit(user=world.eve, command="long", gpus=1)
    over = job_submit(user=world.eve, command="over", gpus=1, time_limit=3 * HOUR)
    short = job_submit(user=world.eve, command="short", gpus=1, time_limit=2 * HOUR)
    scheduling_round()
    jobs = {j.pk: j for j in Job.objects.filter(pk__in=[long_job.pk, over.pk, short.pk])}
    assert [jobs[j.pk].state for j in (long_job, over, short)] == ["pending", "pending", "running"]
    assert gpus_of(short) == {hot.pk}
    for waiting in (jobs[long_job.pk], jobs[over.pk]):
        assert waiting.reason_code == "short_jobs_only"
        assert waiting.reason == (
            "Waiting for GPUs: the only free ones that would fit are cordoned (predicted to fail). (needs 1 GPU; "
            "1 of 1 GPU free is cordoned; only jobs with a time limit of at most 2h may use cordoned GPUs)"
        )


def test_with_the_setting_at_zero_cordoned_gpus_take_no_new_jobs(world: World, settings) -> None:  # noqa: ANN001
    settings.CORRAL_CORDON_MAX_TIME_LIMIT = 0
    for index in range(4):
        cordon("n2", index)
    short = job_submit(user=world.eve, command="short", gpus=4, time_limit=60)
    other = job_submit(user=world.eve, command="fits", gpus=4, time_limit=60)
    scheduling_round()
    assert Job.objects.get(pk=short.pk).state == "running" and {g.node.name for g in _gpus(short)} == {"n1"}
    waiting = Job.objects.get(pk=other.pk)
    assert (waiting.state, waiting.reason_code) == ("pending", "short_jobs_only")
    assert waiting.reason.endswith("(needs 4 GPUs; 4 of 4 GPUs free are cordoned; cordoned GPUs take no new jobs)")


def test_an_unhealthy_gpu_still_takes_nothing(world: World) -> None:
    Gpu.objects.filter(node__name="n1").update(health=GpuHealth.UNHEALTHY)
    job = job_submit(user=world.eve, command="short", gpus=5, time_limit=60)
    scheduling_round()
    assert Job.objects.get(pk=job.pk).reason_code == "not_enough_free_gpus"


def _gpus(job: Job) -> list[Gpu]:
    return list(Gpu.objects.filter(pk__in=gpus_of(job)).select_related("node"))
