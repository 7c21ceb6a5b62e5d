"""Builders shared by the telemetry Django tests: wire-format samples, batches over HTTP, placed jobs."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np
from rest_framework.response import Response

from portal.jobs.models import Allocation, Job, JobTask
from portal.jobs.services import job_submit
from portal.nodes.models import Gpu
from portal.nodes.services import TaskReport, node_heartbeat
from portal.scheduler.services import scheduling_round
from portal.telemetry.models import Rollup, RollupPeriod
from telemetry.predict.artifact import ModelArtifact, make_header
from telemetry.predict.estimators import ModelKind
from telemetry.predict.features import feature_names
from telemetry.sample import GpuSample, XidEvent
from tests.fixtures import World, agent_client


def sample(uuid: str, ts: float | None = None, **fields: Any) -> dict[str, Any]:
    """A healthy H100-like reading in wire form; ``fields`` override any value."""
    index = int(uuid.rsplit("-", 1)[1])
    values: dict[str, Any] = {
        "gpu_util": 50.0,
        "mem_used_mb": 400,
        "mem_total_mb": 1000,
        "temperature_c": 55.0,
        "power_w": 300.0,
        "sm_clock_mhz": 1980,
        "throttle_reasons": 0,
        "ecc_sbe_volatile": 0,
        "ecc_dbe_volatile": 0,
        "ecc_corrected_total": 3,
        "ecc_uncorrected_total": 0,
        "remapped_rows": 0,
        "remapped_rows_pending": False,
        "remapped_rows_failed": False,
        "pcie_replay": 0,
    }
    values.update(fields)
    return GpuSample(gpu_uuid=uuid, index=index, timestamp=time.time() if ts is None else ts, **values).to_dict()


def xid(uuid: str, code: int, ts: float | None = None) -> dict[str, Any]:
    return XidEvent(gpu_uuid=uuid, xid=code, timestamp=time.time() if ts is None else ts).to_dict()


def post_batch(
    world: World, node: str, samples: list[dict[str, Any]], events: list[dict[str, Any]] = (), dropped: int = 0
) -> Response:
    body = {"samples": samples, "xid_events": list(events), "dropped": dropped}
    return agent_client(world.tokens[node]).post("/api/v1/agent/samples/", body, format="json")


def running_job(world: World, gpus: int = 1) -> tuple[Job, JobTask, list[Gpu]]:
    """A job placed by a real scheduling round whose task the agent reported running."""
    job = job_submit(user=world.alice, command="python train.py", gpus=gpus)
    scheduling_round()
    job.refresh_from_db()
    task = JobTask.objects.select_related("node").get(job=job, attempt=job.attempt, rank=0)
    node_heartbeat(node=task.node, reports=[TaskReport(job.pk, job.attempt, 0, "running", pid=4242)])
    task.refresh_from_db()
    held = [a.gpu for a in Allocation.objects.filter(job=job, attempt=job.attempt).select_related("gpu", "node")]
    return job, task, held


def hour_floor(now: datetime) -> datetime:
    return now.replace(minute=0, second=0, microsecond=0)


def hourly_history(gpu: Gpu, *, hours: int, now: datetime, **fields: Any) -> None:
    """``hours`` 1-hour rollups ending with the current hour, as the rollup task would have written them."""
    base = hour_floor(now)
    values = {
        "samples": 360,
        "gpu_util": 60.0,
        "temperature_c": 55.0,
        "power_w": 350.0,
        "sm_clock_mhz": 1900.0,
        "mem_used_mb": 400.0,
        "mem_total_mb": 1000,
        "ecc_corrected_total": 2,
        "ecc_uncorrected_total": 0,
        "throttle_reasons": 0,
        "xid": 0,
    }
    values.update(fields)
    Rollup.objects.bulk_create(
        Rollup(period=RollupPeriod.HOUR, gpu=gpu, bucket=base - timedelta(hours=k), **values) for k in range(hours)
    )


class HotScorer:
    """A stand-in model: risk 0.9 for a GPU whose 6-hour mean temperature is above 80 C, else 0.1."""

    def score(self, x: np.ndarray) -> np.ndarray:
        column = feature_names().index("temp_mean_6h")
        return np.where(x[:, column] > 80, 0.9, 0.1)


def stub_artifact(threshold: float = 0.5, target_met: bool = True) -> bytes:
    scorer = HotScorer()
    header = make_header(
        scorer,
        kind=ModelKind.GBDT,
        created_at=0.0,
        horizon_s=86_400.0,
        threshold=threshold,
        train_start=0.0,
        train_end=0.0,
        rows=0,
        positive_rows=0,
        failures=0,
        metrics={"target_met": target_met},
    )
    return ModelArtifact(header=header, model=scorer).to_bytes()


def utc(*args: int) -> datetime:
    return datetime(*args, tzinfo=UTC)
