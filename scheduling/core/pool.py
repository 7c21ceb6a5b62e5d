"""The free GPUs of one scheduling round, as a small mutable index.

A round starts from the nodes of a :class:`~scheduling.core.model.Snapshot` (``decide``) or from the simulator's
persistent pool, and placements take GPUs out of it as jobs are started. Nodes are bucketed by their free count so
"the fullest node that still fits" and "a wholly free node" are found in O(GPUs per node), not O(nodes): a round
over 10k GPUs must stay well under a frame of work.

Only schedulable nodes are in the pool. GPUs on a draining node are invisible: a preempted job's GPUs there are
not handed to anyone else.

Short-only GPUs (``NodeView.short_only``: soft-cordoned in the live loop) are in the pool, but a job that may not
use them (a long one) is placed in :attr:`FreePool.open`, a second pool over the same nodes without them. The two
are kept in step: a GPU taken through either is gone from both. A pool without short-only GPUs has no ``open``
view and pays one ``None`` check per placement, so the simulator and a healthy cluster run as before.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from scheduling.core.model import GpuSlot, NodeView


class FreePool:
    """Free GPU ids per node, with nodes bucketed by how many GPUs they have free.

    Ties between equally free nodes go to the node listed first, so a placement depends only on which GPUs are
    free now, never on the order in which they were freed: the simulator's long-lived pool and ``decide``'s fresh
    one always agree.
    """

    __slots__ = (
        "names",
        "racks",
        "capacity",
        "free",
        "buckets",
        "total_free",
        "max_capacity",
        "index",
        "complete",
        "short_only",
        "open",
        "main",
    )

    def __init__(self, nodes: Iterable[NodeView]) -> None:
        self.names: list[str] = []
        self.racks: list[str] = []
        self.capacity: list[int] = []
        self.free: list[list[int]] = []
        self.index: dict[str, int] = {}
        #: Node number -> its short-only GPU ids (free or not); empty when the pool has none.
        self.short_only: dict[int, frozenset[int]] = {}
        #: The same nodes without their short-only GPUs, where long jobs are placed; None when there are none.
        self.open: FreePool | None = None
        #: For an ``open`` view: the whole pool it belongs to (GPUs taken here are taken there too).
        self.main: FreePool | None = None
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
            if node.short_only:
                self.short_only[i] = frozenset(node.short_only)
        if self.short_only:
            self.open = self._open_view(usable)

    def _open_view(self, usable: list[NodeView]) -> FreePool:
        """The pool a long job sees: every node (same numbers), none of the short-only GPUs."""
        views = []
        for i, node in enumerate(usable):
            barred = self.short_only.get(i, frozenset())
            views.append(
                NodeView(
                    name=node.name,
                    total_gpus=self.capacity[i] - len(barred),
                    free_gpus=tuple(g for g in node.free_gpus if g not in barred),
                    rack=node.rack,
                )
            )
        view = FreePool(views)
        view.main = self
        return view

    @classmethod
    def uniform(cls, nodes: int, gpus_per_node: int, racks: int = 1) -> FreePool:
        """A homogeneous, wholly free cluster (the simulator's starting point). GPU ids are ``node * G + k``."""
        per_rack = max(1, -(-nodes // max(1, racks)))
        return cls.of_sizes([(gpus_per_node, f"r{i // per_rack}") for i in range(nodes)])

    @classmethod
    def of_sizes(cls, sizes: Sequence[tuple[int, str]]) -> FreePool:
        """A wholly free cluster of nodes with ``(GPUs, rack)`` each, named ``n0``, ``n1``, ... in order. GPU ids
        count on from node to node, so a uniform cluster's are ``node * G + k``."""
        views = []
        first = 0
        for i, (gpus, rack) in enumerate(sizes):
            views.append(
                NodeView(name=f"n{i}", total_gpus=gpus, free_gpus=tuple(range(first, first + gpus)), rack=rack)
            )
            first += gpus
        return cls(views)

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
        """Remove ``count`` GPUs (lowest ids first) from ``node`` and return them as slots.

        In a pool with short-only GPUs, a short job taking GPUs here gets the node's short-only ones first, which
        leaves the others to jobs that can use nothing else; the ``open`` or ``main`` view loses the same GPUs.
        """
        if self.open is not None or self.main is not None:
            return self._take_in_step(node, count)
        ids = self.free[node]
        before = len(ids)
        taken = ids[:count]
        del ids[:count]
        self.total_free -= count
        del self.buckets[before][node]
        self.buckets[before - count][node] = None
        name = self.names[node]
        return [GpuSlot(name, g) for g in taken]

    def _take_in_step(self, node: int, count: int) -> list[GpuSlot]:
        barred = self.short_only.get(node, frozenset())
        ids = self.free[node]
        taken = sorted(ids, key=lambda g: g not in barred)[:count] if barred else ids[:count]
        self._drop(node, taken)
        if self.open is not None:
            self.open._drop(node, [g for g in taken if g not in barred])
        elif self.main is not None:
            self.main._drop(node, taken)
        name = self.names[node]
        return [GpuSlot(name, g) for g in sorted(taken)]

    def _drop(self, node: int, gpus: list[int]) -> None:
        """Remove these free GPUs of ``node`` from this pool only."""
        if not gpus:
            return
        ids = self.free[node]
        before = len(ids)
        for g in gpus:
            ids.remove(g)
        self.total_free -= len(gpus)
        del self.buckets[before][node]
        self.buckets[len(ids)][node] = None

    def give(self, slots: Iterable[GpuSlot]) -> None:
        """Return GPUs to the pool (a finished or preempted job). GPUs on nodes outside the pool are dropped.

        GPUs go back through the whole pool, which hands the ``open`` view its share; never give to a view."""
        if self.open is not None:
            slots = tuple(slots)
            self.open.give(s for s in slots if s.gpu not in self.short_only.get(self.index.get(s.node, -1), ()))
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
        if self.open is not None:
            slots = tuple(slots)
            self.open.take_exact(s for s in slots if s.gpu not in self.short_only.get(self.index[s.node], ()))
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
