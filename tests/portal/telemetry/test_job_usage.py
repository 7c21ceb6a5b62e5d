"""A job's GPUs on its page: per-GPU utilization and memory sparklines from the minute rollups, and the idle-GPU
warning ("holds 2 GPUs and used 3 % of them over the last 30 min") when the rule in ``telemetry.idle`` says so.
Ref: #18 (item 4)"""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest
from django.test import Client
from django.utils import timezone

from portal.jobs.models import Allocation, Job, JobTask
from portal.jobs.services import job_submit
from portal.nodes.models import Gpu
from portal.nodes.services import TaskReport, node_heartbeat
from portal.scheduler.services import scheduling_round
from portal.telemetry.job_usage import idle_jobs, job_gpu_series, job_idle, sparkline_points
from portal.telemetry.models import Rollup, RollupPeriod
from tests.fixtures import World
from tests.portal.telemetry.helpers import running_job

M = timedelta(minutes=1)
HTMX = {"HTTP_HX_REQUEST": "true"}


def _minute_floor(at: datetime) -> datetime:
    return at.replace(second=0, microsecond=0)


def _held_since(job: Job, since: datetime) -> None:
    Allocation.objects.filter(job=job).update(created_at=since)


def _minutes(gpu: Gpu, *, start: datetime, utils: list[float | None], mem: float = 400.0) -> None:
    Rollup.objects.bulk_create(
        Rollup(
            period=RollupPeriod.MINUTE,
            gpu=gpu,
            bucket=start + k * M,
            samples=6,
            gpu_util=util,
            mem_used_mb=mem,
            mem_total_mb=1000.0,
        )
        for k, util in enumerate(utils)
    )


def _running_jobs(world: World, *sizes: int) -> list[tuple[Job, list[Gpu]]]:
    """Jobs of ``sizes`` GPUs placed by one real round, every task reported running by its node (a node reports
    all it runs in each heartbeat: one job at a time would leave the others unreported, hence lost)."""
    jobs = [job_submit(user=world.alice, command="python train.py", gpus=n) for n in sizes]
    scheduling_round()
    tasks = list(JobTask.objects.filter(job__in=jobs).select_related("node"))
    for node in {t.node for t in tasks}:
        reports = [TaskReport(t.job_id, t.attempt, t.rank, "running", pid=1000 + t.pk) for t in tasks if t.node == node]
        node_heartbeat(node=node, reports=reports)
    for job in jobs:
        job.refresh_from_db()
    return [(job, [a.gpu for a in Allocation.objects.filter(job=job).select_related("gpu__node")]) for job in jobs]


@pytest.fixture
def idle_job(world: World) -> tuple[Job, list[Gpu]]:
    """A 2-GPU job that has held its GPUs for 40 minutes at 3 % utilization."""
    job, _, gpus = running_job(world, gpus=2)
    now = timezone.now()
    _held_since(job, now - 40 * M)
    for gpu in gpus:
        _minutes(gpu, start=_minute_floor(now - 40 * M), utils=[3.0] * 41)
    return job, gpus


def test_an_idle_job_is_told_so_on_its_page(world: World, client: Client, idle_job: tuple[Job, list[Gpu]]) -> None:
    job, _ = idle_job
    verdict = job_idle(job=job, now=timezone.now())
    assert verdict is not None and verdict.text == "holds 2 GPUs and used 3 % of them over the last 30 min"
    assert client.login(username="alice", password="pw")
    page = client.get(f"/jobs/{job.pk}/").content.decode()
    assert 'data-testid="job-idle-warning"' in page
    assert "holds 2 GPUs and used 3 % of them over the last 30 min" in page
    part = client.get(f"/jobs/{job.pk}/?part=gpus", **HTMX).content.decode()
    assert "job-idle-warning" in part and part.count('data-testid="job-gpu-row"') == 2


def test_a_busy_job_or_a_new_one_is_not_idle(world: World, settings) -> None:  # noqa: ANN001
    busy, _, busy_gpus = running_job(world, gpus=1)
    now = timezone.now()
    _held_since(busy, now - 40 * M)
    _minutes(busy_gpus[0], start=_minute_floor(now - 40 * M), utils=[80.0] * 41)
    assert job_idle(job=busy, now=now) is None
    settings.CORRAL_IDLE_GPU_UTIL = 90.0  # the threshold is read at call time
    assert job_idle(job=busy, now=now) is not None

    settings.CORRAL_IDLE_GPU_UTIL = 10.0
    fresh, _, fresh_gpus = running_job(world, gpus=1)  # 5 minutes in: too little of the window to judge
    _held_since(fresh, now - 5 * M)
    _minutes(fresh_gpus[0], start=_minute_floor(now - 5 * M), utils=[0.0] * 6)
    assert job_idle(job=fresh, now=now) is None


def test_unmeasured_time_does_not_make_a_job_idle(world: World) -> None:
    job, _, gpus = running_job(world, gpus=1)
    now = timezone.now()
    _held_since(job, now - 40 * M)
    # Ten readings of 0 % in the last half hour, the rest missing: a third of the window measured.
    _minutes(gpus[0], start=_minute_floor(now - 10 * M), utils=[0.0] * 10)
    assert job_idle(job=job, now=now) is None


def test_the_dashboard_list_and_the_page_use_the_same_rule(world: World) -> None:
    (job, gpus), (busy, busy_gpus) = _running_jobs(world, 2, 1)
    now = timezone.now()
    for held, readings, util in ((job, gpus, 3.0), (busy, busy_gpus, 70.0)):
        _held_since(held, now - 40 * M)
        for gpu in readings:
            _minutes(gpu, start=_minute_floor(now - 40 * M), utils=[util] * 41)
    found = idle_jobs(jobs=Job.objects.all(), now=now)
    assert [(j.job_id, j.user, j.verdict.gpus) for j in found] == [(job.pk, "alice", 2)]
    assert found[0].verdict == job_idle(job=job, now=now)
    assert idle_jobs(jobs=Job.objects.visible_to(world.eve), now=now) == []


def test_each_gpu_has_its_series_over_the_run(world: World, client: Client) -> None:
    job, _, gpus = running_job(world, gpus=2)
    now = timezone.now()
    start = _minute_floor(now - 10 * M)
    _held_since(job, start)
    _minutes(gpus[0], start=start - 5 * M, utils=[99.0] * 5)  # before the job held it: not its readings
    _minutes(gpus[0], start=start, utils=[20.0, None, 60.0], mem=500.0)
    series = job_gpu_series(job=job, now=now)
    assert [(s.node, s.index) for s in series] == [(g.node.name, g.index) for g in gpus]
    first = series[0]
    assert (first.util, first.mean_util, first.last_util, first.peak_mem_mb) == ((20.0, None, 60.0), 40.0, 60.0, 500.0)
    assert series[1].util == () and series[1].mean_util is None
    assert client.login(username="alice", password="pw")
    page = client.get(f"/jobs/{job.pk}/").content.decode()
    assert page.count("<polyline") == 2  # utilization and memory of the GPU with readings
    assert "mean 40 %, last 60 %" in page and "peak 500 of 1000 MiB" in page and "no readings yet" in page


def test_sparkline_points_scale_and_skip_gaps() -> None:
    assert sparkline_points((0.0, None, 100.0), top=100.0) == "0.0,32.0 160.0,0.0"
    assert sparkline_points((50.0,), top=100.0) == "0.0,16.0 2.0,16.0"
    assert sparkline_points((), top=100.0) == "" and sparkline_points((None,), top=100.0) == ""
    assert sparkline_points((250.0,), top=100.0).startswith("0.0,0.0")  # clipped at the top
