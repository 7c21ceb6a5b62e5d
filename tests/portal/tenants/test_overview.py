"""The tenants overview selector: who sees which tenant, what each holds and borrows, and its fair-share standing
(decayed usage against the closed form, and the borrowing order over every tenant)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.contrib.auth.models import AnonymousUser
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from portal.jobs.services import job_submit
from portal.tenants.models import Quota
from portal.tenants.overview import tenant_overview
from tests.factories import MembershipFactory, QuotaFactory, TenantFactory, UserFactory
from tests.fixtures import World
from tests.portal.tenants.history import closed_form, held

HOUR = 3600.0
DAY = timedelta(days=1)


@pytest.fixture
def staff(world: World):  # noqa: ANN201
    return UserFactory(username="root", is_staff=True)


def slugs(user) -> list[str]:  # noqa: ANN001
    return [row.slug for row in tenant_overview(user=user, now=timezone.now()).tenants]


def test_members_see_their_tenants_and_staff_see_all(world: World, staff) -> None:  # noqa: ANN001
    TenantFactory(slug="solo")
    assert slugs(world.alice) == ["lab"]
    assert slugs(world.eve) == ["other"]
    assert slugs(staff) == ["lab", "other", "solo"]
    assert slugs(AnonymousUser()) == []
    assert slugs(UserFactory(username="nobody")) == []


def test_quota_fields_and_no_limit_as_none(world: World, staff) -> None:  # noqa: ANN001
    Quota.objects.filter(tenant=world.tenant).update(guaranteed_gpus=2, user_gpu_limit=3, max_active_jobs=10)
    TenantFactory(slug="solo")  # no quota row at all
    rows = {r.slug: r for r in tenant_overview(user=staff, now=timezone.now()).tenants}
    lab, other, solo = rows["lab"], rows["other"], rows["solo"]
    assert (lab.name, lab.guaranteed_gpus, lab.gpu_cap, lab.user_cap, lab.max_active_jobs) == ("Lab", 2, 6, 3, 10)
    assert (other.guaranteed_gpus, other.gpu_cap, other.user_cap, other.max_active_jobs) == (0, None, None, None)
    assert (solo.guaranteed_gpus, solo.gpu_cap, solo.user_cap, solo.max_active_jobs) == (0, None, None, None)


def test_gpus_held_in_guarantee_and_borrowed(world: World, staff) -> None:  # noqa: ANN001
    now = timezone.now()
    Quota.objects.filter(tenant=world.tenant).update(guaranteed_gpus=2)
    held(world.alice, 3, now - DAY, None)  # running: 2 inside lab's guarantee, 1 borrowed
    held(world.bob, 2, now - 3 * DAY, now - 2 * DAY)  # finished: holds nothing now
    job_submit(user=world.alice, command="waits", gpus=1)
    job_submit(user=world.bob, command="waits too", gpus=2)
    held(world.eve, 1, now - DAY, None)  # other has no guarantee: all it holds is borrowed
    rows = {r.slug: r for r in tenant_overview(user=staff, now=now).tenants}
    lab, other = rows["lab"], rows["other"]
    assert (lab.gpus_held, lab.in_guarantee, lab.borrowed) == (3, 2, 1)
    assert (lab.running_jobs, lab.pending_jobs) == (1, 2)
    assert (other.gpus_held, other.in_guarantee, other.borrowed) == (1, 0, 1)
    assert (other.running_jobs, other.pending_jobs) == (1, 0)


def test_a_tenant_inside_its_guarantee_borrows_nothing(world: World) -> None:
    Quota.objects.filter(tenant=world.tenant).update(guaranteed_gpus=4)
    held(world.alice, 3, timezone.now() - DAY, None)
    (lab,) = tenant_overview(user=world.alice, now=timezone.now()).tenants
    assert (lab.gpus_held, lab.in_guarantee, lab.borrowed) == (3, 3, 0)


def test_usage_share_ratio_and_borrowing_order(world: World, settings, staff) -> None:  # noqa: ANN001
    settings.CORRAL_FAIR_SHARE_HALF_LIFE_HOURS = 24
    h = DAY.total_seconds()
    now = timezone.now()
    Quota.objects.filter(tenant=world.tenant).update(guaranteed_gpus=2)
    Quota.objects.filter(tenant=world.other_tenant).update(guaranteed_gpus=2)
    solo = TenantFactory(slug="solo")  # no guarantee, no usage: borrows after every tenant with a share
    QuotaFactory(tenant=solo)
    held(world.alice, 2, now - 3 * DAY, now - 2 * DAY)
    held(world.bob, 1, now - 10 * DAY, now - 9 * DAY)
    held(world.eve, 1, now - timedelta(hours=2), None)  # still running: counts up to now
    lab_usage = closed_form(2, now - 3 * DAY, now - 2 * DAY, now, h) + closed_form(
        1, now - 10 * DAY, now - 9 * DAY, now, h
    )
    other_usage = closed_form(1, now - timedelta(hours=2), now, now, h)
    assert other_usage < lab_usage  # so other borrows first

    overview = tenant_overview(user=staff, now=now)
    assert overview.half_life_hours == 24.0
    rows = {r.slug: r.fair_share for r in overview.tenants}
    lab, other, alone = rows["lab"], rows["other"], rows["solo"]
    assert lab is not None and other is not None and alone is not None
    assert lab.usage_gpu_hours == pytest.approx(lab_usage / HOUR, rel=1e-6)
    assert other.usage_gpu_hours == pytest.approx(other_usage / HOUR, rel=1e-6)
    total = lab_usage + other_usage
    assert lab.usage_share == pytest.approx(lab_usage / total, rel=1e-6)
    assert (lab.entitled_share, other.entitled_share, alone.entitled_share) == (0.5, 0.5, 0.0)
    assert lab.ratio == pytest.approx(lab_usage / total / 0.5, rel=1e-6)
    assert other.ratio == pytest.approx(other_usage / total / 0.5, rel=1e-6)
    assert alone.ratio is None and alone.usage_gpu_hours == 0.0
    assert [(s.borrow_order, s.tenant_count) for s in (other, lab, alone)] == [(1, 3), (2, 3), (3, 3)]


def test_a_member_sees_their_place_among_every_tenant(world: World, settings) -> None:  # noqa: ANN001
    settings.CORRAL_FAIR_SHARE_HALF_LIFE_HOURS = 24
    now = timezone.now()
    Quota.objects.filter(tenant=world.tenant).update(guaranteed_gpus=1)
    Quota.objects.filter(tenant=world.other_tenant).update(guaranteed_gpus=1)
    held(world.alice, 1, now - 2 * DAY, now - DAY)
    (lab,) = tenant_overview(user=world.alice, now=now).tenants
    assert lab.fair_share is not None
    assert (lab.fair_share.borrow_order, lab.fair_share.tenant_count) == (2, 2)  # other used less
    assert lab.fair_share.ratio == pytest.approx(2.0)  # all the usage, half the guarantees


def test_fair_share_off_leaves_the_standing_out(world: World, settings) -> None:  # noqa: ANN001
    settings.CORRAL_FAIR_SHARE_HALF_LIFE_HOURS = 0
    held(world.alice, 1, timezone.now() - DAY, None)
    overview = tenant_overview(user=world.alice, now=timezone.now())
    assert overview.half_life_hours is None
    assert [(r.gpus_held, r.fair_share) for r in overview.tenants] == [(1, None)]


@pytest.mark.parametrize(("policy", "quota_layer"), [("fifo", False), ("fifo+quota", True), ("srtf+quota", True)])
def test_the_live_policy_and_its_quota_layer(world: World, settings, policy: str, quota_layer: bool) -> None:  # noqa: ANN001
    settings.CORRAL_POLICY = policy
    overview = tenant_overview(user=world.alice, now=timezone.now())
    assert (overview.policy, overview.quota_layer) == (policy, quota_layer)


def test_a_fixed_number_of_queries_whatever_the_number_of_tenants(world: World, settings, staff) -> None:  # noqa: ANN001
    settings.CORRAL_FAIR_SHARE_HALF_LIFE_HOURS = 24

    def count() -> int:
        with CaptureQueriesContext(connection) as queries:
            tenant_overview(user=staff, now=timezone.now())
        return len(queries)

    held(world.alice, 1, timezone.now() - DAY, None)
    few = count()
    for i in range(5):
        tenant = TenantFactory(slug=f"more{i}")
        QuotaFactory(tenant=tenant, guaranteed_gpus=1)
        member = UserFactory(username=f"member{i}")
        MembershipFactory(user=member, tenant=tenant)
        held(member, 1, timezone.now() - DAY, None)
    assert count() == few <= 6
