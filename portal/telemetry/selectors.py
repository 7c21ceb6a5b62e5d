"""Reads of telemetry for the node page, the API and /metrics (``portal.metrics``), each in a fixed number of
queries (no N+1: a cluster of a thousand GPUs costs the same number of round trips as one of four), and the recent
utilization of shared GPUs that the scheduler's share round takes as their online client's load."""

from __future__ import annotations

import operator
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from functools import reduce

from django.conf import settings
from django.db.models import Avg, Count, OuterRef, Q, QuerySet, Subquery
from django.db.models.functions import Coalesce
from django.utils import timezone

from portal.jobs.models import Allocation
from portal.nodes.models import Gpu, Node
from portal.telemetry.models import Alert, FailureModel, GpuHealthEvent, NodeTelemetry, Sample, XidRecord
from telemetry.xid import describe

#: How many XIDs, health events and alerts the node page lists.
RECENT = 20


def gpus_with_telemetry() -> QuerySet[Gpu]:
    """Present GPUs with their node, latest sample, risk, the job holding each (``job_id``, ``tenant``) and the
    last XID it reported (``last_xid``), in one query."""
    holder = Allocation.objects.filter(gpu=OuterRef("pk"), released_at__isnull=True).order_by("-pk")
    last_xid = XidRecord.objects.filter(gpu=OuterRef("pk")).order_by("-at", "-pk")
    return (
        Gpu.objects.filter(present=True)
        .select_related("node", "latest_sample", "risk")
        .annotate(
            job_id=Subquery(holder.values("job_id")[:1]),
            tenant=Subquery(holder.values("job__tenant__slug")[:1]),
            last_xid=Subquery(last_xid.values("xid")[:1]),
        )
        .order_by("node__name", "index")
    )


def alert_list(*, node: str | None = None, active: bool | None = None) -> QuerySet[Alert]:
    """Alerts, newest first, optionally of one node and only the active (or only the resolved) ones."""
    alerts = Alert.objects.select_related("node", "gpu")
    if node:
        alerts = alerts.filter(node__name=node)
    if active is not None:
        alerts = alerts.filter(resolved_at__isnull=active)
    return alerts


@dataclass(frozen=True)
class NodePage:
    """Everything the node page shows."""

    node: Node
    gpus: Sequence[Gpu]
    telemetry: NodeTelemetry | None
    xids: list[tuple[XidRecord, str]]
    events: list[GpuHealthEvent]
    alerts: list[Alert]
    risk_threshold: float | None  # None: no validated threshold, scores are shown but nothing is cordoned
    now: datetime = field(default_factory=timezone.now)


def risk_threshold(model: FailureModel | None) -> float | None:
    """The score at or above which a GPU is cordoned: ``CORRAL_RISK_THRESHOLD`` when set, else the model's own
    alarm threshold, chosen on held-out data for a target precision. None (never cordon, only show scores) when
    the model could not meet that target: a threshold that misses it would cordon healthy GPUs by the dozen."""
    configured = getattr(settings, "CORRAL_RISK_THRESHOLD", None)
    if configured is not None:
        return float(configured)
    if model is None or not model.metrics.get("target_met"):
        return None
    return float(model.metrics["threshold"])


def node_page(*, name: str) -> NodePage | None:
    """The node called ``name`` with its GPUs' latest telemetry, health, risk, recent XIDs, health events and
    alerts (active ones first); None if there is no such node. Six queries whatever the node's size."""
    node = Node.objects.filter(name=name).first()
    if node is None:
        return None
    # How many shares hold each GPU (issue #17): on a shared GPU ``job_id`` is only one of them.
    clients = (
        Allocation.objects.filter(gpu=OuterRef("pk"), released_at__isnull=True, compute_percent__isnull=False)
        .order_by()
        .values("gpu")
        .annotate(n=Count("pk"))
        .values("n")
    )
    gpus = list(gpus_with_telemetry().filter(node=node).annotate(share_clients=Coalesce(Subquery(clients[:1]), 0)))
    xids = list(XidRecord.objects.filter(gpu__node=node).select_related("gpu")[:RECENT])
    events = list(GpuHealthEvent.objects.filter(gpu__node=node).select_related("gpu")[:RECENT])
    alerts = list(alert_list(node=name).order_by("resolved_at", "-at")[:RECENT])
    return NodePage(
        node=node,
        gpus=gpus,
        telemetry=NodeTelemetry.objects.filter(pk=node.pk).first(),
        xids=[(x, describe(x.xid)) for x in xids],
        events=events,
        alerts=sorted(alerts, key=lambda a: (a.resolved_at is not None, -a.at.timestamp())),
        risk_threshold=risk_threshold(FailureModel.objects.filter(active=True).defer("artifact").first()),
    )


def share_load_window() -> timedelta:
    """How far back :func:`recent_gpu_util` looks: ``CORRAL_SHARE_LOAD_WINDOW`` (seconds), read at call time."""
    return timedelta(seconds=float(getattr(settings, "CORRAL_SHARE_LOAD_WINDOW", 300)))


def recent_gpu_util(
    *, gpu_ids: Collection[int], now: datetime, not_before: Mapping[int, datetime] | None = None
) -> dict[int, float | None]:
    """Each GPU's mean ``gpu_util`` (percent) over its raw samples of the last :func:`share_load_window` up to
    ``now``, or from its ``not_before`` time when that is later; None for a GPU without a reading there.

    Raw samples rather than minute rollups: rollups trail the samples by a minute or more, and the share round
    wants the load as it is now. ``not_before`` keeps readings from before a client started (an idle GPU, or
    the previous tenant's work) out of what is taken as that client's load. One query (none without GPUs);
    the samples' unique (gpu, ts) index serves each GPU's range."""
    ids = set(gpu_ids)
    if not ids:
        return {}
    start = now - share_load_window()
    bounds = {g: max(start, (not_before or {}).get(g, start)) for g in ids}
    from_start = [g for g, since in bounds.items() if since == start]
    ranges = [Q(gpu_id=g, ts__gte=since) for g, since in bounds.items() if since != start]
    if from_start:
        ranges.append(Q(gpu_id__in=from_start, ts__gte=start))
    rows = (
        Sample.objects.filter(reduce(operator.or_, ranges), ts__lte=now, gpu_util__isnull=False)
        .values("gpu_id")
        .annotate(util=Avg("gpu_util"))
        .values_list("gpu_id", "util")
        .order_by()
    )
    found: dict[int, float | None] = dict.fromkeys(ids)
    found.update((gpu_id, float(util)) for gpu_id, util in rows if util is not None)
    return found
