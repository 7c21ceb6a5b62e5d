"""Rollups of raw samples into 1-minute and 1-hour buckets, and retention (pruning raw samples and old rollups).

A rollup keeps each reading by its kind in :mod:`telemetry.fields` (the CSV schema's rule): gauges' means, the last
value of counters, the OR of the throttle bits, the most serious XID. Every bucket is rebuilt whole and upserted, so
each function here is safe to run twice or concurrently.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.utils import timezone

from portal.telemetry.models import NodeTelemetry, Rollup, RollupPeriod, Sample
from portal.telemetry.services._shared import _dt, _epoch, _setting
from telemetry.fields import LAST_FIELDS, MEAN_FIELDS, ROLLED_UP
from telemetry.xid import XidClass, classify

#: Raw samples deleted per transaction when pruning.
PRUNE_CHUNK = 50_000
_XID_RANK = {XidClass.APPLICATION: 1, XidClass.UNKNOWN: 2, XidClass.PRECURSOR: 3, XidClass.FATAL: 4}
#: A rollup's columns: its counts, the maxima it keeps beside two means, and the readings it keeps.
_ROLLUP_FIELDS = ("samples", "lost_samples", "gpu_util_max", "temperature_max", *ROLLED_UP)


def most_serious_xid(current: int, new: int) -> int:
    """The XID a rollup keeps (the schema's rule): fatal > precursor > unknown > application; the later one wins a
    tie, so callers feed XIDs in time order."""
    if not new:
        return current
    if not current:
        return new
    return new if _XID_RANK[classify(new)] >= _XID_RANK[classify(current)] else current


@dataclass(slots=True)
class _Bucket:
    """Running aggregate of one GPU over one bucket, fed in time order."""

    samples: int = 0
    lost: int = 0
    sums: dict[str, float] = field(default_factory=dict)
    weights: dict[str, float] = field(default_factory=dict)
    maxes: dict[str, float] = field(default_factory=dict)
    last: dict[str, int] = field(default_factory=dict)
    throttle: int | None = None
    xid: int = 0

    def add(
        self,
        *,
        samples: int,
        lost: int,
        weight: float,
        gauges: Mapping[str, float | None],
        maxes: Mapping[str, float | None],
        counters: Mapping[str, int | float | None],
        throttle: int | None,
        xid: int,
    ) -> None:
        self.samples += samples
        self.lost += lost
        for name, value in gauges.items():
            if value is not None:
                self.sums[name] = self.sums.get(name, 0.0) + value * weight
                self.weights[name] = self.weights.get(name, 0.0) + weight
        for name, value in maxes.items():
            if value is not None:
                self.maxes[name] = max(self.maxes.get(name, value), value)
        for name, value in counters.items():
            if value is not None:
                self.last[name] = int(value)
        if throttle is not None:
            self.throttle = (self.throttle or 0) | int(throttle)
        self.xid = most_serious_xid(self.xid, int(xid or 0))

    def values(self) -> dict[str, object]:
        means = {n: (self.sums[n] / self.weights[n] if self.weights.get(n) else None) for n in MEAN_FIELDS}
        return {
            "samples": self.samples,
            "lost_samples": self.lost,
            **means,
            "gpu_util_max": self.maxes.get("gpu_util"),
            "temperature_max": self.maxes.get("temperature_c"),
            "throttle_reasons": self.throttle,
            **{n: self.last.get(n) for n in LAST_FIELDS},
            "xid": self.xid,
        }


def _floor(value: datetime, period: int) -> datetime:
    return _dt(int(_epoch(value) // period * period))


def _write_rollups(period: int, buckets: Mapping[tuple[int, datetime], _Bucket]) -> int:
    rows = [Rollup(period=period, gpu_id=g, bucket=b, **acc.values()) for (g, b), acc in buckets.items()]
    for start in range(0, len(rows), 2000):
        Rollup.objects.bulk_create(
            rows[start : start + 2000],
            update_conflicts=True,
            unique_fields=["period", "gpu", "bucket"],
            update_fields=list(_ROLLUP_FIELDS),
        )
    return len(rows)


def rollup_minutes(*, start: datetime, end: datetime) -> int:
    """Recompute the 1-minute rollups of every bucket from the one holding ``start`` up to ``end`` from raw
    samples. Idempotent: a bucket is always rebuilt from all of its samples. Returns the buckets written."""
    start = _floor(start, RollupPeriod.MINUTE)
    buckets: dict[tuple[int, datetime], _Bucket] = {}
    rows = (
        Sample.objects.filter(ts__gte=start, ts__lt=end)
        .order_by("gpu_id", "ts")
        .values_list("gpu_id", "ts", "lost", "xid", "throttle_reasons", *MEAN_FIELDS, *LAST_FIELDS)
        .iterator(chunk_size=20_000)
    )
    n_g = len(MEAN_FIELDS)
    for gpu_id, ts, lost, xid, throttle, *rest in rows:
        gauges = dict(zip(MEAN_FIELDS, rest[:n_g], strict=True))
        key = (gpu_id, _floor(ts, RollupPeriod.MINUTE))
        acc = buckets.get(key)
        if acc is None:
            acc = buckets[key] = _Bucket()
        acc.add(
            samples=1,
            lost=int(bool(lost)),
            weight=1.0,
            gauges=gauges,
            maxes={"gpu_util": gauges["gpu_util"], "temperature_c": gauges["temperature_c"]},
            counters=dict(zip(LAST_FIELDS, rest[n_g:], strict=True)),
            throttle=throttle,
            xid=xid,
        )
    return _write_rollups(RollupPeriod.MINUTE, buckets)


def rollup_hours(*, start: datetime, end: datetime) -> int:
    """Recompute the 1-hour rollups from the 1-minute ones (means weighted by their reporting samples), from the hour
    holding ``start`` up to ``end``. Idempotent. Returns the buckets written."""
    start = _floor(start, RollupPeriod.HOUR)
    buckets: dict[tuple[int, datetime], _Bucket] = {}
    rows = (
        Rollup.objects.filter(period=RollupPeriod.MINUTE, bucket__gte=start, bucket__lt=end)
        .order_by("gpu_id", "bucket")
        .values_list("gpu_id", "bucket", *_ROLLUP_FIELDS)
        .iterator(chunk_size=20_000)
    )
    for gpu_id, bucket, *rest in rows:
        v = dict(zip(_ROLLUP_FIELDS, rest, strict=True))
        key = (gpu_id, _floor(bucket, RollupPeriod.HOUR))
        acc = buckets.get(key)
        if acc is None:
            acc = buckets[key] = _Bucket()
        acc.add(
            samples=v["samples"],
            lost=v["lost_samples"],
            weight=max(1, v["samples"] - v["lost_samples"]),  # a lost sample reports no gauge at all
            gauges={n: v[n] for n in MEAN_FIELDS},
            maxes={"gpu_util": v["gpu_util_max"], "temperature_c": v["temperature_max"]},
            counters={n: v[n] for n in LAST_FIELDS},
            throttle=v["throttle_reasons"],
            xid=v["xid"],
        )
    return _write_rollups(RollupPeriod.HOUR, buckets)


def telemetry_rollup(*, now: datetime | None = None, lookback: timedelta = timedelta(minutes=3)) -> dict[str, int]:
    """Bring both rollup levels up to date: the last few minutes, plus any older range a node back-filled since
    the previous run (an agent that drained a backlog after an outage). Safe to run twice or concurrently:
    every bucket is rebuilt whole and upserted."""
    now = now or timezone.now()
    start = now - lookback
    backfills = list(NodeTelemetry.objects.filter(backfill_from__isnull=False).values_list("pk", "backfill_from"))
    for _, since in backfills:
        assert since is not None  # read with backfill_from__isnull=False
        start = min(start, since)
    start = max(start, now - timedelta(days=_retention_days()))
    written = {"minute": rollup_minutes(start=start, end=now), "hour": rollup_hours(start=start, end=now)}
    for node_id, since in backfills:
        # Compare-and-clear: a batch that back-filled again meanwhile keeps its (newer) mark for the next run.
        NodeTelemetry.objects.filter(pk=node_id, backfill_from=since).update(backfill_from=None)
    return written


# -- retention ----------------------------------------------------------------------------------------------------


def _retention_days() -> float:
    return float(_setting("CORRAL_SAMPLE_RETENTION_DAYS", 7))


def telemetry_prune(*, now: datetime | None = None) -> dict[str, int]:
    """Delete raw samples past ``CORRAL_SAMPLE_RETENTION_DAYS`` (default 7) and rollups past their own retention
    (``CORRAL_ROLLUP_MINUTE_RETENTION_DAYS``, default 30; ``CORRAL_ROLLUP_HOUR_RETENTION_DAYS``, default 400: the
    hourly history is what the predictor trains on and what ``telemetry_export`` writes).

    Raw samples go in chunks, each its own transaction, so pruning a large backlog never holds one huge lock.
    """
    now = now or timezone.now()
    deleted = {"samples": 0, "minute_rollups": 0, "hour_rollups": 0}
    cutoff = now - timedelta(days=_retention_days())
    while True:
        ids = list(Sample.objects.filter(ts__lt=cutoff).values_list("id", flat=True)[:PRUNE_CHUNK])
        if not ids:
            break
        deleted["samples"] += Sample.objects.filter(id__in=ids).delete()[0]
    for key, period, setting, default in (
        ("minute_rollups", RollupPeriod.MINUTE, "CORRAL_ROLLUP_MINUTE_RETENTION_DAYS", 30),
        ("hour_rollups", RollupPeriod.HOUR, "CORRAL_ROLLUP_HOUR_RETENTION_DAYS", 400),
    ):
        old = now - timedelta(days=float(_setting(setting, default)))
        deleted[key] = Rollup.objects.filter(period=period, bucket__lt=old).delete()[0]
    return deleted
