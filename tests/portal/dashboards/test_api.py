"""``GET /api/v1/usage/``: the dashboard's figures for scripts, with its visibility and 400s on bad parameters."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone
from rest_framework.test import APIClient

from portal.dashboards.stats import floor_time
from tests.fixtures import World
from tests.portal.dashboards.rows import allocate, gpu, job, rollups

H = timedelta(hours=1)


@pytest.fixture
def history(world: World) -> None:
    """alice (lab): submitted 3 h ago, ran on one GPU from 2 h to 1 h ago at 50% utilization; eve (other): the
    same on another GPU, without telemetry."""
    now = timezone.now()
    mine = job(world.tenant, world.alice, submitted=now - 3 * H, started=now - 2 * H, finished=now - H)
    allocate(mine, gpu("GPU-n1-0"), start=now - 2 * H, end=now - H)
    rollups(gpu("GPU-n1-0"), floor_time(now - 3 * H, 3600), [50.0] * 5)
    theirs = job(world.other_tenant, world.eve, submitted=now - 3 * H, started=now - 2 * H, finished=now - H)
    allocate(theirs, gpu("GPU-n2-0"), start=now - 2 * H, end=now - H)


def test_a_member_gets_their_tenants_figures_only(api: APIClient, history: None) -> None:
    body = api.get("/api/v1/usage/", {"window": "30d"}).json()  # a window longer than a day reads hourly rollups
    assert (body["window"], body["scope"]) == ("30d", "your tenants")
    assert [t["name"] for t in body["tenants"]] == ["lab"]
    assert [u["name"] for u in body["users"]] == ["alice"]
    lab = body["tenants"][0]
    assert lab["jobs_finished"] == 1 and lab["jobs_never_ran"] == 0
    assert lab["jct_seconds"]["median"] == pytest.approx(2 * 3600, abs=1)
    assert lab["queueing_seconds"]["median"] == pytest.approx(3600, abs=1)
    assert lab["gpu_hours_allocated"] == pytest.approx(1.0, abs=1e-3)
    assert lab["gpu_hours_used"] == pytest.approx(0.5, abs=1e-3)
    assert lab["gpu_hours_without_telemetry"] == pytest.approx(0.0, abs=1e-3)
    assert lab["efficiency"] == pytest.approx(0.5, abs=1e-3)
    assert body["cluster_gpus"] == 8 and body["cluster_utilization"] == pytest.approx(50.0)


def test_staff_see_every_tenant_and_hours_without_telemetry(world: World, history: None) -> None:
    world.admin.is_staff = True
    world.admin.save()
    client = APIClient()
    client.force_authenticate(world.admin)
    body = client.get("/api/v1/usage/").json()  # no window: the shortest that holds the 3-hour-old jobs (#18)
    assert body["window"] == "6h" and body["scope"] == "all tenants"
    other = next(t for t in body["tenants"] if t["name"] == "other")
    assert other["gpu_hours_allocated"] == pytest.approx(1.0, abs=1e-3)
    assert other["gpu_hours_without_telemetry"] == pytest.approx(1.0, abs=1e-3)
    assert other["efficiency"] is None
    assert body["total"]["gpu_hours_allocated"] == pytest.approx(2.0, abs=1e-3)


@pytest.mark.parametrize(
    ("params", "field"),
    [({"window": "1y"}, "window"), ({"tenant": "other"}, "tenant"), ({"tenant": "nope"}, "tenant")],
)
def test_bad_parameters_are_400_on_their_field(api: APIClient, params: dict[str, str], field: str) -> None:
    response = api.get("/api/v1/usage/", params)
    assert response.status_code == 400
    assert list(response.json()) == [field]


def test_a_tenant_filter_and_the_login_requirement(api: APIClient, history: None) -> None:
    assert api.get("/api/v1/usage/", {"tenant": "lab"}).json()["scope"] == "lab"
    assert APIClient().get("/api/v1/usage/").status_code == 401
