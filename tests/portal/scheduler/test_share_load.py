"""The online client's measured load in the live share round (issue #17, dynamic SM allocation): telemetry the agent
sent for a shared GPU since its online client started decides how much compute an offline share beside it gets.
Through the real services: the ingest stores the samples, the round reads them. Ref: #17"""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import Any

import pytest
from django.utils import timezone
from pytest_django.fixtures import DjangoAssertNumQueries

from portal.jobs.models import Allocation, Job
from portal.jobs.services import job_submit
from portal.jobs.share_spec import ShareSpec
from portal.nodes.models import Gpu
from portal.scheduler.services import scheduling_round
from portal.telemetry.selectors import recent_gpu_util
from portal.telemetry.services.ingest import telemetry_ingest
from telemetry.sample import GpuSample
from tests.fixtures import World

GIB = 1 << 30


def _shared_gpu(world: World) -> Gpu:
    """n1's GPU 0, marked shared by an admin, with a 40 GiB card's memory."""
    Gpu.objects.filter(node=world.nodes[0], index=0).update(shared=True, memory_mb=40 * 1024)
    return Gpu.objects.select_related("node").get(node=world.nodes[0], index=0)


def _share(world: World, fraction: float, cls: str, memory_gib: int) -> Job:
    return job_submit(
        user=world.eve, command="python serve.py", gpus=1, share=ShareSpec(fraction, memory_gib * GIB, cls)
    )


def _report_util(gpu: Gpu, utils: list[float], *, at: float | None = None) -> None:
    """The agent's telemetry batch for ``gpu``: one sample a second ending at ``at`` (now by default)."""
    end = time.time() if at is None else at
    samples = [
        GpuSample(gpu_uuid=gpu.uuid, index=gpu.index, timestamp=end - (len(utils) - 1 - i), gpu_util=u)
        for i, u in enumerate(utils)
    ]
    result = telemetry_ingest(node=gpu.node, samples=samples, xid_events=[], dropped=0)
    assert result.accepted == len(samples)


def _offline_compute_beside_online(world: World, utils: list[float] | None) -> int:
    """Start a 0.9 online share, let the agent report ``utils`` for its GPU (None: nothing), then place a 0.2
    offline share next to it and return the compute percent it started with."""
    gpu = _shared_gpu(world)
    online = _share(world, 0.9, "online", 8)
    scheduling_round()
    assert Allocation.objects.get(job=online, released_at__isnull=True).gpu_id == gpu.pk
    if utils is not None:
        _report_util(gpu, utils)
    offline = _share(world, 0.2, "offline", 4)
    scheduling_round()
    alloc = Allocation.objects.get(job=offline, released_at__isnull=True)
    assert alloc.gpu_id == gpu.pk
    assert alloc.compute_percent is not None
    return alloc.compute_percent


def test_an_offline_share_gets_more_compute_beside_a_lightly_loaded_online_share(world: World) -> None:
    """Unmeasured, the 0.9 online share counts whole: 10 % is left. Measured at 10 % busy, it holds its load plus
    the 10 % headroom, and the offline share gets what the 5 % slowdown budget allows (17 % on the H100 fit)."""
    assert _offline_compute_beside_online(world, [8.0, 10.0, 12.0]) == 17


def test_without_a_reading_the_online_share_counts_as_its_whole_share(world: World) -> None:
    assert _offline_compute_beside_online(world, None) == 10


def test_a_busy_online_share_leaves_its_neighbours_no_more_than_unmeasured(world: World) -> None:
    assert _offline_compute_beside_online(world, [95.0, 97.0]) == 10


def test_readings_from_before_the_online_share_started_are_not_its_load(world: World) -> None:
    """An idle GPU before the online job started says nothing about the job: the round ignores those samples."""
    gpu = _shared_gpu(world)
    _report_util(gpu, [0.0, 0.0, 0.0], at=time.time() - 30)
    online = _share(world, 0.9, "online", 8)
    scheduling_round()
    assert Job.objects.get(pk=online.pk).state == "running"
    offline = _share(world, 0.2, "offline", 4)
    scheduling_round()
    assert Allocation.objects.get(job=offline, released_at__isnull=True).compute_percent == 10


def test_recent_gpu_util_reads_every_gpu_in_one_query(
    world: World, settings: Any, django_assert_num_queries: DjangoAssertNumQueries
) -> None:
    settings.CORRAL_SHARE_LOAD_WINDOW = 60
    gpus = list(Gpu.objects.select_related("node").filter(node=world.nodes[0]).order_by("index"))
    now = time.time()
    _report_util(gpus[0], [20.0, 40.0], at=now - 1)  # in the window
    _report_util(gpus[1], [90.0], at=now - 120)  # older than the window
    _report_util(gpus[2], [90.0, 10.0, 30.0], at=now - 1)  # the first is before its not_before
    # gpus[3]: no reading at all
    not_before = {gpus[2].pk: datetime.fromtimestamp(now - 2.5, tz=UTC)}
    ids = [g.pk for g in gpus[:4]]
    with django_assert_num_queries(1):
        util = recent_gpu_util(gpu_ids=ids, now=datetime.fromtimestamp(now, tz=UTC), not_before=not_before)
    assert util[gpus[0].pk] == pytest.approx(30.0)
    assert util[gpus[1].pk] is None
    assert util[gpus[2].pk] == pytest.approx(20.0)
    assert util[gpus[3].pk] is None
    with django_assert_num_queries(0):
        assert recent_gpu_util(gpu_ids=[], now=timezone.now()) == {}
    # A reading stamped after ``now`` (a round that began before the batch arrived) is not counted either.
    assert recent_gpu_util(gpu_ids=[gpus[0].pk], now=datetime.fromtimestamp(now - 10, tz=UTC)) == {gpus[0].pk: None}
