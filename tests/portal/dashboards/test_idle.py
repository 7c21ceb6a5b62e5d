"""The dashboard's idle-GPU list for tenant admins and staff: running jobs idle now (the job page's rule) and
GPU-hours held below the threshold in the window, per job and per user; members see no list. Ref: #18"""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.test import Client
from django.utils import timezone

from portal.dashboards.idle import idle_panel
from portal.dashboards.selectors import window_of
from portal.jobs.models import Job
from portal.telemetry.job_usage import wasted_gpu_time
from portal.telemetry.models import RollupPeriod
from tests.factories import UserFactory
from tests.fixtures import World
from tests.portal.dashboards.rows import NOW, H, allocate, gpu, job, rollups

M = timedelta(minutes=1)
MINUTE = RollupPeriod.MINUTE


@pytest.fixture
def history(world: World) -> dict[str, int]:
    """In the last hour before NOW: alice's running job on two GPUs, idle (2 %) for its last 40 minutes; bob's
    finished job busy (80 %) for 30 minutes then idle (5 %) for 20; eve (another tenant) idle for an hour."""
    lab, other = world.tenant, world.other_tenant
    idle = job(lab, world.alice, submitted=NOW - H, started=NOW - H, gpus=2, name="stuck")
    for uuid in ("GPU-n1-0", "GPU-n1-1"):
        allocate(idle, gpu(uuid), start=NOW - 40 * M, end=None)
        rollups(gpu(uuid), NOW - 40 * M, [2.0] * 40, period=MINUTE)
    mixed = job(lab, world.bob, submitted=NOW - H, started=NOW - 50 * M, finished=NOW - 0 * M, name="mixed")
    allocate(mixed, gpu("GPU-n1-2"), start=NOW - 50 * M, end=NOW)
    rollups(gpu("GPU-n1-2"), NOW - 50 * M, [80.0] * 30 + [5.0] * 20, period=MINUTE)
    theirs = job(other, world.eve, submitted=NOW - H, started=NOW - H, name="elsewhere")
    allocate(theirs, gpu("GPU-n2-0"), start=NOW - H, end=None)
    rollups(gpu("GPU-n2-0"), NOW - H, [0.0] * 60, period=MINUTE)
    return {"idle": idle.pk, "mixed": mixed.pk, "theirs": theirs.pk}


def test_wasted_time_counts_only_readings_below_the_threshold(world: World, history: dict[str, int]) -> None:
    rows = {r.job_id: r for r in wasted_gpu_time(jobs=Job.objects.all(), start=NOW - H, end=NOW, period=MINUTE)}
    assert rows[history["idle"]].seconds == pytest.approx(2 * 40 * 60)
    assert rows[history["mixed"]].seconds == pytest.approx(20 * 60)  # the busy half hour is not waste
    assert rows[history["theirs"]].seconds == pytest.approx(60 * 60)
    # The window clips: of the idle job's 40 minutes, the last 10.
    clipped = wasted_gpu_time(jobs=Job.objects.all(), start=NOW - 10 * M, end=NOW, period=MINUTE)
    assert {r.job_id: r.seconds for r in clipped}[history["idle"]] == pytest.approx(2 * 10 * 60)


def test_a_tenant_admin_sees_their_tenants_idle_jobs_and_waste(world: World, history: dict[str, int]) -> None:
    panel = idle_panel(user=world.admin, window=window_of("1h", now=NOW), now=NOW)
    assert panel is not None
    assert [(j.job_id, j.verdict.gpus, round(j.verdict.util)) for j in panel.idle_now] == [(history["idle"], 2, 2)]
    assert [(r.job_id, round(r.gpu_hours, 3)) for r in panel.wasted_jobs] == [
        (history["idle"], round(80 / 60, 3)),
        (history["mixed"], round(20 / 60, 3)),
    ]
    assert [(w.user, w.jobs, round(w.gpu_hours, 3)) for w in panel.wasted_users] == [
        ("alice", 1, round(80 / 60, 3)),
        ("bob", 1, round(20 / 60, 3)),
    ]
    assert panel.wasted_gpu_hours == pytest.approx(100 / 60)


def test_members_see_no_list_and_staff_see_every_tenant(world: World, history: dict[str, int]) -> None:
    window = window_of("1h", now=NOW)
    assert idle_panel(user=world.alice, window=window, now=NOW) is None
    root = UserFactory(username="root", is_staff=True)
    panel = idle_panel(user=root, window=window, now=NOW)
    assert panel is not None
    assert {j.job_id for j in panel.idle_now} == {history["idle"], history["theirs"]}
    only_other = idle_panel(user=root, window=window, now=NOW, tenant=world.other_tenant)
    assert only_other is not None and [j.job_id for j in only_other.idle_now] == [history["theirs"]]


def test_the_dashboard_page_shows_the_list_to_admins_only(world: World, client: Client) -> None:
    now = timezone.now()
    stuck = job(world.tenant, world.alice, submitted=now - H, started=now - H, gpus=1, name="stuck-job")
    allocate(stuck, gpu("GPU-n1-0"), start=now - 40 * M, end=None)
    first = now.replace(second=0, microsecond=0) - 40 * M
    rollups(gpu("GPU-n1-0"), first, [1.0] * 41, period=MINUTE)
    client.force_login(world.admin)
    page = client.get("/dashboard/?window=1h").content.decode()
    assert 'data-testid="idle-gpus"' in page and "stuck-job" in page
    client.force_login(world.alice)
    assert 'data-testid="idle-gpus"' not in client.get("/dashboard/?window=1h").content.decode()
