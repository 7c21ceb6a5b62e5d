"""Services that write telemetry: ingest of agent batches, the health actions they trigger, rollups, pruning, and
the failure predictor's training and scoring.

The rules themselves are pure and live elsewhere (``telemetry.health`` judges a GPU, ``telemetry.retry`` says who
killed a job, ``telemetry.predict`` builds features and labels); these functions feed them rows and apply what they
decide. Health actions take the scheduler's lease first, so a scheduling round can never hand out a GPU in the
instant between "this GPU is bad" and "its jobs are requeued". Mail and other side effects outside the database are
queued with ``transaction.on_commit``.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from operator import attrgetter
from pathlib import Path
from typing import Any

import numpy as np
from django.conf import settings
from django.core.mail import mail_admins
from django.db import connection, transaction
from django.db.models import Max, Min
from django.utils import timezone

from portal.jobs.lease import hold_round_lease
from portal.jobs.models import Allocation, Job, JobTask, TaskState
from portal.jobs.selectors import cordon_rule
from portal.jobs.services import job_reopen_after_hardware_fault, job_requeue
from portal.nodes.models import Gpu, GpuHealth, Node
from portal.queue import NOTIFY_ADMINS, TRAIN_FAILURE_MODEL, enqueue, enqueue_on_commit
from portal.telemetry.exits import XidBlame, jobs_an_xid_may_have_killed
from portal.telemetry.models import (
    METRIC_FIELDS,
    Alert,
    AlertSeverity,
    FailureModel,
    GpuHealthEvent,
    GpuRisk,
    HealthEventKind,
    LatestSample,
    NodeTelemetry,
    Rollup,
    RollupPeriod,
    Sample,
    XidRecord,
)
from portal.telemetry.selectors import risk_threshold
from scheduling.core.states import JobState
from telemetry.health import HealthCause, Verdict, evaluate
from telemetry.retry import FailureOrigin, failure_origin
from telemetry.sample import GpuSample, XidEvent
from telemetry.schema import FailureLabel, TelemetryRow
from telemetry.table import TelemetryTable, table_from_rows
from telemetry.xid import FATAL_XIDS, XidClass, classify

log = logging.getLogger(__name__)

HEALTH_ACTOR = "health"
PREDICTOR_ACTOR = "predictor"
#: A sample older than this when it arrives is late (an agent draining its backlog): its buckets are rolled up again.
LATE_AFTER = timedelta(seconds=120)
#: Samples stamped further in the future than this are refused: a wrong agent clock would otherwise make every
#: later, correct sample look like a duplicate.
MAX_CLOCK_AHEAD = timedelta(minutes=5)
PRUNE_CHUNK = 50_000
#: How far back a GPU's first sample (no previous one stored) looks for the event its ``xid`` repeats.
SAMPLE_XID_LOOKBACK = timedelta(minutes=5)


def _setting(name: str, default: Any) -> Any:
    """Telemetry settings are optional (``getattr`` with a default) and read at call time."""
    return getattr(settings, name, default)


def _dt(epoch_s: float) -> datetime:
    return datetime.fromtimestamp(epoch_s, tz=UTC)


def _epoch(value: datetime) -> float:
    return value.timestamp()


# -- ingest -------------------------------------------------------------------------------------------------------


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
    values = {name: getattr(row, name) for name in METRIC_FIELDS if name not in ("xid", "lost")}
    return GpuSample(gpu_uuid=gpu.uuid, index=gpu.index, timestamp=_epoch(row.ts), lost=row.lost, xid=0, **values)


def _first_fatal_xid(samples: Iterable[GpuSample], events: Iterable[XidEvent]) -> int | None:
    seen = [(e.timestamp, e.xid) for e in events if e.xid in FATAL_XIDS]
    seen += [(s.timestamp, s.xid) for s in samples if s.xid in FATAL_XIDS]
    return min(seen)[1] if seen else None


def _by_time(sample: GpuSample) -> float:
    return sample.timestamp


_metric_values = attrgetter(*METRIC_FIELDS)
_COPY_TYPES = {"IntegerField": "int4", "BigIntegerField": "int8", "FloatField": "float8", "BooleanField": "bool"}


def _copy_types() -> list[str]:
    """PostgreSQL types of the COPY columns, from the model so the two cannot drift apart."""
    return ["int8", "timestamptz"] + [
        _COPY_TYPES[Sample._meta.get_field(name).get_internal_type()] for name in METRIC_FIELDS
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
        columns = ", ".join(("gpu_id", "ts", *METRIC_FIELDS))
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
            Sample(gpu_id=gpu_id, ts=at, **dict(zip(METRIC_FIELDS, _metric_values(s), strict=True)))
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
            **dict(zip(METRIC_FIELDS, _metric_values(batch[-1]), strict=True)),
        )
        for gpu_id, batch in fresh.items()
        if batch
    ]
    if newest:
        LatestSample.objects.bulk_create(
            newest,
            update_conflicts=True,
            unique_fields=["gpu"],
            update_fields=["ts", "processes", "received_at", *METRIC_FIELDS],
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


# -- health actions -----------------------------------------------------------------------------------------------


@transaction.atomic
def gpu_mark_unhealthy(*, gpu_id: int, verdict: Verdict, xid: int | None = None, actor: str = HEALTH_ACTOR) -> bool:
    """Drain a GPU the health rules condemned: mark it unhealthy (the scheduler's snapshot then offers it to no
    one), requeue every running job holding it as a whole gang (a hardware retry, bounded by
    ``CORRAL_MAX_HARDWARE_RETRIES``), record a :class:`GpuHealthEvent` and alert admins.

    Returns False (and does nothing) when the GPU is already unhealthy. Lock order: scheduler lease, GPU, jobs by id.
    """
    hold_round_lease()
    gpu = Gpu.objects.select_for_update().select_related("node").get(pk=gpu_id)
    if gpu.health == GpuHealth.UNHEALTHY:
        return False
    finding = verdict.findings[0] if verdict.findings else None
    detail = f"{verdict.cause.label if verdict.cause else 'unhealthy'}: {verdict.message}"
    gpu.health, gpu.health_detail = GpuHealth.UNHEALTHY, detail[:255]
    gpu.save(update_fields=["health", "health_detail"])
    requeued: list[int] = []
    if failure_origin(gpu_verdicts=[verdict]) is FailureOrigin.HARDWARE:
        requeued = _requeue_jobs_on(gpu, reason=f"GPU {gpu} failed: {verdict.message}"[:255], actor=actor)
    GpuHealthEvent.objects.create(
        gpu=gpu,
        kind=HealthEventKind.UNHEALTHY,
        cause=(verdict.cause or HealthCause.FATAL_XID).value,
        xid=xid,
        evidence_at=_dt(finding.at) if finding else None,
        message=verdict.message[:255],
        actor=actor,
        requeued_jobs=requeued,
    )
    jobs = f" Requeued job(s) {', '.join(map(str, requeued))} elsewhere." if requeued else ""
    _raise_alert(
        gpu=gpu,
        severity=AlertSeverity.CRITICAL,
        title=f"GPU {gpu} ({gpu.uuid}) drained: {verdict.cause.label if verdict.cause else 'unhealthy'}",
        message=f"{verdict.message}. The GPU takes no new work until an admin marks it healthy again.{jobs}",
    )
    return True


@transaction.atomic
def jobs_reopen_for_xid(*, gpu_id: int, event: XidEvent, actor: str = HEALTH_ACTOR) -> list[int]:
    """The exit-first order of issue #4: a fatal XID on a GPU arrived after the non-zero exit it caused, so the
    job was recorded as failing by itself. Every job whose latest attempt held the GPU and that failed within
    ``CORRAL_XID_EXIT_WINDOW`` of the XID is reopened as a hardware retry (``job_reopen_after_hardware_fault``
    holds the rules). Returns the reopened job ids.

    Precondition: the XID is already committed (``telemetry_ingest`` calls this after storing the batch). A
    heartbeat settling one of these jobs at the same moment then either saw the XID and requeued the job itself, or
    commits before the lock below is granted and the job is judged here as failed; neither order loses the retry,
    and the job's row lock keeps both from requeueing it twice. Lock order: jobs by id (as heartbeats).
    """
    at = _dt(event.timestamp)
    ids = jobs_an_xid_may_have_killed(gpu_id=gpu_id, at=at, now=timezone.now())
    if not ids:
        return []
    blame = XidBlame(xid=event.xid, gpu=str(Gpu.objects.select_related("node").get(pk=gpu_id)), at=at)
    reopened = []
    for job in Job.objects.select_for_update().filter(pk__in=ids).order_by("pk"):
        if job_reopen_after_hardware_fault(job, blame=blame, actor=actor):
            reopened.append(job.pk)
            log.warning("job %s had failed, but %s came within the window of its exit: retried", job.pk, blame.words())
    return reopened


def _requeue_jobs_on(gpu: Gpu, *, reason: str, actor: str) -> list[int]:
    """Requeue the running jobs whose current attempt holds ``gpu``. Precondition: in the caller's transaction."""
    held = defaultdict(set)
    for job_id, attempt in Allocation.objects.filter(gpu=gpu, released_at__isnull=True).values_list(
        "job_id", "attempt"
    ):
        held[job_id].add(attempt)
    requeued = []
    for job in Job.objects.select_for_update().filter(pk__in=list(held)).order_by("pk"):
        if job.state == JobState.RUNNING.value and job.attempt in held[job.pk]:
            job_requeue(job, actor=actor, reason=reason, hardware=True)
            requeued.append(job.pk)
    return requeued


