"""Reads for the what-if pages: past runs, and the live cluster's shape as a starting point for a replay."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from datetime import datetime

from django.db.models import Count, Q, QuerySet

from portal.jobs.selectors import job_history_jobs
from portal.nodes.models import Gpu, Node, NodeState
from portal.whatif.models import WhatIfRun
from scheduling.core.sharing import DEFAULT_RESERVE_BYTES, MIB


def whatif_list(*, limit: int = 50) -> QuerySet[WhatIfRun]:
    """The latest runs, newest first, with who asked (one query)."""
    return WhatIfRun.objects.select_related("requested_by").order_by("-created_at", "-pk")[:limit]


def whatif_get(*, run_id: int) -> WhatIfRun | None:
    return WhatIfRun.objects.select_related("requested_by").filter(pk=run_id).first()


@dataclass(frozen=True, slots=True)
class ClusterShape:
    """The live cluster as a replay sees it: its nodes as (GPUs, rack) pairs, and the uniform cluster nearest to
    it (for the form's uniform fields: the most common GPU count, ties to the larger, and the racks named)."""

    layout: tuple[tuple[int, str], ...]
    nodes: int
    gpus_per_node: int
    racks: int

    @property
    def total_gpus(self) -> int:
        return sum(gpus for gpus, _ in self.layout)


def whatif_live_cluster() -> ClusterShape | None:
    """The nodes that are not down and have GPUs present, by name, with their GPU count and rack (one query); None
    when there is no such node. Draining nodes count: they are part of the cluster the history ran on. GPUs that
    are unhealthy now count too, for the same reason."""
    rows = list(
        Node.objects.exclude(state=NodeState.DOWN)
        .annotate(gpu_count=Count("gpus", filter=Q(gpus__present=True)))
        .filter(gpu_count__gt=0)
        .order_by("name")
        .values_list("gpu_count", "rack")
    )
    if not rows:
        return None
    counts = Counter(gpus for gpus, _ in rows)
    gpus_per_node = max(counts, key=lambda g: (counts[g], g))
    racks = len({rack for _, rack in rows if rack}) or 1
    return ClusterShape(
        layout=tuple((gpus, rack) for gpus, rack in rows),
        nodes=len(rows),
        gpus_per_node=gpus_per_node,
        racks=min(racks, len(rows)),
    )


def whatif_window_has_jobs(*, since: datetime | None, until: datetime | None) -> bool:
    """Whether the history export lists any job submitted in ``[since, until)`` (the same rule the replay reads)."""
    return job_history_jobs(since=since, until=until).exists()


#: A live shared GPU as a sharing replay copies it: (node, index, memory bytes, max clients).
SharedGpuRow = tuple[str, int, int, int]


def whatif_live_shared_gpus() -> list[SharedGpuRow]:
    """The GPUs an admin marked shared (issue #17) that are present on a node not down, by node and index (one
    query). Unhealthy ones count, as for :func:`whatif_live_cluster`; a GPU whose memory is unknown or below the
    driver's reserve cannot take a share and is left out, as the live share round leaves it out."""
    rows = (
        Gpu.objects.filter(shared=True, present=True)
        .exclude(node__state=NodeState.DOWN)
        .order_by("node__name", "index")
        .values_list("node__name", "index", "memory_mb", "max_clients")
    )
    return [
        (node, index, memory_mb * MIB, max_clients)
        for node, index, memory_mb, max_clients in rows
        if memory_mb * MIB > DEFAULT_RESERVE_BYTES
    ]
