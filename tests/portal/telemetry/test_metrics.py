"""GET /metrics: dcgm-exporter's names and labels for the GPUs, Corral's own series, in a fixed number of queries.
Ref: #4"""

from __future__ import annotations

from django.test import Client
from django.utils import timezone
from prometheus_client.parser import text_string_to_metric_families

from portal.nodes.models import Gpu
from portal.telemetry.models import GpuRisk
from tests.fixtures import World
from tests.portal.telemetry.helpers import post_batch, running_job, sample, xid

DCGM_REQUIRED = (
    "DCGM_FI_DEV_GPU_UTIL",
    "DCGM_FI_DEV_FB_USED",
    "DCGM_FI_DEV_FB_FREE",
    "DCGM_FI_DEV_GPU_TEMP",
    "DCGM_FI_DEV_POWER_USAGE",
    "DCGM_FI_DEV_SM_CLOCK",
    "DCGM_FI_DEV_XID_ERRORS",
    "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL",
    "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL",
)


def _scrape(client: Client | None = None, **headers: str) -> dict[str, list]:
    response = (client or Client()).get("/metrics", headers=headers)
    assert response.status_code == 200, response.content
    assert response["Content-Type"].startswith("text/plain")
    families = text_string_to_metric_families(response.content.decode())
    return {f.name: f.samples for f in families}


def test_gpus_appear_under_dcgm_names_with_dcgm_labels_and_their_job(
    world: World,
    django_assert_max_num_queries,  # noqa: ANN001
) -> None:
    job, _, (held,) = running_job(world)
    post_batch(
        world,
        held.node.name,
        [sample(f"GPU-{held.node.name}-{i}", gpu_util=11.0 * i) for i in range(4)],
        [xid(held.uuid, 13)],
    )
    GpuRisk.objects.create(gpu=held, risk=0.25, scored_at=timezone.now())
    with django_assert_max_num_queries(9):  # a fixed number, whatever the cluster's size
        metrics = _scrape()
    for name in DCGM_REQUIRED:
        assert name in metrics, name
    by_uuid = {s.labels["UUID"]: s for s in metrics["DCGM_FI_DEV_GPU_UTIL"]}
    assert set(by_uuid) == {f"GPU-{held.node.name}-{i}" for i in range(4)}
    mine = by_uuid[held.uuid]
    assert mine.labels["gpu"] == str(held.index) and mine.labels["device"] == f"nvidia{held.index}"
    assert mine.labels["Hostname"] == held.node.name and mine.labels["modelName"] == "Fake"
    assert mine.labels["hpc_job"] == str(job.pk) and mine.labels["namespace"] == "lab"
    assert mine.value == 11.0 * held.index
    free = {s.labels["UUID"]: s.value for s in metrics["DCGM_FI_DEV_FB_FREE"]}
    assert free[held.uuid] == 600
    xids = {s.labels["UUID"]: s.value for s in metrics["DCGM_FI_DEV_XID_ERRORS"]}
    assert xids[held.uuid] == 13

    jobs = {s.labels["state"]: s.value for s in metrics["corral_jobs"]}
    assert jobs["running"] == 1 and jobs["pending"] == 0
    assert "corral_pending_jobs" in metrics
    assert metrics["corral_scheduler_round_duration_seconds"][0].value >= 0
    (risk,) = metrics["corral_gpu_failure_risk"]
    assert risk.labels["UUID"] == held.uuid and risk.value == 0.25
    health = {(s.labels["UUID"], s.labels["health"]): s.value for s in metrics["corral_gpu_health"]}
    assert health[(held.uuid, "healthy")] == 1 and health[(held.uuid, "unhealthy")] == 0
    stored = {
        s.labels["outcome"]: s.value
        for s in metrics["corral_telemetry_samples"]
        if s.labels["Hostname"] == held.node.name
    }
    assert stored["stored"] == 4


def test_stale_gpus_drop_out_like_a_dead_exporter(world: World, settings) -> None:  # noqa: ANN001
    settings.CORRAL_METRICS_STALE_SECONDS = 60
    post_batch(world, "n1", [sample("GPU-n1-0", timezone.now().timestamp() - 600), sample("GPU-n1-1")])
    metrics = _scrape()
    assert {s.labels["UUID"] for s in metrics["DCGM_FI_DEV_GPU_UTIL"]} == {"GPU-n1-1"}
    seen = {s.labels["UUID"] for s in metrics["corral_gpu_last_sample_timestamp_seconds"]}
    assert seen == {"GPU-n1-0", "GPU-n1-1"}


def test_metrics_can_require_a_bearer_token(world: World, settings) -> None:  # noqa: ANN001
    settings.CORRAL_METRICS_TOKEN = "s3cret"
    client = Client()
    assert client.get("/metrics").status_code == 401
    assert client.get("/metrics", headers={"Authorization": "Bearer nope"}).status_code == 401
    assert "corral_jobs" in _scrape(client, Authorization="Bearer s3cret")
    assert Gpu.objects.count() == 8