@transaction.atomic
def gpu_cordon(*, gpu_id: int, risk: float, model: FailureModel | None, now: datetime | None = None) -> bool:
    """Soft-cordon a GPU the predictor expects to fail: no new work lands on it, and every running task holding it
    is asked to checkpoint (the next heartbeat delivers SIGUSR1 once). Admins are alerted.

    Returns False when the GPU is not healthy (already cordoned or drained). Running jobs keep running: a
    prediction is not a fault, and the job's own checkpoint is cheaper than a restart.
    """
    now = now or timezone.now()
    hold_round_lease()
    gpu = Gpu.objects.select_for_update().select_related("node").get(pk=gpu_id)
    if gpu.health != GpuHealth.HEALTHY:
        return False
    version = f" (model v{model.version})" if model else ""
    gpu.health = GpuHealth.CORDONED
    gpu.health_detail = f"predicted to fail: risk {risk:.2f}{version}"[:255]
    gpu.save(update_fields=["health", "health_detail"])
    held = list(Allocation.objects.filter(gpu=gpu, released_at__isnull=True).values_list("job_id", "attempt", "rank"))
    asked: list[int] = []
    for job_id, attempt, rank in held:
        # A fresh request (signalled_at cleared) so a job asked before an earlier, cleared cordon is asked again.
        updated = JobTask.objects.filter(
            job_id=job_id, attempt=attempt, rank=rank, node=gpu.node, state=TaskState.RUNNING
        ).update(checkpoint_requested_at=now, checkpoint_signalled_at=None)
        if updated:
            asked.append(job_id)
    GpuHealthEvent.objects.create(
        gpu=gpu,
        kind=HealthEventKind.CORDONED,
        cause="predicted",
        evidence_at=now,
        message=gpu.health_detail,
        actor=PREDICTOR_ACTOR,
        checkpoint_jobs=asked,
    )
    jobs = f" Asked job(s) {', '.join(map(str, asked))} to checkpoint." if asked else ""
    _raise_alert(
        gpu=gpu,
        severity=AlertSeverity.WARNING,
        title=f"GPU {gpu} ({gpu.uuid}) predicted to fail: risk {risk:.2f}",
        message=f"Soft-cordoned{version}: it {cordon_rule()}.{jobs}",
    )
    return True


