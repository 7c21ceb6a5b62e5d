"""What users see of the fence (issue #15): a job whose old processes still hold GPUs is *stopping*, a node whose
lost tasks hold GPUs is *fenced*, and only an admin may release those GPUs, on the node page or through the API."""

from __future__ import annotations

from datetime import timedelta

from django.db.models import F
from django.test import Client
from rest_framework.test import APIClient

from portal.jobs.models import Allocation
from portal.jobs.services import job_submit
from portal.nodes.models import Node
from portal.nodes.services import nodes_mark_stale_down
from portal.scheduler.services import scheduling_round
from tests.factories import UserFactory
from tests.fixtures import World
from tests.portal.nodes.fake_agent import FakeNode


def _fenced_job(world: World):  # noqa: ANN202
    """A job placed on n1, which then falls silent and is marked down: its GPUs there are fenced."""
    Node.objects.filter(name="n2").update(state="draining")
    job = job_submit(user=world.alice, command="train", gpus=2)
    scheduling_round()
    FakeNode(Node.objects.get(name="n1")).heartbeat()
    Node.objects.filter(name="n1").update(last_heartbeat=F("last_heartbeat") - timedelta(minutes=5))
    assert nodes_mark_stale_down() == ["n1"]
    return job


def test_a_stopping_job_and_a_fenced_node_say_so(world: World) -> None:
    job = _fenced_job(world)
    web = Client()
    web.force_login(world.alice)
    page = web.get(f"/jobs/{job.pk}/").content.decode()
    assert 'data-testid="job-stopping"' in page and "n1 GPU 0, n1 GPU 1" in page
    nodes = web.get("/nodes/").content.decode()
    assert 'data-testid="node-fenced"' in nodes and "(stopping)" in nodes
    detail = web.get("/nodes/n1/").content.decode()
    assert 'data-testid="node-fenced-detail"' in detail and 'data-testid="release-fenced"' not in detail
    api = APIClient()
    api.force_authenticate(world.alice)
    (n1,) = [n for n in api.get("/api/v1/nodes/").json()["results"] if n["name"] == "n1"]
    assert n1["fenced_gpus"] == 2 and {g["state"] for g in n1["gpus"][:2]} == {"stopping"}


def test_only_an_admin_releases_fenced_gpus(world: World) -> None:
    job = _fenced_job(world)
    member = Client()
    member.force_login(world.alice)
    assert member.post("/nodes/n1/release-fenced/").status_code == 403
    api = APIClient()
    api.force_authenticate(world.alice)
    assert api.post("/api/v1/nodes/n1/release-fenced/").status_code == 403
    assert Allocation.objects.filter(job=job, released_at__isnull=True).count() == 2
    staff = UserFactory(username="root", is_staff=True)
    admin = Client()
    admin.force_login(staff)
    assert 'data-testid="release-fenced"' in admin.get("/nodes/n1/").content.decode()
    api.force_authenticate(staff)
    assert api.post("/api/v1/nodes/n1/release-fenced/").json() == {"node": "n1", "released": 2}
    assert not Allocation.objects.filter(job=job, released_at__isnull=True).exists()
    assert admin.post("/nodes/n1/release-fenced/").status_code == 302  # nothing left: says "Released 0"
