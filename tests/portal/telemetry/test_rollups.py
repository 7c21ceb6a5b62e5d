"""Rollups, retention and the CSV export, on small hand-made data whose answers are known. Ref: #4"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest
from django.core.management import call_command
from django.utils import timezone

from portal.nodes.models import Gpu
from portal.telemetry.models import Rollup, RollupPeriod, Sample
from portal.telemetry.services.health import gpu_mark_unhealthy
from portal.telemetry.services.rollups import rollup_hours, rollup_minutes, telemetry_prune, telemetry_rollup
from telemetry.csvio import read_labels, read_telemetry
from telemetry.health import Finding, HealthCause, Verdict
from telemetry.schema import COLUMNS
from tests.fixtures import World
from tests.portal.telemetry.helpers import hourly_history, utc


def _raw(gpu: Gpu, at, **values) -> Sample:  # noqa: ANN001
    return Sample(gpu=gpu, ts=at, **values)


@pytest.fixture
def hand_made(world: World) -> Gpu:
    gpu = Gpu.objects.get(uuid="GPU-n1-0")
    t = utc(2026, 3, 1, 10, 0)
    Sample.objects.bulk_create(
        [
            _raw(gpu, t, gpu_util=10.0, temperature_c=50.0, throttle_reasons=0x1, xid=13, ecc_corrected_total=5),
            _raw(
                gpu,
                t + timedelta(seconds=20),
                gpu_util=20.0,
                temperature_c=70.0,
                throttle_reasons=0x4,
                xid=79,
                ecc_corrected_total=7,
            ),
            _raw(gpu, t + timedelta(seconds=40), gpu_util=60.0, temperature_c=60.0, xid=13, ecc_corrected_total=9),
            _raw(gpu, t + timedelta(seconds=70), gpu_util=90.0, temperature_c=40.0, ecc_corrected_total=11),
            _raw(gpu, t + timedelta(seconds=80), lost=True),  # a lost GPU reports nothing else
            _raw(gpu, t + timedelta(hours=1), gpu_util=0.0),  # the next hour
        ]
    )
    return gpu


def test_minute_rollups_take_means_maxima_last_counters_or_of_throttle_and_the_worst_xid(hand_made: Gpu) -> None:
    assert rollup_minutes(start=utc(2026, 3, 1, 10, 0, 30), end=utc(2026, 3, 1, 10, 2)) == 2
    first, second = Rollup.objects.filter(period=RollupPeriod.MINUTE).order_by("bucket")
    assert first.bucket == utc(2026, 3, 1, 10, 0)  # a start inside a bucket rebuilds the whole bucket
    assert (first.samples, first.gpu_util, first.gpu_util_max, first.temperature_max) == (3, 30.0, 60.0, 70.0)
    assert (first.throttle_reasons, first.xid, first.ecc_corrected_total) == (0x5, 79, 9)
    assert (second.samples, second.lost_samples, second.gpu_util, second.throttle_reasons) == (2, 1, 90.0, None)


def test_hour_rollups_weight_minutes_by_samples_and_are_idempotent(hand_made: Gpu) -> None:
    for _ in range(2):
        rollup_minutes(start=utc(2026, 3, 1, 10), end=utc(2026, 3, 1, 12))
        assert rollup_hours(start=utc(2026, 3, 1, 10), end=utc(2026, 3, 1, 12)) == 2
    assert Rollup.objects.filter(period=RollupPeriod.MINUTE).count() == 3
    hour = Rollup.objects.get(period=RollupPeriod.HOUR, bucket=utc(2026, 3, 1, 10))
    assert hour.samples == 5 and hour.lost_samples == 1
    assert hour.gpu_util == pytest.approx((10 + 20 + 60 + 90) / 4)  # minute means weighted by reporting samples
    assert (hour.gpu_util_max, hour.xid, hour.ecc_corrected_total, hour.throttle_reasons) == (90.0, 79, 11, 0x5)


def test_the_periodic_rollup_covers_recent_minutes(world: World) -> None:
    gpu = Gpu.objects.get(uuid="GPU-n1-1")
    now = timezone.now()
    Sample.objects.create(gpu=gpu, ts=now - timedelta(seconds=30), gpu_util=40.0)
    written = telemetry_rollup(now=now)
    assert written["minute"] >= 1 and written["hour"] >= 1
    assert Rollup.objects.get(period=RollupPeriod.HOUR, gpu=gpu).gpu_util == 40.0


def test_prune_keeps_the_retention_window(world: World, settings) -> None:  # noqa: ANN001
    settings.CORRAL_SAMPLE_RETENTION_DAYS = 7
    gpu = Gpu.objects.get(uuid="GPU-n1-0")
    now = timezone.now()
    Sample.objects.bulk_create([_raw(gpu, now - timedelta(days=d), gpu_util=1.0) for d in (1, 6, 8, 30)])
    Rollup.objects.create(period=RollupPeriod.MINUTE, gpu=gpu, bucket=now - timedelta(days=40), samples=1)
    Rollup.objects.create(period=RollupPeriod.HOUR, gpu=gpu, bucket=now - timedelta(days=40), samples=1)
    deleted = telemetry_prune(now=now)
    assert deleted == {"samples": 2, "minute_rollups": 1, "hour_rollups": 0}
    assert Sample.objects.count() == 2


def test_export_writes_the_documented_schema(world: World, tmp_path: Path) -> None:
    now = timezone.now()
    for uuid in ("GPU-n1-0", "GPU-n2-0"):
        hourly_history(Gpu.objects.get(uuid=uuid), hours=5, now=now)
    bad = Gpu.objects.get(uuid="GPU-n1-0")
    verdict = Verdict(bad.uuid, (Finding(HealthCause.FATAL_XID, "fatal XID 79", now.timestamp()),))
    gpu_mark_unhealthy(gpu_id=bad.pk, verdict=verdict, xid=79)
    call_command("telemetry_export", out=str(tmp_path), node="n1")
    header = (tmp_path / "telemetry.csv").read_text().splitlines()[0]
    assert tuple(header.split(",")) == COLUMNS
    table = read_telemetry(tmp_path / "telemetry.csv")
    assert len(table) == 4 and table.gpu_names == ("GPU-n1-0",)  # complete hours of n1 only
    assert set(table.column("temperature_c")) == {55.0}
    (label,) = read_labels(tmp_path / "labels.csv")
    assert (label.gpu_uuid, label.cause) == ("GPU-n1-0", "xid_79")
    assert label.failed_at == pytest.approx(now.timestamp(), abs=1)