@transaction.atomic
def gpu_mark_healthy(*, gpu_id: int, by: str, note: str = "") -> bool:
    """An admin's word that a GPU was reset or repaired: it takes work again and its open alerts are resolved.

    Returns False when it already was healthy. The next batches are judged afresh: a GPU still reporting an
    uncorrectable error or no spare rows is drained again at once.
    """
    gpu = Gpu.objects.select_for_update().get(pk=gpu_id)
    if gpu.health == GpuHealth.HEALTHY:
        return False
    previous = gpu.health
    gpu.health, gpu.health_detail = GpuHealth.HEALTHY, ""
    gpu.save(update_fields=["health", "health_detail"])
    now = timezone.now()
    GpuHealthEvent.objects.create(
        gpu=gpu,
        kind=HealthEventKind.RESTORED,
        cause="",
        evidence_at=now,
        message=(note or f"marked healthy by {by} (was {previous})")[:255],
        actor=by[:150],
    )
    Alert.objects.filter(gpu=gpu, resolved_at__isnull=True).update(resolved_at=now, resolved_by=by[:150])
    log.info("GPU %s (%s) marked healthy by %s", gpu_id, gpu.uuid, by)
    return True


def _raise_alert(*, gpu: Gpu, severity: str, title: str, message: str) -> Alert:
    """Record an alert, log it, and mail admins once the transaction commits (never for a rolled-back change)."""
    alert = Alert.objects.create(node=gpu.node, gpu=gpu, severity=severity, title=title[:200], message=message)
    log.warning("telemetry alert [%s] %s: %s", severity, title, message)
    enqueue_on_commit(NOTIFY_ADMINS, alert.pk)
    return alert


