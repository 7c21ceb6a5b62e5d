"""Writing waiting jobs' reasons at scale (issue #16): a changed code always, a changed detail within a budget."""

from __future__ import annotations

from django.contrib.auth import get_user_model

from portal.jobs.models import Job
from portal.jobs.waiting import DETAIL_REWRITES_PER_ROUND, jobs_set_wait_reasons, reason_text
from scheduling.core.model import WaitReason
from tests.fixtures import World

SHORT = WaitReason.NOT_ENOUGH_FREE_GPUS


def _pending(world: World, count: int) -> list[int]:
    user = get_user_model().objects.get(username="eve")
    jobs = Job.objects.bulk_create(
        Job(tenant=world.other_tenant, user=user, name="j", command="true", gpus=1, state="pending",
            reason_code=SHORT.value, reason=reason_text(SHORT, "needs 1 GPU; 3 free"))
        for _ in range(count)
    )  # fmt: skip
    return [job.pk for job in jobs]


def test_a_detail_that_moves_for_every_job_is_rewritten_within_a_budget_head_first(world: World) -> None:
    ids = _pending(world, DETAIL_REWRITES_PER_ROUND + 50)
    jobs_set_wait_reasons(reasons={pk: (SHORT, "needs 1 GPU; 2 free") for pk in ids})
    fresh = reason_text(SHORT, "needs 1 GPU; 2 free")
    rewritten = set(Job.objects.filter(reason=fresh).values_list("pk", flat=True))
    assert rewritten == set(ids[:DETAIL_REWRITES_PER_ROUND])  # the head of the queue first
    jobs_set_wait_reasons(reasons={pk: (SHORT, "needs 1 GPU; 2 free") for pk in ids})  # the next round catches up
    assert Job.objects.filter(reason=fresh).count() == len(ids)


def test_a_changed_code_is_always_written(world: World) -> None:
    ids = _pending(world, DETAIL_REWRITES_PER_ROUND + 50)
    blocked = WaitReason.BLOCKED_BY_EARLIER_JOB
    jobs_set_wait_reasons(reasons={pk: (blocked, "behind job 1") for pk in ids})
    assert Job.objects.filter(reason_code=blocked.value).count() == len(ids)
