"""Fair share in the live loop: decayed usage read from allocations, and a round that lends idle quota by it."""

from __future__ import annotations

import math
from datetime import timedelta

import pytest
from django.test import Client
from django.utils import timezone

from portal.jobs.models import Job
from portal.jobs.services import job_submit
from portal.scheduler.policy_cache import forget_policies
from portal.scheduler.services import scheduling_round, start_forecast_refresh
from portal.tenants.models import Quota
from portal.tenants.selectors import tenant_usage, usage_history
from tests.fixtures import World
from tests.portal.tenants.history import closed_form, held

HOUR = 3600.0


def test_usage_is_the_decayed_integral_of_the_gpus_each_tenant_held(world: World) -> None:
    now = timezone.now()
    day = timedelta(days=1)
    held(world.alice, 2, now - 3 * day, now - 2 * day)
    held(world.bob, 1, now - 10 * day, now - 9 * day)
    held(world.eve, 3, now - day / 2, None)  # still running: counts up to now
    got = tenant_usage(now=now, half_life=day.total_seconds())
    h = day.total_seconds()
    lab = closed_form(2, now - 3 * day, now - 2 * day, now, h) + closed_form(1, now - 10 * day, now - 9 * day, now, h)
    assert got["lab"] == pytest.approx(lab, rel=1e-6)
    assert got["other"] == pytest.approx(closed_form(3, now - day / 2, now, now, h), rel=1e-6)


def test_a_job_held_for_thousands_of_half_lives_counts_without_underflow(world: World) -> None:
    now = timezone.now()
    held(world.eve, 2, now - timedelta(days=200), None)  # 4,800 half-lives of an hour: e^-3300 in SQL
    assert tenant_usage(now=now, half_life=HOUR)["other"] == pytest.approx(2 * HOUR / math.log(2))


def test_allocations_beyond_the_decays_memory_are_not_read(world: World) -> None:
    now = timezone.now()
    held(world.alice, 1, now - timedelta(days=400), now - timedelta(days=399))
    assert tenant_usage(now=now, half_life=HOUR) == {}


def test_usage_history_follows_the_half_life_setting(world: World, settings) -> None:  # noqa: ANN001
    settings.CORRAL_FAIR_SHARE_HALF_LIFE_HOURS = 24
    history = usage_history(now=timezone.now())
    assert history is not None and history.half_life == 24 * HOUR
    settings.CORRAL_FAIR_SHARE_HALF_LIFE_HOURS = 0
    assert usage_history(now=timezone.now()) is None


@pytest.fixture
def quota_policy(world: World, settings):  # noqa: ANN001, ANN201
    """fifo+quota with 2 guaranteed GPUs each for lab and other, on the world's 8 GPUs."""
    settings.CORRAL_POLICY = "fifo+quota"
    Quota.objects.filter(tenant=world.tenant).update(guaranteed_gpus=2)
    Quota.objects.filter(tenant=world.other_tenant).update(guaranteed_gpus=2)
    forget_policies()
    yield
    forget_policies()


def contend(world: World) -> tuple[list[Job], list[Job]]:
    """Lab worked two GPUs for a day until an hour ago; now each tenant asks for its share and two jobs more."""
    now = timezone.now()
    held(world.alice, 2, now - timedelta(hours=25), now - timedelta(hours=1))
    lab = [job_submit(user=world.alice, command=f"lab{i}", gpus=2) for i in range(3)]
    other = [job_submit(user=world.eve, command=f"other{i}", gpus=2) for i in range(3)]
    return lab, other


def states(jobs: list[Job]) -> list[str]:
    return [Job.objects.get(pk=j.pk).state for j in jobs]


@pytest.mark.usefixtures("quota_policy")
def test_the_tenant_that_used_less_borrows_the_idle_gpus_first(world: World, client: Client) -> None:
    lab, other = contend(world)
    result = scheduling_round()
    assert result is not None and result.started == 4
    # Each gets its guaranteed 2; other (no recent usage) borrows the 4 left over although lab asked first.
    assert states(lab) == ["running", "pending", "pending"]
    assert states(other) == ["running", "running", "running"]
    waiting = Job.objects.get(pk=lab[1].pk)
    assert waiting.reason_code == "fair_share"
    assert "used less of their share" in waiting.reason
    client.force_login(world.alice)
    page = client.get(f"/jobs/{waiting.pk}/").content.decode()
    assert "used less of their share" in page and 'href="/tenants/" data-testid="job-reason-tenants"' in page


@pytest.mark.usefixtures("quota_policy")
def test_without_fair_share_the_policy_alone_orders_borrowers(world: World, settings) -> None:  # noqa: ANN001
    settings.CORRAL_FAIR_SHARE_HALF_LIFE_HOURS = 0
    lab, other = contend(world)
    scheduling_round()
    assert states(lab) == ["running", "running", "running"]
    assert states(other) == ["running", "pending", "pending"]


@pytest.mark.usefixtures("quota_policy")
def test_the_start_forecast_uses_the_same_fair_share_order(world: World) -> None:
    lab, other = contend(world)
    start_forecast_refresh()
    expected = {j.pk: Job.objects.get(pk=j.pk).expected_start_at for j in lab + other}
    now = timezone.now()
    # Everything of other's and lab's first job start at once; lab's borrowers wait for GPUs to free.
    assert all(expected[j.pk] is not None and expected[j.pk] <= now for j in other + lab[:1])
    assert all(expected[j.pk] is None or expected[j.pk] > now for j in lab[1:])
