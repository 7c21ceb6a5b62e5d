"""The free GPUs of one scheduling round, as a small mutable index.

A round starts from the nodes of a :class:`~scheduling.core.model.Snapshot` (``decide``) or from the simulator's
persistent pool, and placements take GPUs out of it as jobs are started. Nodes are bucketed by their free count so
"the fullest node that still fits" and "a wholly free node" are found in O(GPUs per node), not O(nodes): a round
over 10k GPUs must stay well under a frame of work.

Only schedulable nodes are in the pool. GPUs on a draining node are invisible: a preempted job's GPUs there are
not handed to anyone else.
"""

from __future__ import annotations

from collections.abc import Iterable

from scheduling.core.model import GpuSlot, NodeView


class FreePool:
    """Free GPU ids per node, with nodes bucketed by how many GPUs they have free.

    Ties between equally free nodes go to the node listed first, so a placement depends only on which GPUs are
    free now, never on the order in which they were freed: the simulator's long-lived pool and ``decide``'s fresh
    one always agree.
    """

    __slots__ = ("names", "racks", "capacity", "free", "buckets", "total_free", "max_capacity", "index", "complete")

    def __init__(self, nodes: Iterable[NodeView]) -> None:
        self.names: list[str] = []
        self.racks: list[str] = []
        self.capacity: list[int] = []
        self.free: list[list[int]] = []
        self.index: dict[str, int] = {}
        nodes = list(nodes)
        usable = [n for n in nodes if n.schedulable]
        self.complete = len(usable) == len(nodes)  # every node is in the pool: any allocation is reusable
        self.max_capacity = max((max(n.total_gpus, len(n.free_gpus)) for n in usable), default=0)
        self.buckets: list[dict[int, None]] = [{} for _ in range(self.max_capacity + 1)]
        self.total_free = 0
        for node in usable:
            i = len(self.names)
            self.index[node.name] = i
            self.names.append(node.name)
            self.racks.append(node.rack)
            self.capacity.append(max(node.total_gpus, len(node.free_gpus)))
            ids = sorted(node.free_gpus)
            self.free.append(ids)
            self.buckets[len(ids)][i] = None
            self.total_free += len(ids)

    @classmethod
    def uniform(cls, nodes: int, gpus_per_node: int, racks: int = 1) -> FreePool:
        """A homogeneous, wholly free cluster (the simulator's starting point). GPU ids are ``node * G + k``."""
        per_rack = max(1, -(-nodes // max(1, racks)))
        return cls(
            NodeView(
                name=f"n{i}",
                total_gpus=gpus_per_node,
                free_gpus=tuple(range(i * gpus_per_node, (i + 1) * gpus_per_node)),
                rack=f"r{i // per_rack}",
            )
            for i in range(nodes)
        )

    @property
    def empty(self) -> bool:
        """True when no node is schedulable at all (a different wait reason from "all GPUs busy")."""
        return not self.names

    def free_on(self, node: int) -> int:
        return len(self.free[node])

    def max_free(self) -> int:
        """The most GPUs free on any single node."""
        buckets = self.buckets
        for k in range(self.max_capacity, 0, -1):
            if buckets[k]:
                return k
        return 0

    def best_fit_node(self, need: int) -> int | None:
        """The node with the fewest free GPUs that still holds ``need`` (leaves big holes for big jobs)."""
        buckets = self.buckets
        for k in range(need, self.max_capacity + 1):
            bucket = buckets[k]
            if bucket:
                return min(bucket)
        return None

    def whole_free_nodes(self) -> list[int]:
        """Nodes with every GPU free, largest first (stable within a size)."""
        return [i for k in range(self.max_capacity, 0, -1) for i in sorted(self.buckets[k]) if self.capacity[i] == k]

    def nodes_by_free_desc(self) -> list[int]:
        """Nodes that have any free GPU, most free first."""
        return [i for k in range(self.max_capacity, 0, -1) for i in sorted(self.buckets[k])]

    def take(self, node: int, count: int) -> list[GpuSlot]:
        """Remove ``count`` GPUs (lowest ids first) from ``node`` and return them as slots."""
        ids = self.free[node]
        before = len(ids)
        taken = ids[:count]
        del ids[:count]
        self.total_free -= count
        del self.buckets[before][node]
        self.buckets[before - count][node] = None
        name = self.names[node]
        return [GpuSlot(name, g) for g in taken]

    def give(self, slots: Iterable[GpuSlot]) -> None:
        """Return GPUs to the pool (a finished or preempted job). GPUs on nodes outside the pool are dropped."""
        index = self.index
        for slot in slots:
            node = index.get(slot.node)
            if node is None:
                continue
            ids = self.free[node]
            before = len(ids)
            if before >= self.capacity[node]:
                raise ValueError(f"GPU {slot.gpu} returned to full node {slot.node}")
            ids.append(slot.gpu)
            if before and ids[-2] > slot.gpu:
                ids.sort()
            self.total_free += 1
            del self.buckets[before][node]
            self.buckets[before + 1][node] = None

    def holds(self, slots: Iterable[GpuSlot]) -> bool:
        """True when every one of ``slots`` is free in the pool (used to undo a preemption that freed nothing
        useful)."""
        index = self.index
        for slot in slots:
            node = index.get(slot.node)
            if node is None or slot.gpu not in self.free[node]:
                return False
        return True

    def take_exact(self, slots: Iterable[GpuSlot]) -> None:
        """Remove these exact GPUs (a job keeps the GPUs it already had)."""
        index = self.index
        for slot in slots:
            node = index[slot.node]
            ids = self.free[node]
            before = len(ids)
            ids.remove(slot.gpu)
            self.total_free -= 1
            del self.buckets[before][node]
            self.buckets[before - 1][node] = None

    def in_pool(self, slots: Iterable[GpuSlot]) -> int:
        """How many of ``slots`` are on schedulable nodes (GPUs a preemption would actually free)."""
        index = self.index
        return sum(1 for s in slots if s.node in index)
