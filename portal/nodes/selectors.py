"""Reads of nodes and GPUs for the node pages, the nodes API and /metrics."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from django.db.models import Count, Q, QuerySet

from portal.jobs.models import Allocation
from portal.jobs.selectors import fenced_allocations, stopping_allocations
from portal.nodes.models import Gpu, Node, NodeState


def gpu_holders() -> dict[int, int]:
    """Which job holds each allocated GPU right now: GPU id -> job id. The one definition of a busy GPU (an
    allocation not yet released) that every page and the API use. One query."""
    return dict(Allocation.objects.filter(released_at__isnull=True).values_list("gpu_id", "job_id"))


def share_client_counts() -> dict[int, int]:
    """GPU id -> the shares (issue #17) holding it now, stopping ones included as :func:`gpu_holders` includes them;
    GPUs without a share are absent. What tells a shared GPU's state from a whole GPU's. One query."""
    rows = (
        Allocation.objects.filter(released_at__isnull=True, compute_percent__isnull=False)
        .values("gpu_id")
        .annotate(n=Count("id"))
        .order_by()
        .values_list("gpu_id", "n")
    )
    return dict(rows)


def present_gpu_count(*, whole_only: bool = False) -> int:
    """GPUs the cluster has: present on a registered node, whatever their health or their node's state. With
    ``whole_only``, only those that take whole-GPU jobs: a GPU an admin marked shared takes only shares (#17)."""
    gpus = Gpu.objects.filter(present=True)
    return (gpus.filter(shared=False) if whole_only else gpus).count()


def present_gpu_split() -> tuple[int, int]:
    """(GPUs that take whole-GPU jobs, GPUs marked shared) among those :func:`present_gpu_count` counts. One query."""
    counts = Gpu.objects.filter(present=True).aggregate(
        whole=Count("pk", filter=Q(shared=False)), shared=Count("pk", filter=Q(shared=True))
    )
    return counts["whole"], counts["shared"]


def cluster_has_gpus(count: int) -> bool:
    """Whether the cluster has at least ``count`` GPUs that take whole-GPU jobs (as ``present_gpu_count(whole_only=
    True)`` counts them). Reads at most ``count`` rows, where counting all 10,000 GPUs of a large cluster cost a
    millisecond on every submission."""
    return count <= 0 or Gpu.objects.filter(present=True, shared=False).order_by()[count - 1 : count].exists()


def largest_shared_gpu_bytes() -> int | None:
    """The memory of the largest present GPU that accepts shares (issue #17), in bytes; None when no GPU does. What
    a share's memory limit is checked against at submit. One query."""
    mb = Gpu.objects.filter(present=True, shared=True).order_by("-memory_mb").values_list("memory_mb", flat=True)
    first = mb.first()
    return None if first is None else first * (1 << 20)


def stopping_gpu_ids() -> set[int]:
    """GPUs held by attempts that are over (their processes are stopping, or their node is fenced). One query."""
    return set(stopping_allocations().values_list("gpu_id", flat=True))


def fenced_gpu_counts(*, node: Node | None = None) -> Counter[int]:
    """Node id -> GPUs its lost tasks still hold (of ``node`` only, when given): a node with any is *fenced* until its
    agent registers again having killed what it ran, or an admin releases them. One query."""
    rows = fenced_allocations()
    if node is not None:
        rows = rows.filter(node=node)
    return Counter(rows.values_list("node_id", flat=True))


@dataclass(frozen=True, slots=True)
class NodeRow:
    """One node of the node list: its present GPUs in index order, each with the job holding it (or None), whether
    that job's processes are stopping, and how many shares hold it (#17; 0 on a GPU no share holds, and then the job
    is one of them, so the page names the count instead); ``fenced`` counts GPUs held by its lost tasks."""

    node: Node
    gpus: list[tuple[Gpu, int | None, bool, int]]
    fenced: int = 0


@dataclass(frozen=True, slots=True)
class NodeList:
    rows: list[NodeRow]
    gpu_total: int
    gpu_busy: int
    #: Of ``gpu_busy``, the GPUs that shares of a GPU hold (issue #17).
    gpu_shared_busy: int = 0


def node_list() -> NodeList:
    """Every node with its GPUs and their holders, and the cluster's GPU counts. Six queries."""
    busy = gpu_holders()
    clients = share_client_counts()
    stopping = stopping_gpu_ids()
    fenced = fenced_gpu_counts()
    nodes: QuerySet[Node] = Node.objects.prefetch_related("gpus").order_by("name")
    rows = [
        NodeRow(
            node=n,
            gpus=[
                (g, busy.get(g.pk), g.pk in stopping, clients.get(g.pk, 0))
                for g in sorted(n.gpus.all(), key=lambda g: g.index)
                if g.present
            ],
            fenced=fenced[n.pk],
        )
        for n in nodes
    ]
    return NodeList(rows=rows, gpu_total=present_gpu_count(), gpu_busy=len(busy), gpu_shared_busy=len(clients))


@dataclass(frozen=True, slots=True)
class GpuInventoryRow:
    """A present GPU as the scheduler sees it: its id, node, NVML index and health, and whether it is shared
    (issue #17: then it takes shares only, never a whole-GPU job), with its memory and client limit."""

    gpu_id: int
    node_id: int
    index: int
    health: str
    shared: bool = False
    memory_mb: int = 0
    max_clients: int = 48


def nodes_not_down() -> list[Node]:
    """Nodes that are up or draining, by name: what a scheduling round looks at. One query."""
    return list(Node.objects.exclude(state=NodeState.DOWN).order_by("name"))


def gpus_present_on(*, nodes: list[Node]) -> list[GpuInventoryRow]:
    """The present GPUs of ``nodes``, whatever their health. One query."""
    return [
        GpuInventoryRow(gpu_id=g, node_id=n, index=i, health=h, shared=s, memory_mb=m, max_clients=c)
        for g, n, i, h, s, m, c in Gpu.objects.filter(present=True, node__in=nodes).values_list(
            "id", "node_id", "index", "health", "shared", "memory_mb", "max_clients"
        )
    ]
