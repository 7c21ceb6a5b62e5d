"""Reads about shares of a GPU (issue #17): what the share round needs, and what the job and node pages show.

Every read here is a fixed number of queries, whatever the number of shares.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

from django.db.models import Count, F, FloatField, Sum, Value
from django.db.models.functions import Coalesce

from portal.db import EpochSeconds
from portal.jobs.models import Allocation, EventKind, Job, JobEvent
from scheduling.core.states import JobState

#: The start of an eviction's reason, as the agent writes it and the requeue records it.
EVICTED_PREFIX = "evicted to protect online work"


@dataclass(frozen=True, slots=True)
class ShareHold:
    """A share holding a GPU now (running, or an attempt that is over whose process is stopping)."""

    gpu_id: int
    job_id: int
    workload_class: str
    fraction: float
    compute_percent: int
    memory_bytes: int
    started: float


@dataclass(frozen=True, slots=True)
class PendingShare:
    """A pending share in queue order, with what placement and the caps need."""

    job_id: int
    tenant: str
    user: str
    fraction: float
    memory_bytes: int | None
    workload_class: str
    evictions: int
    culprit: bool
    suspect_faults: int


def share_holds() -> list[ShareHold]:
    """Every active share allocation. One query."""
    rows = (
        Allocation.objects.filter(released_at__isnull=True, compute_percent__isnull=False)
        .order_by("gpu_id", "created_at", "pk")
        .values_list(
            "gpu_id",
            "job_id",
            "job__workload_class",
            "job__gpu_fraction",
            "compute_percent",
            "memory_limit_bytes",
            EpochSeconds("created_at"),
        )
    )
    return [ShareHold(g, j, c, f or p / 100, p, m or 0, t or 0.0) for g, j, c, f, p, m, t in rows]


def whole_gpu_holders() -> dict[int, int]:
    """GPU id -> the job holding it whole (an active allocation without a share). One query."""
    return dict(
        Allocation.objects.filter(released_at__isnull=True, compute_percent__isnull=True).values_list(
            "gpu_id", "job_id"
        )
    )


def pending_shares() -> list[PendingShare]:
    """Pending shares, oldest submission first (the queue's order). One query."""
    rows = (
        Job.objects.filter(state=JobState.PENDING.value, gpu_fraction__isnull=False)
        .order_by("submitted_at", "pk")
        .values_list(
            "pk",
            "tenant__slug",
            "user__username",
            "gpu_fraction",
            "gpu_memory_bytes",
            "workload_class",
            "evictions",
            "mps_culprit",
            "mps_suspect_faults",
        )
    )
    return [
        PendingShare(pk, tenant, user, fraction or 0.0, memory, cls, evictions, culprit, faults)
        for pk, tenant, user, fraction, memory, cls, evictions, culprit, faults in rows
    ]


def gpu_use_by_user(*, shares_only: bool = False) -> dict[tuple[str, str], float]:
    """GPUs held now per (tenant, user), a share counted as its fraction and a whole GPU as 1: what the caps count
    against (issue #17). Every active allocation counts, stopping ones included (as the fence counts them); only
    shares' with ``shares_only``. One query."""
    held = Allocation.objects.filter(released_at__isnull=True)
    if shares_only:
        held = held.filter(compute_percent__isnull=False)
    rows = (
        held.values("job__tenant__slug", "job__user__username")
        .annotate(n=Sum(Coalesce(F("job__gpu_fraction"), Value(1.0)), output_field=FloatField()))
        .order_by()
        .values_list("job__tenant__slug", "job__user__username", "n")
    )
    return {(t, u): float(n or 0.0) for t, u, n in rows}


def share_order(*, job: Job, attempt: int) -> dict[str, object] | None:
    """The ``share`` field of a start order (docs/agent-protocol.md) for this attempt of a share; None for a
    whole-GPU job (its order stays byte for byte what it was). One query, for shares only."""
    if job.gpu_fraction is None:
        return None
    limits = (
        Allocation.objects.filter(job=job, attempt=attempt, compute_percent__isnull=False)
        .values_list("compute_percent", "memory_limit_bytes")
        .first()
    )
    if limits is None:
        return None
    percent, memory = limits
    share: dict[str, object] = {"compute_percent": percent, "workload_class": job.workload_class}
    if memory:
        share["memory_limit_bytes"] = memory
    if job.latency_slo_ms is not None and job.workload_class == "online":
        share["latency_slo_ms"] = job.latency_slo_ms
    return share


@dataclass(frozen=True, slots=True)
class JobShare:
    """Where a share runs: its node and GPU index, its compute percent and memory limit, and its neighbours."""

    node: str
    gpu_index: int
    compute_percent: int
    memory_bytes: int
    neighbours: int


def job_share(*, job: Job) -> JobShare | None:
    """The share ``job``'s current attempt holds, or None (not a share, or not holding one). Two queries."""
    if job.gpu_fraction is None or job.state != JobState.RUNNING.value:
        return None
    row = (
        Allocation.objects.filter(job=job, attempt=job.attempt, released_at__isnull=True, compute_percent__isnull=False)
        .values_list("gpu_id", "node__name", "gpu__index", "compute_percent", "memory_limit_bytes")
        .first()
    )
    if row is None:
        return None
    gpu_id, node, index, percent, memory = row
    others = (
        Allocation.objects.filter(gpu_id=gpu_id, released_at__isnull=True, compute_percent__isnull=False)
        .exclude(job=job)
        .count()
    )
    return JobShare(node, index, percent or 0, memory or 0, others)


@dataclass(frozen=True, slots=True)
class GpuClient:
    """One share on a shared GPU, for the node page."""

    job_id: int
    name: str
    workload_class: str
    compute_percent: int
    memory_bytes: int


def shared_gpu_clients(*, gpu_ids: list[int]) -> dict[int, list[GpuClient]]:
    """GPU id -> the shares holding it now, oldest first. One query."""
    rows = (
        Allocation.objects.filter(gpu_id__in=gpu_ids, released_at__isnull=True, compute_percent__isnull=False)
        .order_by("created_at", "pk")
        .values_list("gpu_id", "job_id", "job__name", "job__workload_class", "compute_percent", "memory_limit_bytes")
    )
    out: dict[int, list[GpuClient]] = defaultdict(list)
    for gpu_id, job_id, name, cls, percent, memory in rows:
        out[gpu_id].append(GpuClient(job_id, name, cls, percent or 0, memory or 0))
    return out


def evictions_by_gpu(*, gpu_ids: list[int]) -> dict[int, int]:
    """GPU id -> evictions recorded on it (requeues whose allocation was on that GPU). One query."""
    evicted = JobEvent.objects.filter(kind=EventKind.REQUEUED, reason__startswith=EVICTED_PREFIX)
    rows = (
        Allocation.objects.filter(gpu_id__in=gpu_ids, compute_percent__isnull=False)
        .filter(job__in=evicted.values("job_id"))
        .values("gpu_id")
        .annotate(n=Count("job_id", distinct=True))
        .values_list("gpu_id", "n")
    )
    return dict(rows)


@dataclass(frozen=True, slots=True)
class SharedGpuRow:
    """A shared GPU of one node for its page: its index and client limit, its shares now, and its evictions."""

    index: int
    max_clients: int
    clients: list[GpuClient]
    evictions: int

    @property
    def compute_percent(self) -> int:
        return sum(c.compute_percent for c in self.clients)


def node_shared_gpus(*, node_id: int) -> list[SharedGpuRow]:
    """The shared GPUs of a node, in index order, with their clients and evictions. Three queries."""
    from portal.nodes.models import Gpu  # the jobs app's models already point at nodes; read its rows here

    gpus = list(Gpu.objects.filter(node_id=node_id, present=True, shared=True).order_by("index"))
    ids = [g.pk for g in gpus]
    clients = shared_gpu_clients(gpu_ids=ids) if ids else {}
    evictions = evictions_by_gpu(gpu_ids=ids) if ids else {}
    return [SharedGpuRow(g.index, g.max_clients, clients.get(g.pk, []), evictions.get(g.pk, 0)) for g in gpus]


#: A share's job as the start forecast reads it: ``(pk, tenant, user, name, submitted, time_limit, state, started,
#: attained_service)``, times in seconds since the epoch.
ShareJobRow = tuple[int, str, str, str, float, int | None, str, float | None, float]


def share_job_rows(*, job_ids: list[int]) -> list[ShareJobRow]:
    """What the start forecast needs of these shares' jobs to estimate how long each runs. One query."""
    rows = Job.objects.filter(pk__in=job_ids).values_list(
        "pk",
        "tenant__slug",
        "user__username",
        "name",
        EpochSeconds("submitted_at"),
        "time_limit",
        "state",
        EpochSeconds("started_at"),
        "attained_service",
    )
    return list(rows)
