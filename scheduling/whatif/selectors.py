"""Reads for the what-if pages: past runs, and the live cluster's shape as a starting point for a replay."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from datetime import datetime

from django.db.models import Count, Q, QuerySet

from portal.jobs.selectors import job_history_jobs
from portal.nodes.models import Node, NodeState
from scheduling.whatif.models import WhatIfRun


def whatif_list(*, limit: int = 50) -> QuerySet[WhatIfRun]:
    """The latest runs, newest first, with who asked (one query)."""
    return WhatIfRun.objects.select_related("requested_by").order_by("-created_at", "-pk")[:limit]


def whatif_get(*, run_id: int) -> WhatIfRun | None:
    return WhatIfRun.objects.select_related("requested_by").filter(pk=run_id).first()


@dataclass(frozen=True, slots=True)
class ClusterShape:
    nodes: int
    gpus_per_node: int
    racks: int


def whatif_live_cluster() -> ClusterShape | None:
    """The live cluster as the uniform cluster a replay needs: the nodes that are not down and have GPUs, the most
    common GPU count among them (ties: the larger), and the racks they name (at least 1). None when no such node
    exists. The simulator's nodes are all alike, so a mixed cluster is only approximated; the form lets the admin
    change it."""
    rows = list(
        Node.objects.exclude(state=NodeState.DOWN)
        .annotate(gpu_count=Count("gpus", filter=Q(gpus__present=True)))
        .filter(gpu_count__gt=0)
        .values_list("gpu_count", "rack")
    )
    if not rows:
        return None
    counts = Counter(gpus for gpus, _ in rows)
    gpus_per_node = max(counts, key=lambda g: (counts[g], g))
    racks = len({rack for _, rack in rows if rack}) or 1
    return ClusterShape(nodes=len(rows), gpus_per_node=gpus_per_node, racks=min(racks, len(rows)))


def whatif_window_has_jobs(*, since: datetime | None, until: datetime | None) -> bool:
    """Whether the history export lists any job submitted in ``[since, until)`` (the same rule the replay reads)."""
    return job_history_jobs(since=since, until=until).exists()
