"""Reads for loanable pools (issue #19): each pool's nodes and loans, the running jobs a reclaim would stop, the
nodes still holding work, and the reclaims themselves."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime

from django.db.models import F, Max, QuerySet

from portal.api.serializers import BIGINT_MAX
from portal.jobs.models import Allocation, Job, JobTask
from portal.nodes.models import Node
from portal.pools.models import Reclaim
from scheduling.core.loan import TRAINING
from scheduling.core.states import JobState

#: How many reclaims the nodes page lists: the open ones and the latest finished, newest first.
RECENT_RECLAIMS = 10


@dataclass(frozen=True, slots=True)
class PoolRow:
    """A loanable pool as the API and the CLI list it: its nodes by name, which of them are lent (``returning``
    ones included: they are lent until they are given back) and which are being given back, and its open
    reclaims."""

    name: str
    nodes: list[str] = field(default_factory=list)
    lent: list[str] = field(default_factory=list)
    returning: list[str] = field(default_factory=list)
    open_reclaims: list[int] = field(default_factory=list)


def pool_list() -> list[PoolRow]:
    """Every loanable pool (every pool a node names other than ``training``), by name. Two queries."""
    rows: dict[str, PoolRow] = {}
    for name, pool, lent, returning in (
        Node.objects.exclude(pool=TRAINING).order_by("pool", "name").values_list("name", "pool", "lent", "returning")
    ):
        row = rows.setdefault(pool, PoolRow(name=pool))
        row.nodes.append(name)
        if lent:
            row.lent.append(name)
        if returning:
            row.returning.append(name)
    for reclaim_id, pool in Reclaim.objects.filter(finished_at__isnull=True).order_by("pk").values_list("pk", "pool"):
        if pool in rows:
            rows[pool].open_reclaims.append(reclaim_id)
    return list(rows.values())


def pool_exists(*, pool: str) -> bool:
    """True when some node belongs to ``pool``."""
    return Node.objects.filter(pool=pool).exists()


@dataclass(frozen=True, slots=True)
class ReclaimJobRow:
    """A running job with GPUs on a lent node, as a reclaim needs it: its minimum and maximum size, its active
    GPUs per node (all of its gang's nodes, not only the lent ones), and when it last checkpointed (the last
    checkpoint signal of its attempt) or else started."""

    job_id: int
    gpus: int
    max_gpus: int | None
    per_node: dict[str, int]
    last_checkpoint: datetime | None


def running_jobs_on(*, node_ids: list[int]) -> list[ReclaimJobRow]:
    """The running jobs holding a GPU on any of ``node_ids``, by id. Three queries, whatever the number of jobs."""
    job_ids = set(
        Allocation.objects.filter(
            node_id__in=node_ids, released_at__isnull=True, job__state=JobState.RUNNING.value
        ).values_list("job_id", flat=True)
    )
    if not job_ids:
        return []
    jobs = {
        pk: (gpus, max_gpus, attempt, started)
        for pk, gpus, max_gpus, attempt, started in Job.objects.filter(
            pk__in=job_ids, state=JobState.RUNNING.value
        ).values_list("pk", "gpus", "max_gpus", "attempt", "started_at")
    }
    per_node: dict[int, dict[str, int]] = defaultdict(dict)
    for job_id, attempt, node in Allocation.objects.filter(job_id__in=jobs, released_at__isnull=True).values_list(
        "job_id", "attempt", "node__name"
    ):
        if attempt == jobs[job_id][2]:
            per_node[job_id][node] = per_node[job_id].get(node, 0) + 1
    signalled = {
        (job_id, attempt): at
        for job_id, attempt, at in JobTask.objects.filter(job_id__in=jobs, checkpoint_signalled_at__isnull=False)
        .values("job_id", "attempt")
        .annotate(at=Max("checkpoint_signalled_at"))
        .values_list("job_id", "attempt", "at")
    }
    rows = []
    for job_id in sorted(jobs):
        gpus, max_gpus, attempt, started = jobs[job_id]
        if not per_node.get(job_id):
            continue
        last = signalled.get((job_id, attempt))
        if last is None or (started is not None and last < started):
            last = started
        rows.append(ReclaimJobRow(job_id, gpus, max_gpus, dict(per_node[job_id]), last))
    return rows


def busy_node_names(*, names: list[str]) -> set[str]:
    """Those of the nodes ``names`` on which some GPU is still held (an active allocation: a job running there, or
    one whose processes have not yet exited). One query."""
    return set(
        Allocation.objects.filter(node__name__in=names, released_at__isnull=True).values_list("node__name", flat=True)
    )


def running_jobs_holding(*, names: list[str], unstopped: bool = False) -> list[int]:
    """Ids of the running jobs holding a GPU on any of the nodes ``names``; with ``unstopped``, only those no stop
    is scheduled for. One query."""
    held = Allocation.objects.filter(node__name__in=names, released_at__isnull=True, job__state=JobState.RUNNING.value)
    if unstopped:
        held = held.filter(job__stop_due_at__isnull=True)
    return sorted(set(held.values_list("job_id", flat=True)))


def reclaim_get(*, pool: str, reclaim_id: int) -> Reclaim | None:
    """Reclaim ``reclaim_id`` of ``pool``; None for another pool's, or an id no row can have."""
    if not 0 < reclaim_id <= BIGINT_MAX:
        return None
    return Reclaim.objects.select_related("requested_by").filter(pk=reclaim_id, pool=pool).first()


def reclaims_open() -> QuerySet[Reclaim]:
    """The reclaims still giving nodes back, oldest first (the progress beat walks them)."""
    return Reclaim.objects.filter(finished_at__isnull=True).order_by("requested_at", "pk")


def reclaims_recent(*, limit: int = RECENT_RECLAIMS) -> list[Reclaim]:
    """Every open reclaim and the latest finished ones, newest first, at most ``limit`` in all. One query."""
    newest = Reclaim.objects.select_related("requested_by").order_by(
        F("finished_at").desc(nulls_first=True), "-requested_at", "-pk"
    )
    return list(newest[:limit])


def reclaims_late_count() -> int:
    """Reclaims that were not met within their deadline, ever (Prometheus). One query."""
    return Reclaim.objects.filter(late=True).count()