def alert_mail_admins(*, alert_id: int) -> bool:
    """Mail ``settings.ADMINS`` about one alert (a no-op when none are configured); False when the alert is gone.
    Never raises for SMTP trouble: the alert is already on the node page and in the API; mail is a convenience."""
    alert = Alert.objects.select_related("node", "gpu").filter(pk=alert_id).first()
    if alert is None:
        return False
    body = f"{alert.message}\n\nNode: {alert.node.name}\nRaised at: {alert.at:%Y-%m-%d %H:%M:%S} UTC\n"
    mail_admins(f"[{alert.severity}] {alert.title}", body, fail_silently=True)
    return True


# -- rollups ------------------------------------------------------------------------------------------------------

_GAUGES = ("gpu_util", "mem_used_mb", "temperature_c", "power_w", "sm_clock_mhz")
_COUNTERS = (
    "ecc_sbe_volatile",
    "ecc_dbe_volatile",
    "ecc_corrected_total",
    "ecc_uncorrected_total",
    "retired_pages",
    "remapped_rows",
    "pcie_replay",
    "mem_total_mb",
)
_XID_RANK = {XidClass.APPLICATION: 1, XidClass.UNKNOWN: 2, XidClass.PRECURSOR: 3, XidClass.FATAL: 4}
_ROLLUP_FIELDS = (
    "samples",
    "lost_samples",
    *_GAUGES,
    "gpu_util_max",
    "temperature_max",
    "throttle_reasons",
    *_COUNTERS,
    "xid",
)


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
        means = {n: (self.sums[n] / self.weights[n] if self.weights.get(n) else None) for n in _GAUGES}
        return {
            "samples": self.samples,
            "lost_samples": self.lost,
            **means,
            "gpu_util_max": self.maxes.get("gpu_util"),
            "temperature_max": self.maxes.get("temperature_c"),
            "throttle_reasons": self.throttle,
            **{n: self.last.get(n) for n in _COUNTERS},
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
        .values_list("gpu_id", "ts", "lost", "xid", "throttle_reasons", *_GAUGES, *_COUNTERS)
        .iterator(chunk_size=20_000)
    )
    n_g = len(_GAUGES)
    for gpu_id, ts, lost, xid, throttle, *rest in rows:
        gauges = dict(zip(_GAUGES, rest[:n_g], strict=True))
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
            counters=dict(zip(_COUNTERS, rest[n_g:], strict=True)),
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
            gauges={n: v[n] for n in _GAUGES},
            maxes={"gpu_util": v["gpu_util_max"], "temperature_c": v["temperature_max"]},
            counters={n: v[n] for n in _COUNTERS},
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


# -- history as the telemetry CSV schema's rows ------------------------------------------------------------------


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
    fields = ("bucket", "gpu__node__name", "gpu__uuid", *_GAUGES, *_COUNTERS, "throttle_reasons", "xid")
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


# -- failure prediction ---------------------------------------------------------------------------------------------
#
# The pure predictor (``telemetry.predict.training``) fits and scores; these functions feed it this site's hourly
# history and store what it returns. Its model libraries run single-threaded by default
# (``CORRAL_PREDICTOR_THREADS``): the worker shares the machine with the web processes, and OpenMP thread pools
# on an oversubscribed machine run an order of magnitude slower than one thread.


