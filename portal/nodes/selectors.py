"""Reads of nodes and GPUs for the node pages, the nodes API and /metrics."""

from __future__ import annotations

from dataclasses import dataclass

from django.db.models import QuerySet

from portal.jobs.models import Allocation
from portal.nodes.models import Gpu, Node, NodeState


def gpu_holders() -> dict[int, int]:
    """Which job holds each allocated GPU right now: GPU id -> job id. The one definition of a busy GPU (an
    allocation not yet released) that every page and the API use. One query."""
    return dict(Allocation.objects.filter(released_at__isnull=True).values_list("gpu_id", "job_id"))


def present_gpu_count() -> int:
    """GPUs the cluster has: present on a registered node, whatever their health or their node's state."""
    return Gpu.objects.filter(present=True).count()


@dataclass(frozen=True, slots=True)
class NodeRow:
    """One node of the node list: its present GPUs in index order, each with the job holding it (or None)."""

    node: Node
    gpus: list[tuple[Gpu, int | None]]


@dataclass(frozen=True, slots=True)
class NodeList:
    rows: list[NodeRow]
    gpu_total: int
    gpu_busy: int


def node_list() -> NodeList:
    """Every node with its GPUs and their holders, and the cluster's GPU counts. Three queries."""
    busy = gpu_holders()
    nodes: QuerySet[Node] = Node.objects.prefetch_related("gpus").order_by("name")
    rows = [
        NodeRow(node=n, gpus=[(g, busy.get(g.pk)) for g in sorted(n.gpus.all(), key=lambda g: g.index) if g.present])
        for n in nodes
    ]
    return NodeList(rows=rows, gpu_total=present_gpu_count(), gpu_busy=len(busy))


@dataclass(frozen=True, slots=True)
class GpuInventoryRow:
    """A present GPU as the scheduler sees it: its id, node, NVML index and health."""

    gpu_id: int
    node_id: int
    index: int
    health: str


def nodes_not_down() -> list[Node]:
    """Nodes that are up or draining, by name: what a scheduling round looks at. One query."""
    return list(Node.objects.exclude(state=NodeState.DOWN).order_by("name"))


def gpus_present_on(*, nodes: list[Node]) -> list[GpuInventoryRow]:
    """The present GPUs of ``nodes``, whatever their health. One query."""
    return [
        GpuInventoryRow(gpu_id=g, node_id=n, index=i, health=h)
        for g, n, i, h in Gpu.objects.filter(present=True, node__in=nodes).values_list(
            "id", "node_id", "index", "health"
        )
    ]
