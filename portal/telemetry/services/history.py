"""This site's GPU history in the terms of the telemetry CSV schema: the hourly rollups as rows, the drains as failure
labels, and their export as telemetry.csv and labels.csv (what the predictor reads and ``telemetry_export`` writes).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from datetime import datetime, timedelta
from pathlib import Path

from django.utils import timezone

from portal.telemetry.models import GpuHealthEvent, HealthEventKind, Rollup, RollupPeriod
from portal.telemetry.services._shared import _epoch
from portal.telemetry.services.rollups import telemetry_rollup
from telemetry.fields import LAST_FIELDS, MEAN_FIELDS
from telemetry.schema import FailureLabel, TelemetryRow


def hourly_rows(
    *,
    since: datetime | None = None,
    until: datetime | None = None,
    node: str | None = None,
    gpu_ids: Iterable[int] | None = None,
) -> Iterator[TelemetryRow]:
    """The 1-hour rollups as :class:`TelemetryRow` s (one GPU over one hour, stamped at the hour's end), ordered by
    GPU then time: what the CSV export writes and what the predictor reads. Streams; constant memory."""
    rows = Rollup.objects.filter(period=RollupPeriod.HOUR)
    if since is not None:
        rows = rows.filter(bucket__gte=since - timedelta(hours=1))
    if until is not None:
        rows = rows.filter(bucket__lte=until - timedelta(hours=1))
    if node:
        rows = rows.filter(gpu__node__name=node)
    if gpu_ids is not None:
        rows = rows.filter(gpu_id__in=list(gpu_ids))
    fields = ("bucket", "gpu__node__name", "gpu__uuid", *MEAN_FIELDS, *LAST_FIELDS, "throttle_reasons", "xid")
    for values in rows.order_by("gpu_id", "bucket").values_list(*fields).iterator(chunk_size=20_000):
        v = dict(zip(fields, values, strict=True))
        yield TelemetryRow(
            timestamp=_epoch(v["bucket"]) + RollupPeriod.HOUR,
            node=v["gpu__node__name"],
            gpu_uuid=v["gpu__uuid"],
            gpu_util=v["gpu_util"],
            mem_used_mb=v["mem_used_mb"],
            mem_total_mb=v["mem_total_mb"],
            temperature_c=v["temperature_c"],
            power_w=v["power_w"],
            sm_clock_mhz=v["sm_clock_mhz"],
            ecc_corrected_total=v["ecc_corrected_total"],
            ecc_uncorrected_total=v["ecc_uncorrected_total"],
            retired_pages=v["retired_pages"],
            xid=v["xid"] or 0,
            throttle_reasons=v["throttle_reasons"],
            remapped_rows=v["remapped_rows"],
            pcie_replay=v["pcie_replay"],
        )


def failure_labels(*, since: datetime | None = None, node: str | None = None) -> list[FailureLabel]:
    """Every time a GPU was drained as unhealthy, as labels.csv rows (``cause`` is ``xid_<n>`` for a fatal XID)."""
    events = GpuHealthEvent.objects.filter(kind=HealthEventKind.UNHEALTHY)
    if since is not None:
        events = events.filter(at__gte=since)
    if node:
        events = events.filter(gpu__node__name=node)
    return [
        FailureLabel(gpu_uuid=uuid, failed_at=_epoch(evidence or at), cause=f"xid_{xid}" if xid else cause)
        for uuid, evidence, at, xid, cause in events.order_by("at").values_list(
            "gpu__uuid", "evidence_at", "at", "xid", "cause"
        )
    ]


def export_history(*, out_dir: str, since: datetime | None = None, node: str | None = None) -> tuple[int, int]:
    """Write ``telemetry.csv`` and ``labels.csv`` (the documented schema) from stored history into ``out_dir``,
    after bringing the rollups up to date. Returns (telemetry rows, labels)."""
    from telemetry.csvio import write_labels, write_telemetry_rows

    telemetry_rollup()
    now = timezone.now()
    target = Path(out_dir)
    target.mkdir(parents=True, exist_ok=True)
    rows = write_telemetry_rows(target / "telemetry.csv", hourly_rows(since=since, until=now, node=node))
    labels = write_labels(target / "labels.csv", failure_labels(since=since, node=node))
    return rows, labels
