"""Ingest of agent telemetry batches: each batch is stored once (a retried POST stores nothing twice), then what the
health rules condemn is handed to :mod:`portal.telemetry.services.health`.

Lock order: the node's ``NodeTelemetry`` row serialises the storing of its batches; the health actions run after
that transaction commits, each in its own (and take their own locks, see that module), so a failing action never
loses the samples that triggered it.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from operator import attrgetter

from django.db import connection, transaction
from django.utils import timezone

from portal.nodes.models import Gpu, GpuHealth, Node
from portal.telemetry.models import LatestSample, NodeTelemetry, Sample, XidRecord
from portal.telemetry.services._shared import _dt, _epoch
from portal.telemetry.services.health import gpu_mark_unhealthy, jobs_reopen_for_xid
from telemetry.fields import METRIC_NAMES
from telemetry.health import Verdict, evaluate
from telemetry.sample import GpuSample, XidEvent
from telemetry.xid import FATAL_XIDS, classify

log = logging.getLogger(__name__)

#: A sample older than this when it arrives is late (an agent draining its backlog): its buckets are rolled up again.
LATE_AFTER = timedelta(seconds=120)
#: Samples stamped further in the future than this are refused: a wrong agent clock would otherwise make every
#: later, correct sample look like a duplicate.
MAX_CLOCK_AHEAD = timedelta(minutes=5)
#: How far back a GPU's first sample (no previous one stored) looks for the event its ``xid`` repeats.
SAMPLE_XID_LOOKBACK = timedelta(minutes=5)


@dataclass(frozen=True, slots=True)
class IngestResult:
    """What became of one agent batch. Every sample is counted in exactly one of the first three fields."""

    accepted: int  # new samples stored
    duplicates: int  # already stored (a retried POST whose first answer was lost)
    rejected: int  # for a GPU this node never registered, or stamped in the future
    xid_events: int  # new XID events recorded
    drained: tuple[str, ...] = ()  # GPU uuids this batch made unhealthy

    def as_dict(self) -> dict[str, object]:
        return {
            "accepted": self.accepted,
            "duplicates": self.duplicates,
            "rejected": self.rejected,
            "xid_events": self.xid_events,
            "drained": list(self.drained),
        }


@dataclass(slots=True)
class _Stored:
    accepted: int = 0
    duplicates: int = 0
    rejected: int = 0
    xid_events: int = 0
    unhealthy: list[tuple[int, Verdict, int | None]] = field(default_factory=list)  # gpu id, verdict, fatal xid
    fatal: list[tuple[int, XidEvent]] = field(default_factory=list)  # new fatal XIDs, with their GPU's id


def telemetry_ingest(
    *,
    node: Node,
    samples: Sequence[GpuSample],
    xid_events: Sequence[XidEvent],
    dropped: int,
    now: datetime | None = None,
) -> IngestResult:
    """Store one agent batch, then act on the health rules.

    Storing is one transaction (raw samples by COPY on PostgreSQL, the latest row per GPU upserted, XIDs, the
    node's counters including the agent's ``dropped`` count); a batch is idempotent, so a retried POST stores
    nothing twice. Health actions run afterwards, one transaction per GPU, so a failing action never loses the
    samples that triggered it. Then each new fatal XID may reopen a job whose non-zero exit reached the portal
    before it (:func:`jobs_reopen_for_xid`). Side effects: GPUs marked unhealthy, their jobs requeued, events,
    alerts, mail.
    """
    now = now or timezone.now()
    stored = _store_batch(node=node, samples=samples, xid_events=xid_events, dropped=dropped, now=now)
    drained: list[str] = []
    for gpu_id, verdict, xid in stored.unhealthy:
        if gpu_mark_unhealthy(gpu_id=gpu_id, verdict=verdict, xid=xid):
            drained.append(verdict.gpu_uuid)
    for gpu_id, event in stored.fatal:
        jobs_reopen_for_xid(gpu_id=gpu_id, event=event)
    return IngestResult(stored.accepted, stored.duplicates, stored.rejected, stored.xid_events, tuple(drained))


@transaction.atomic
def _store_batch(
    *, node: Node, samples: Sequence[GpuSample], xid_events: Sequence[XidEvent], dropped: int, now: datetime
) -> _Stored:
    out = _Stored()
    # The node's bookkeeping row doubles as the lock that serialises its batches.
    state = NodeTelemetry.objects.select_for_update().filter(pk=node.pk).first()
    if state is None:  # the node's first batch
        NodeTelemetry.objects.bulk_create([NodeTelemetry(node=node)], ignore_conflicts=True)
        state = NodeTelemetry.objects.select_for_update().get(pk=node.pk)
    uuids = {s.gpu_uuid for s in samples} | {e.gpu_uuid for e in xid_events}
    gpus = {g.uuid: g for g in Gpu.objects.filter(node=node, uuid__in=uuids).select_related("latest_sample")}
    latest = {g.pk: g.latest_sample for g in gpus.values() if _has_latest(g)}

    horizon = now + MAX_CLOCK_AHEAD
    ids = {uuid: gpu.pk for uuid, gpu in gpus.items()}
    # Compared as datetimes, i.e. at the database's microsecond precision: a float that rounds onto a stored
    # timestamp is a duplicate, whatever its last digits.
    last: dict[int, datetime] = {gpu_id: row.ts for gpu_id, row in latest.items()}
    fresh: dict[int, list[GpuSample]] = defaultdict(list)
    rows: list[tuple[int, datetime, GpuSample]] = []
    for sample in sorted(samples, key=_by_time):
        gpu_id = ids.get(sample.gpu_uuid)
        at = _dt(sample.timestamp)
        if gpu_id is None or at > horizon:
            out.rejected += 1
            continue
        previous = last.get(gpu_id)
        if previous is not None and at <= previous:
            out.duplicates += 1
            continue
        last[gpu_id] = at
        fresh[gpu_id].append(sample)
        rows.append((gpu_id, at, sample))
    out.accepted = len(rows)
    _insert_samples(rows)
    _upsert_latest(fresh, now)
    new_events = _record_xids(gpus, xid_events, fresh, previous={gpu_id: row.ts for gpu_id, row in latest.items()})
    out.xid_events = len(new_events)
    out.fatal = [(gpus[e.gpu_uuid].pk, e) for e in new_events if e.xid in FATAL_XIDS]

    if out.rejected:
        log.warning("node %s sent %d sample(s) for unknown GPUs or stamped in the future", node.name, out.rejected)
    if rows and rows[0][1] < now - LATE_AFTER:  # rows are in time order
        late = rows[0][1]
        state.backfill_from = min(state.backfill_from, late) if state.backfill_from else late
    state.agent_dropped = max(0, dropped)
    state.samples_received += out.accepted
    state.samples_duplicate += out.duplicates
    state.samples_rejected += out.rejected
    state.xid_events_received += out.xid_events
    state.batches += 1
    state.last_batch_at = now
    state.save()

    events_by_gpu: dict[str, list[XidEvent]] = defaultdict(list)
    for event in new_events:
        events_by_gpu[event.gpu_uuid].append(event)
    for uuid, gpu in gpus.items():
        if gpu.health == GpuHealth.UNHEALTHY or not (fresh.get(gpu.pk) or events_by_gpu.get(uuid)):
            continue
        window = list(fresh.get(gpu.pk, ()))
        if gpu.pk in latest:
            window.insert(0, _as_context(latest[gpu.pk], gpu))
        verdict = evaluate(uuid, window, events_by_gpu.get(uuid, ()))
        if not verdict.healthy:
            out.unhealthy.append(
                (gpu.pk, verdict, _first_fatal_xid(fresh.get(gpu.pk, ()), events_by_gpu.get(uuid, ())))
            )
    return out


def _has_latest(gpu: Gpu) -> bool:
    try:
        return gpu.latest_sample is not None
    except LatestSample.DoesNotExist:
        return False


def _as_context(row: LatestSample, gpu: Gpu) -> GpuSample:
    """The previously stored latest sample, as context for rules that compare counters across batches. Its XID is
    dropped: it was judged with its own batch (and may since have been cleared by an admin)."""
    values = {name: getattr(row, name) for name in METRIC_NAMES if name not in ("xid", "lost")}
    return GpuSample(gpu_uuid=gpu.uuid, index=gpu.index, timestamp=_epoch(row.ts), lost=row.lost, xid=0, **values)


def _first_fatal_xid(samples: Iterable[GpuSample], events: Iterable[XidEvent]) -> int | None:
    seen = [(e.timestamp, e.xid) for e in events if e.xid in FATAL_XIDS]
    seen += [(s.timestamp, s.xid) for s in samples if s.xid in FATAL_XIDS]
    return min(seen)[1] if seen else None


def _by_time(sample: GpuSample) -> float:
    return sample.timestamp


_metric_values = attrgetter(*METRIC_NAMES)
_COPY_TYPES = {"IntegerField": "int4", "BigIntegerField": "int8", "FloatField": "float8", "BooleanField": "bool"}


def _copy_types() -> list[str]:
    """PostgreSQL types of the COPY columns, from the model so the two cannot drift apart."""
    return ["int8", "timestamptz"] + [
        _COPY_TYPES[Sample._meta.get_field(name).get_internal_type()] for name in METRIC_NAMES
    ]


def _insert_samples(rows: Sequence[tuple[int, datetime, GpuSample]]) -> None:
    """Raw samples in bulk: PostgreSQL's binary COPY, ``bulk_create`` elsewhere.

    Binary COPY with declared types is encoded by psycopg's C extension at about a microsecond per row, a
    fraction of what building COPY text or INSERT statements in Python costs. Precondition: values fit their
    columns (checked at the API edge, so a bad value is a 400, not a failed COPY).
    """
    if not rows:
        return
    if connection.vendor == "postgresql":
        columns = ", ".join(("gpu_id", "ts", *METRIC_NAMES))
        with (
            connection.cursor() as cursor,
            cursor.copy(  # psycopg 3's COPY, through Django's cursor wrapper
                f"COPY {Sample._meta.db_table} ({columns}) FROM STDIN (FORMAT BINARY)"  # noqa: S608 - fixed names
            ) as copy,
        ):
            copy.set_types(_copy_types())
            for gpu_id, at, sample in rows:
                copy.write_row((gpu_id, at, *_metric_values(sample)))
        return
    Sample.objects.bulk_create(
        [
            Sample(gpu_id=gpu_id, ts=at, **dict(zip(METRIC_NAMES, _metric_values(s), strict=True)))
            for gpu_id, at, s in rows
        ],
        batch_size=500,
    )


def _upsert_latest(fresh: Mapping[int, Sequence[GpuSample]], now: datetime) -> None:
    newest = [
        LatestSample(
            gpu_id=gpu_id,
            ts=_dt(batch[-1].timestamp),
            processes=[list(p) for p in batch[-1].processes],
            received_at=now,
            **dict(zip(METRIC_NAMES, _metric_values(batch[-1]), strict=True)),
        )
        for gpu_id, batch in fresh.items()
        if batch
    ]
    if newest:
        LatestSample.objects.bulk_create(
            newest,
            update_conflicts=True,
            unique_fields=["gpu"],
            update_fields=["ts", "processes", "received_at", *METRIC_NAMES],
        )


def _record_xids(
    gpus: Mapping[str, Gpu],
    events: Sequence[XidEvent],
    fresh: Mapping[int, Sequence[GpuSample]],
    *,
    previous: Mapping[int, datetime],
) -> list[XidEvent]:
    """Store XID events not stored before; returns the new ones.

    A sample's own ``xid`` field ("the last XID since the previous sample") repeats an event the probe reported
    too, so it is recorded only when no event of the same GPU and code explains it: none in this batch, and none
    stored since the GPU's previous sample (``previous``: the stored latest sample's time per GPU id; from that
    instant on, inclusive, as the simulated probe stamps a fault injected between samples with it). The event
    often travels in an earlier batch than the sample: NVML stamps an event when it is drained, after the sample
    of that period was taken, and the agent ships a dying job's XIDs ahead of everything else.
    """
    candidates = [e for e in events if e.gpu_uuid in gpus]
    announced = {(e.gpu_uuid, e.xid) for e in candidates}
    by_id = {g.pk: g for g in gpus.values()}
    unexplained: list[tuple[int, datetime, GpuSample]] = []  # (gpu id, previous sample's time, sample)
    for gpu_id, batch in fresh.items():
        uuid = by_id[gpu_id].uuid
        since = previous.get(gpu_id)
        for s in batch:
            at = _dt(s.timestamp)
            if s.xid and (uuid, s.xid) not in announced:
                unexplained.append((gpu_id, since or at - SAMPLE_XID_LOOKBACK, s))
            since = at
    if unexplained:
        stored = XidRecord.objects.filter(
            gpu_id__in={gpu_id for gpu_id, _, _ in unexplained},
            at__gte=min(since for _, since, _ in unexplained),
            at__lte=max(_dt(s.timestamp) for _, _, s in unexplained),
        ).values_list("gpu_id", "xid", "at")
        seen = defaultdict(list)
        for gpu_id, code, at in stored:
            seen[(gpu_id, code)].append(at)
        for gpu_id, since, s in unexplained:
            uuid = by_id[gpu_id].uuid
            if (uuid, s.xid) in announced or any(since <= at <= _dt(s.timestamp) for at in seen[(gpu_id, s.xid)]):
                continue
            candidates.append(XidEvent(gpu_uuid=uuid, xid=s.xid, timestamp=s.timestamp))
            announced.add((uuid, s.xid))
    if not candidates:
        return []
    keys = {(gpus[e.gpu_uuid].pk, e.xid, _dt(e.timestamp)) for e in candidates}
    existing = set(
        XidRecord.objects.filter(gpu_id__in={k[0] for k in keys}, at__in={k[2] for k in keys}).values_list(
            "gpu_id", "xid", "at"
        )
    )
    new: list[XidEvent] = []
    records: list[XidRecord] = []
    for event in candidates:
        key = (gpus[event.gpu_uuid].pk, event.xid, _dt(event.timestamp))
        if key in existing:
            continue
        existing.add(key)
        new.append(event)
        records.append(XidRecord(gpu_id=key[0], xid=event.xid, at=key[2], klass=classify(event.xid).value))
    XidRecord.objects.bulk_create(records, ignore_conflicts=True)
    return new
