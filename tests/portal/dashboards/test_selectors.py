"""Each dashboard definition on hand-built rows whose answers are known: JCT, queueing delay from the first start,
GPU-hours allocated (clipped to the window) and used (weighted by rollups), hours without telemetry, the cluster's
series, and who sees which rows. Definitions: docs/dashboards.md."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.contrib.auth.models import AbstractBaseUser

from portal.dashboards.selectors import dashboard_get, dashboard_tenants, window_of
from portal.dashboards.stats import Dashboard, GroupStats
from portal.telemetry.models import RollupPeriod
from tests.factories import MembershipFactory, UserFactory
from tests.fixtures import World
from tests.portal.dashboards.rows import NOW, H, allocate, gpu, job, rollups

M = timedelta(minutes=1)


def _get(user: AbstractBaseUser, key: str = "24h", **kwargs: object) -> Dashboard:
    return dashboard_get(user=user, window=window_of(key, now=NOW), **kwargs)  # type: ignore[arg-type]


def _row(rows: list[GroupStats], label: str) -> GroupStats:
    return next(r for r in rows if r.label == label)


@pytest.fixture
def root(world: World) -> AbstractBaseUser:
    return UserFactory(username="root", is_staff=True)


def test_jct_counts_finished_jobs_that_ran(world: World) -> None:
    lab, alice, bob = world.tenant, world.alice, world.bob
    job(lab, alice, submitted=NOW - 5 * H, started=NOW - 4 * H, finished=NOW - 1 * H)  # 4 h
    job(lab, bob, submitted=NOW - 3 * H, started=NOW - 2.5 * H, finished=NOW - 2 * H, state="failed")  # 1 h
    job(lab, alice, submitted=NOW - 2 * H, finished=NOW - 0.5 * H, state="cancelled")  # never ran: no JCT
    # Ran an hour, was requeued (started_at cleared) and cancelled while waiting: it ran, so 3 h of JCT.
    job(lab, bob, submitted=NOW - 6 * H, finished=NOW - 3 * H, state="cancelled", attained=3600.0)
    job(lab, alice, submitted=NOW - 31 * H, started=NOW - 30.5 * H, finished=NOW - 30 * H)  # before the day
    job(lab, alice, submitted=NOW - 1 * H, started=NOW - 1 * H, state="running")  # not finished

    day = _get(alice)
    assert day.total.finished == 4 and day.total.never_ran == 1
    assert day.total.jct is not None
    assert (day.total.jct.count, day.total.jct.median) == (3, pytest.approx(3 * 3600))
    assert day.total.jct.mean == pytest.approx(8 * 3600 / 3)
    assert _row(day.users, "alice").jct.median == pytest.approx(4 * 3600)  # type: ignore[union-attr]
    assert _row(day.users, "bob").jct.median == pytest.approx(2 * 3600)  # type: ignore[union-attr]
    assert _row(day.tenants, "lab").finished == 4

    week = _get(alice, "7d")
    assert week.total.finished == 5 and week.total.jct.count == 4  # type: ignore[union-attr]


def test_queueing_delay_runs_to_the_first_start_despite_a_requeue(world: World) -> None:
    lab, alice, bob = world.tenant, world.alice, world.bob
    # Waited 2 h, ran 2 h, was requeued and started again 2 h ago: started_at (the latest attempt) says 8 h.
    requeued = job(lab, alice, submitted=NOW - 10 * H, started=NOW - 2 * H, state="running")
    allocate(requeued, gpu("GPU-n1-0"), start=NOW - 8 * H, end=NOW - 6 * H, attempt=1)
    allocate(requeued, gpu("GPU-n1-1"), start=NOW - 2 * H, end=None, attempt=2)
    # First started 30 h ago (outside the day), again an hour ago: not a start of this day.
    old = job(lab, bob, submitted=NOW - 40 * H, started=NOW - 1 * H, state="running")
    allocate(old, gpu("GPU-n2-0"), start=NOW - 30 * H, end=NOW - 29 * H, attempt=1)
    allocate(old, gpu("GPU-n2-1"), start=NOW - 1 * H, end=None, attempt=2)
    # A two-GPU gang: one delay, not two.
    pair = job(lab, bob, submitted=NOW - 3 * H, started=NOW - 2.5 * H, finished=NOW - 1 * H, gpus=2)
    allocate(pair, gpu("GPU-n2-2"), start=NOW - 2.5 * H, end=NOW - 1 * H)
    allocate(pair, gpu("GPU-n2-3"), start=NOW - 2.5 * H + timedelta(milliseconds=3), end=NOW - 1 * H)

    day = _get(alice).total.queue
    assert day is not None and day.count == 2
    assert day.median == pytest.approx(1.25 * 3600) and day.p95 == pytest.approx(1.925 * 3600)
    week = _get(alice, "7d")
    assert week.total.queue is not None and week.total.queue.count == 3
    assert week.total.queue.median == pytest.approx(2 * 3600) and week.total.queue.p95 == pytest.approx(9.2 * 3600)
    assert _row(week.users, "bob").queue.mean == pytest.approx((10 + 0.5) / 2 * 3600)  # type: ignore[union-attr]


def test_allocated_gpu_hours_are_clipped_to_the_window_and_uncovered_without_telemetry(world: World) -> None:
    lab, alice = world.tenant, world.alice
    j = job(lab, alice, submitted=NOW - 60 * H, started=NOW - 50 * H, state="running")
    allocate(j, gpu("GPU-n1-0"), start=NOW - 30 * H, end=NOW - 20 * H)  # 4 h of the day, 10 h of the week
    allocate(j, gpu("GPU-n1-1"), start=NOW - 3 * H, end=None)  # held: 3 h up to now
    allocate(j, gpu("GPU-n2-0"), start=NOW - 50 * H, end=NOW - 40 * H)  # before the day; 10 h of the week

    day = _get(alice).total.usage
    assert day.allocated_hours == pytest.approx(7.0)
    assert (day.covered, day.used, day.efficiency) == (0.0, 0.0, None)
    assert day.uncovered_hours == pytest.approx(7.0)
    assert _get(alice, "7d").total.usage.allocated_hours == pytest.approx(23.0)


def test_used_gpu_hours_weigh_each_allocation_by_its_gpus_rollups(world: World) -> None:
    lab, alice, bob = world.tenant, world.alice, world.bob
    g10, g11, g20, g21 = (gpu(u) for u in ("GPU-n1-0", "GPU-n1-1", "GPU-n2-0", "GPU-n2-1"))
    # 3 h on a GPU at 50 %, 100 %, 0 %: 1.5 h used. Its rollups before and after the allocation do not count.
    allocate(job(lab, alice, submitted=NOW - 6 * H), g10, start=NOW - 5 * H, end=NOW - 2 * H)
    rollups(g10, NOW - 10 * H, [100.0])
    rollups(g10, NOW - 5 * H, [50.0, 100.0, 0.0, 100.0])
    # 1 h straddling two buckets, half of each: 0.5 x 40 % + 0.5 x 80 % = 0.6 h used.
    allocate(job(lab, bob, submitted=NOW - 6 * H), g11, start=NOW - 5.5 * H, end=NOW - 4.5 * H)
    rollups(g11, NOW - 6 * H, [40.0, 80.0])
    # 2 h, of which one hour's rollup has no utilization: 1 h covered at 60 %, 1 h without telemetry.
    allocate(job(lab, bob, submitted=NOW - 6 * H), g20, start=NOW - 4 * H, end=NOW - 2 * H)
    rollups(g20, NOW - 4 * H, [None, 60.0])
    # Still held, from 90 min ago, at 20 %: 1.5 h covered, 0.3 h used.
    allocate(job(lab, alice, submitted=NOW - 2 * H, state="running"), g21, start=NOW - 1.5 * H, end=None)
    rollups(g21, NOW - 2 * H, [20.0, 20.0])

    week = _get(alice, "7d")
    total = week.total.usage
    assert total.allocated_hours == pytest.approx(7.5)
    assert total.covered / 3600 == pytest.approx(6.5)
    assert total.used_hours == pytest.approx(3.0)
    assert total.uncovered_hours == pytest.approx(1.0)
    assert total.efficiency == pytest.approx(3.0 / 6.5)
    alice_usage, bob_usage = _row(week.users, "alice").usage, _row(week.users, "bob").usage
    assert (alice_usage.allocated_hours, alice_usage.used_hours) == (pytest.approx(4.5), pytest.approx(1.8))
    assert (bob_usage.allocated_hours, bob_usage.used_hours) == (pytest.approx(3.0), pytest.approx(1.2))
    assert bob_usage.uncovered_hours == pytest.approx(1.0)
    # Cluster-wide: the mean of every rollup with a utilization in the window, and per hour.
    assert week.cluster.util == pytest.approx(570 / 10)
    series = dict(zip(week.cluster.util_series.x, week.cluster.util_series.y, strict=True))
    assert series[NOW - 2 * H] == pytest.approx(60.0) and series[NOW - 10 * H] == pytest.approx(100.0)


def test_the_day_reads_minute_rollups(world: World) -> None:
    g = gpu("GPU-n1-0")
    allocate(job(world.tenant, world.alice, submitted=NOW - H), g, start=NOW - 10 * M, end=NOW - 4 * M)
    rollups(g, NOW - 12 * M, [30.0] * 12, period=RollupPeriod.MINUTE)
    rollups(g, NOW - H, [100.0])  # the hourly rollup of the same time is not read for a day
    usage = _get(world.alice).total.usage
    assert usage.allocated_hours == pytest.approx(0.1) and usage.used_hours == pytest.approx(0.03)
    assert usage.uncovered_hours == pytest.approx(0.0, abs=1e-6)  # SQLite reads times to the millisecond


def test_allocated_gpus_over_time_step_at_bucket_boundaries(world: World) -> None:
    j = job(world.tenant, world.alice, submitted=NOW - 40 * H, state="running")
    allocate(j, gpu("GPU-n1-0"), start=NOW - 30 * H, end=NOW - 20 * H)
    allocate(j, gpu("GPU-n1-1"), start=NOW - 3 * H, end=None)
    series = _get(world.alice).cluster.allocated_series
    assert len(series.x) == 24 * 60 + 1 and series.x[0] == NOW - 24 * H and series.x[-1] == NOW
    levels = dict(zip(series.x, series.y, strict=True))
    assert levels[NOW - 24 * H] == 1 and levels[NOW - 20 * H] == 1 and levels[NOW - 20 * H + M] == 0
    assert levels[NOW - 3 * H] == 0 and levels[NOW - 3 * H + M] == 1 and levels[NOW] == 1


def test_a_member_sees_only_their_tenants_and_staff_see_all(world: World, root: AbstractBaseUser) -> None:
    lab, other = world.tenant, world.other_tenant
    MembershipFactory(user=world.bob, tenant=other)  # bob works in both tenants
    for tenant, user, g in (
        (lab, world.alice, "GPU-n1-0"),
        (other, world.eve, "GPU-n2-0"),
        (other, world.bob, "GPU-n2-1"),
    ):
        j = job(tenant, user, submitted=NOW - 3 * H, started=NOW - 2 * H, finished=NOW - 1 * H)
        allocate(j, gpu(g), start=NOW - 2 * H, end=NOW - 1 * H)

    alice = _get(world.alice)
    assert [t.label for t in alice.tenants] == ["lab"] and [u.label for u in alice.users] == ["alice"]
    assert alice.total.finished == 1 and alice.total.usage.allocated_hours == pytest.approx(1.0)
    assert alice.scope == "your tenants"
    eve = _get(world.eve)
    assert [t.label for t in eve.tenants] == ["other"] and [u.label for u in eve.users] == ["bob", "eve"]
    bob = _get(world.bob)  # in both: both tenants, and his own row counts his jobs of both
    assert [t.label for t in bob.tenants] == ["lab", "other"]
    assert _row(bob.users, "bob").finished == 1 and bob.total.finished == 3

    staff = _get(root)
    assert [t.label for t in staff.tenants] == ["lab", "other"] and staff.total.finished == 3
    assert staff.scope == "all tenants"
    only_other = _get(root, tenant=other)
    assert [t.label for t in only_other.tenants] == ["other"] and [u.label for u in only_other.users] == ["bob", "eve"]
    assert only_other.scope == "other" and only_other.total.usage.allocated_hours == pytest.approx(2.0)
    # Cluster-wide figures are the same for everyone.
    assert alice.cluster == staff.cluster

    assert [t.slug for t in dashboard_tenants(user=world.alice)] == ["lab"]
    assert [t.slug for t in dashboard_tenants(user=root)] == ["lab", "other"]


def test_the_number_of_queries_does_not_grow_with_the_jobs(world: World, django_assert_max_num_queries) -> None:  # noqa: ANN001
    for k in range(30):
        j = job(world.tenant, world.alice if k % 2 else world.bob, submitted=NOW - 5 * H, finished=NOW - H)
        allocate(j, gpu(f"GPU-n{1 + k % 2}-{k % 4}"), start=NOW - (4 + k / 10) * H, end=NOW - (3 + k / 10) * H)
    with django_assert_max_num_queries(16):  # 12 reads (two for jobs waiting), and on PostgreSQL the JIT switch
        board = _get(world.alice, "7d")
    assert board.total.finished == 30
