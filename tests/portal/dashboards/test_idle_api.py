"""``GET /api/v1/usage/`` carries the dashboard's idle-GPU list (``idle``) with the panel's visibility: a tenant
admin gets their tenants' idle jobs and wasted GPU-hours, staff every tenant's, a member ``null``. Ref: #18"""

from __future__ import annotations

from datetime import timedelta

from django.utils import timezone
from rest_framework.test import APIClient

from portal.telemetry.models import RollupPeriod
from tests.factories import UserFactory
from tests.fixtures import World
from tests.portal.dashboards.rows import allocate, gpu, job, rollups

H = timedelta(hours=1)
M = timedelta(minutes=1)


def _stuck_jobs(world: World) -> tuple[int, int]:
    """alice's job (lab) and eve's (other tenant), each on one GPU at 1 % for the last 40 minutes."""
    now = timezone.now()
    first = now.replace(second=0, microsecond=0) - 40 * M
    ids = []
    for tenant, user, uuid in ((world.tenant, world.alice, "GPU-n1-0"), (world.other_tenant, world.eve, "GPU-n2-0")):
        stuck = job(tenant, user, submitted=now - H, started=now - H, gpus=1, name=f"stuck-{user.username}")
        allocate(stuck, gpu(uuid), start=now - 40 * M, end=None)
        rollups(gpu(uuid), first, [1.0] * 41, period=RollupPeriod.MINUTE)
        ids.append(stuck.pk)
    return ids[0], ids[1]


def test_a_tenant_admin_gets_their_tenants_idle_jobs(world: World) -> None:
    mine, _ = _stuck_jobs(world)
    client = APIClient()
    client.force_authenticate(world.admin)
    idle = client.get("/api/v1/usage/?window=1h").json()["idle"]
    assert [(j["job_id"], j["gpus"], j["tenant"], j["user"]) for j in idle["idle_now"]] == [(mine, 1, "lab", "alice")]
    assert idle["idle_now"][0]["text"].startswith("holds 1 GPU and used 1 % of it over the last ")
    assert idle["threshold"] > 1 and idle["rule_window_seconds"] > 0 and 0 < idle["min_coverage"] <= 1
    assert [(u["user"], u["jobs"]) for u in idle["users"]] == [("alice", 1)]
    assert [j["job_id"] for j in idle["jobs"]] == [mine]
    assert 0.6 < idle["idle_gpu_hours"] <= 0.7  # 40 minutes of one GPU
    assert idle["idle_gpu_hours"] == idle["users"][0]["idle_gpu_hours"] == idle["jobs"][0]["idle_gpu_hours"]


def test_members_get_null_and_staff_every_tenant(world: World) -> None:
    mine, theirs = _stuck_jobs(world)
    client = APIClient()
    client.force_authenticate(world.alice)
    body = client.get("/api/v1/usage/?window=1h").json()
    assert body["idle"] is None and body["tenants"]  # a member still gets the figures, not the list
    client.force_authenticate(UserFactory(username="root", is_staff=True))
    idle = client.get("/api/v1/usage/?window=1h").json()["idle"]
    assert {j["job_id"] for j in idle["idle_now"]} == {mine, theirs}
    only_other = client.get("/api/v1/usage/?window=1h&tenant=other").json()["idle"]
    assert [j["job_id"] for j in only_other["idle_now"]] == [theirs]


def test_the_schema_documents_the_idle_list() -> None:
    schema = APIClient().get("/api/v1/schema/", HTTP_ACCEPT="application/json").json()
    usage = schema["components"]["schemas"]["Usage"]["properties"]["idle"]
    assert usage["nullable"] is True and usage["allOf"] == [{"$ref": "#/components/schemas/Idle"}], usage
    idle = schema["components"]["schemas"]["Idle"]["properties"]
    assert {"idle_now", "idle_gpu_hours", "users", "jobs", "threshold"} <= set(idle)
