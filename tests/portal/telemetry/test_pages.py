"""The node page (full and htmx partial) and the telemetry API, with their query budgets. Ref: #4"""

from __future__ import annotations

import pytest
from django.test import Client
from django.utils import timezone

from portal.nodes.models import Gpu
from portal.telemetry.models import GpuRisk
from tests.fixtures import World
from tests.portal.telemetry.helpers import post_batch, running_job, sample, xid


@pytest.fixture
def browser(world: World) -> Client:
    client = Client()
    client.force_login(world.alice)
    return client


def test_node_page_shows_latest_metrics_health_risk_xids_and_alerts(
    world: World,
    browser: Client,
    django_assert_max_num_queries,  # noqa: ANN001
) -> None:
    job, _, (held,) = running_job(world)
    node = held.node.name
    post_batch(world, node, [sample(f"GPU-{node}-{i}", temperature_c=61.0 + i) for i in range(4)])
    other = next(g for g in Gpu.objects.filter(node=held.node) if g.pk != held.pk)
    post_batch(world, node, [], [xid(other.uuid, 79)])
    GpuRisk.objects.create(gpu=held, risk=0.37, scored_at=timezone.now())
    with django_assert_max_num_queries(14):
        page = browser.get(f"/nodes/{node}/")
    assert page.status_code == 200
    html = page.content.decode()
    assert 'hx-trigger="every 5s"' in html and f"/jobs/{job.pk}/" in html
    assert "0.37" in html and f"{61 + held.index} °C" in html
    assert "unhealthy" in html and "XID 79" in html and "drained" in html

    with django_assert_max_num_queries(14):
        partial = browser.get(f"/nodes/{node}/", headers={"HX-Request": "true"})
    assert partial.status_code == 200 and b"<html" not in partial.content and b"XID 79" in partial.content


def test_node_page_needs_a_login_and_a_real_node(world: World, browser: Client) -> None:
    assert Client().get("/nodes/n1/").status_code == 302
    assert browser.get("/nodes/nope/").status_code == 404


def test_api_lists_gpus_with_latest_sample_health_and_risk(world: World, api, django_assert_max_num_queries) -> None:  # noqa: ANN001
    post_batch(world, "n1", [sample("GPU-n1-0", gpu_util=77.0)], [xid("GPU-n1-1", 95)])
    GpuRisk.objects.create(gpu=Gpu.objects.get(uuid="GPU-n1-0"), risk=0.12345, scored_at=timezone.now())
    with django_assert_max_num_queries(6):
        response = api.get("/api/v1/telemetry/gpus/", {"node": "n1"})
    assert response.status_code == 200
    rows = {r["uuid"]: r for r in response.json()["results"]}
    assert set(rows) == {f"GPU-n1-{i}" for i in range(4)}
    assert rows["GPU-n1-0"]["latest"]["gpu_util"] == 77.0 and rows["GPU-n1-0"]["risk"] == 0.1235
    assert rows["GPU-n1-1"]["health"] == "unhealthy" and rows["GPU-n1-1"]["latest"] is None
    unhealthy = api.get("/api/v1/telemetry/gpus/", {"health": "unhealthy"}).json()["results"]
    assert [r["uuid"] for r in unhealthy] == ["GPU-n1-1"]


def test_api_lists_alerts(world: World, api) -> None:  # noqa: ANN001
    post_batch(world, "n2", [], [xid("GPU-n2-2", 79)])
    (alert,) = api.get("/api/v1/telemetry/alerts/", {"active": "true"}).json()["results"]
    assert alert["severity"] == "critical" and alert["gpu"] == "GPU-n2-2" and alert["node"] == "n2"
    assert api.get("/api/v1/telemetry/alerts/", {"active": "false"}).json()["results"] == []
    assert Client().get("/api/v1/telemetry/alerts/").status_code in (401, 403)