def _predictor_threads() -> Any:
    from threadpoolctl import threadpool_limits

    return threadpool_limits(limits=int(_setting("CORRAL_PREDICTOR_THREADS", 1)))


def _history_table(rows: Iterable[TelemetryRow]) -> TelemetryTable | None:
    materialised = list(rows)
    return table_from_rows(materialised) if materialised else None


def _first_seen(gpu_ids: Iterable[int] | None = None) -> dict[str, float]:
    """When each GPU was first seen (its oldest hourly rollup): the predictor's age feature, which a window of
    recent history alone would understate."""
    rollups = Rollup.objects.filter(period=RollupPeriod.HOUR)
    if gpu_ids is not None:
        rollups = rollups.filter(gpu_id__in=list(gpu_ids))
    return {
        uuid: _epoch(first)
        for uuid, first in rollups.values("gpu__uuid").annotate(first=Min("bucket")).values_list("gpu__uuid", "first")
    }


def failure_model_train(
    *,
    now: datetime | None = None,
    window_days: float | None = None,
    horizon_hours: float | None = None,
    min_failures: int | None = None,
    synthetic: Mapping[str, Any] | None = None,
) -> FailureModel:
    """Train a new model version on the latest window (sliding training) and make it the active one.

    Learns from this site's hourly history and its recorded failures (GPUs the health rules drained) when the
    window holds at least ``CORRAL_FAILURE_MIN_TRAINING_FAILURES`` (default 20) of them; otherwise from a
    generated synthetic fleet (``telemetry.synth``, shaped by ``CORRAL_FAILURE_SYNTHETIC_FLEET`` or
    ``synthetic``), so that a new cluster's demo has a model. ``source`` and ``metadata`` say which. Slow (seconds
    to minutes): call it from the periodic task, not from a request.
    """
    from telemetry.predict.training import NotEnoughData, train_model
    from telemetry.synth import FleetConfig, generate

    now = now or timezone.now()
    window_days = float(window_days or _setting("CORRAL_FAILURE_TRAINING_DAYS", 60))
    horizon_s = float(horizon_hours or _setting("CORRAL_FAILURE_HORIZON_HOURS", 24)) * 3600
    if min_failures is None:
        min_failures = int(_setting("CORRAL_FAILURE_MIN_TRAINING_FAILURES", 20))
    since = now - timedelta(days=window_days)
    version = (FailureModel.objects.aggregate(v=Max("version"))["v"] or 0) + 1
    labels = failure_labels(since=since)
    metadata: dict[str, Any] = {"recorded_failures": len(labels), "min_failures": min_failures}
    artifact, source = None, "synthetic"
    with _predictor_threads():
        if len(labels) >= min_failures:
            table = _history_table(hourly_rows(since=since, until=now))
            try:
                if table is not None:
                    artifact = train_model(
                        table,
                        labels,
                        now=_epoch(now),
                        horizon_s=horizon_s,
                        train_window_s=window_days * 86_400,
                        seed=version,
                        first_seen=_first_seen(),
                    )
                    source = "stored"
            except NotEnoughData as exc:
                metadata["stored_data_refused"] = str(exc)
        if artifact is None:
            shape: dict[str, Any] = {"gpus": 128, "days": 30.0, "failure_rate": 2.0}  # FleetConfig's keywords
            shape.update(_setting("CORRAL_FAILURE_SYNTHETIC_FLEET", {}) or {})
            shape.update(synthetic or {})
            config = FleetConfig(seed=version, **shape)
            fleet = generate(config)
            artifact = train_model(
                fleet.table,
                fleet.labels,
                now=fleet.table.end,
                horizon_s=horizon_s,
                train_window_s=config.days * 86_400,
                seed=version,
            )
            source = "synthetic"
            because = metadata.get("stored_data_refused") or (
                f"{len(labels)} recorded failure(s) in the last {window_days:g} days, {min_failures} needed"
            )
            metadata["why_synthetic"] = (
                f"{because}: trained on a synthetic fleet of {config.gpus} GPUs over {config.days:g} days "
                f"(seed {config.seed}) so the predictor has a model. Its scores demonstrate the pipeline; they are "
                "not a forecast for this site."
            )
    header = artifact.header
    metrics = {
        **header.metrics,
        "threshold": header.threshold,
        "rows": header.rows,
        "positive_rows": header.positive_rows,
        "failures": header.failures,
    }
    metadata.update({"kind": str(header.kind), "content_version": header.version, "libraries": header.libraries})
    with transaction.atomic():
        FailureModel.objects.filter(active=True).update(active=False)
        created = FailureModel.objects.create(
            version=version,
            source=source,
            window_start=_dt(header.train_start),
            window_end=_dt(header.train_end),
            horizon_s=header.horizon_s,
            metrics=metrics,
            metadata=metadata,
            artifact=artifact.to_bytes(),
            active=True,
        )
    log.info("trained failure model v%d on %s data: %s", version, source, metrics)
    return created


