"""The cluster a replay runs on, and which jobs of a trace could ever run on it.

Kept apart from the event loop (:mod:`scheduling.sim.simulator`, which re-exports both names) because callers that
only describe or validate a replay's cluster (the what-if setup, the CLI) need no more than this.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from scheduling.core.model import TenantLimits
from scheduling.core.pool import FreePool
from scheduling.sim.trace import TraceJob


@dataclass(frozen=True, slots=True)
class Cluster:
    """``nodes`` x ``gpus_per_node`` GPUs, nodes spread evenly over ``racks``; or, when ``layout`` is given (see
    :meth:`of_nodes`), exactly the nodes it lists as (GPUs, rack) pairs: a copy of a real cluster, mixed sizes and
    all, which is what a replay of that cluster's own history should run on."""

    nodes: int
    gpus_per_node: int
    racks: int = 1
    layout: tuple[tuple[int, str], ...] = ()

    @classmethod
    def of_nodes(cls, layout: Sequence[tuple[int, str]]) -> Cluster:
        """The cluster of these (GPUs, rack) nodes; ``gpus_per_node`` is the largest node's, ``racks`` the racks
        named. Refuses (``ValueError``) an empty layout or a node without GPUs."""
        if not layout:
            raise ValueError("a cluster needs at least one node")
        if any(gpus < 1 for gpus, _ in layout):
            raise ValueError("every node needs at least one GPU")
        shapes = tuple((int(gpus), str(rack)) for gpus, rack in layout)
        return cls(len(shapes), max(g for g, _ in shapes), len({r for _, r in shapes}), shapes)

    @property
    def total_gpus(self) -> int:
        return sum(g for g, _ in self.layout) if self.layout else self.nodes * self.gpus_per_node

    def free_pool(self) -> FreePool:
        """All of the cluster's GPUs, free: where a replay starts."""
        if self.layout:
            return FreePool.of_sizes(self.layout)
        return FreePool.uniform(self.nodes, self.gpus_per_node, self.racks)

    def describe(self) -> str:
        """``2 x 4 GPUs`` for a uniform cluster; ``3 nodes, 20 GPUs`` for a laid-out one."""
        if self.layout:
            return f"{self.nodes} node{'s' * (self.nodes != 1)}, {self.total_gpus} GPU{'s' * (self.total_gpus != 1)}"
        return f"{self.nodes} x {self.gpus_per_node} GPUs"


def can_ever_run(job: TraceJob, cluster: Cluster, tenants: Mapping[str, TenantLimits]) -> bool:
    """Whether ``job`` fits the cluster and its tenant's and user's caps at all; a replay skips (and counts) the
    jobs that do not, rather than leaving them waiting for ever."""
    if job.gpus < 1 or job.gpus > cluster.total_gpus:
        return False
    lim = tenants.get(job.tenant)
    if lim is None:
        return True
    return (lim.gpu_cap is None or job.gpus <= lim.gpu_cap) and (lim.user_cap is None or job.gpus <= lim.user_cap)