@dataclass(frozen=True, slots=True)
class ScoreResult:
    model_version: int | None
    scored: int
    cordoned: tuple[str, ...] = ()


def gpus_score(*, now: datetime | None = None, first_training: bool = False) -> ScoreResult:
    """Score every present GPU with recent hourly history using the active model, store each GPU's latest risk,
    and soft-cordon healthy GPUs at or above :func:`risk_threshold`.

    Every GPU with an hourly row in the last two hours is scored (so a fresh cluster's page shows risks at once),
    but only one with at least ``CORRAL_RISK_MIN_HOURS`` (default 6) hours of history is cordoned: a model reading
    two rows of a brand-new GPU mostly sees its youth. A GPU is cordoned at most once per model horizon (an admin
    who cleared a cordon is not overruled by the next run). Does nothing without an active model; with
    ``first_training`` (the periodic task), a site that never had a model asks for its first training at once.
    """
    from telemetry.predict.artifact import ModelArtifact
    from telemetry.predict.training import score_latest

    now = now or timezone.now()
    model = FailureModel.objects.filter(active=True).first()
    if model is None:
        if first_training and not FailureModel.objects.exists():
            enqueue(TRAIN_FAILURE_MODEL)
        return ScoreResult(None, 0)
    artifact = ModelArtifact.from_bytes(bytes(model.artifact))
    recent = set(
        Rollup.objects.filter(period=RollupPeriod.HOUR, bucket__gte=now - timedelta(hours=2), gpu__present=True)
        .values_list("gpu_id", flat=True)
        .distinct()
    )
    table = _history_table(hourly_rows(since=now - timedelta(days=8), gpu_ids=recent))
    if table is None:
        return ScoreResult(model.version, 0)
    rows_per_gpu = np.bincount(table.gpu, minlength=len(table.gpu_names))
    min_hours = int(_setting("CORRAL_RISK_MIN_HOURS", 6))
    enough = {name for code, name in enumerate(table.gpu_names) if rows_per_gpu[code] >= min_hours}
    with _predictor_threads():
        scores = {r.gpu_uuid: r.score for r in score_latest(artifact, table, first_seen=_first_seen(recent))}
    ids = dict(Gpu.objects.filter(uuid__in=scores).values_list("uuid", "pk"))
    GpuRisk.objects.bulk_create(
        [GpuRisk(gpu_id=ids[u], risk=r, model=model, scored_at=now) for u, r in scores.items() if u in ids],
        update_conflicts=True,
        unique_fields=["gpu"],
        update_fields=["risk", "model", "scored_at"],
    )
    threshold = risk_threshold(model)
    if threshold is None:
        return ScoreResult(model.version, len(scores))
    at_risk = {u for u, r in scores.items() if r >= threshold and u in ids and u in enough}
    recently = set(
        GpuHealthEvent.objects.filter(
            gpu__uuid__in=at_risk, kind=HealthEventKind.CORDONED, at__gte=now - timedelta(seconds=model.horizon_s)
        ).values_list("gpu__uuid", flat=True)
    )
    candidates = Gpu.objects.filter(uuid__in=at_risk - recently, health=GpuHealth.HEALTHY).values_list(
        "uuid", flat=True
    )
    cordoned = tuple(u for u in sorted(candidates) if gpu_cordon(gpu_id=ids[u], risk=scores[u], model=model, now=now))
    return ScoreResult(model.version, len(scores), cordoned)


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
