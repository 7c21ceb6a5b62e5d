"""Placement models: the policy decides *who* runs, placement decides *where*.

Most of the disagreement between published GPU-cluster simulators comes from this step, so it is explicit and
named. Every model returns concrete :class:`GpuSlot` values (real free GPU ids) or ``None`` when it finds no
arrangement; none of them ever looks at other jobs.

- ``count``: only the number of free GPUs matters (the Tiresias reference simulator's setting). Slots still come
  from as few nodes as is cheap to find, but a job is placeable whenever enough GPUs are free anywhere.
- ``consolidate``: a job that fits one node must get one node; larger jobs take whole free nodes plus, for a
  remainder, one more node (the Helios simulator's setting).
- ``topology``: fewest nodes, then fewest racks. Jobs training a model that is sensitive to being spread
  (Tiresias's skew rule: VGG- and AlexNet-like models with a few huge tensors) are held to the consolidated shape.
"""

from __future__ import annotations

from typing import ClassVar

from scheduling.core.model import GpuSlot, JobView
from scheduling.core.pool import FreePool

#: Model-name prefixes whose training slows badly when spread across nodes. Tiresias (NSDI'19, section 4)
#: measured that models with a skewed tensor-size distribution (a few large layers) are the consolidation-sensitive
#: ones; VGG and AlexNet are its examples, ResNet and Inception are not.
SPREAD_SENSITIVE_MODELS: tuple[str, ...] = ("vgg", "alexnet")


def spread_sensitive(model: str) -> bool:
    """True when the job's model is known to need a consolidated placement."""
    return bool(model) and model.lower().startswith(SPREAD_SENSITIVE_MODELS)


class PlacementModel:
    """Chooses concrete GPUs for one gang job from the round's :class:`FreePool`, or returns None."""

    name: ClassVar[str] = ""

    def place(self, pool: FreePool, job: JobView) -> list[GpuSlot] | None:
        raise NotImplementedError

    def shape(self, job: JobView) -> tuple[int, bool]:
        """The part of a job that decides whether it fits: two jobs with the same shape fit or fail together in a
        pool that only shrinks, which lets a round remember failures instead of retrying them."""
        return (job.gpus, False)

    def __repr__(self) -> str:
        return f"<placement {self.name}>"


def _fewest_nodes(pool: FreePool, need: int) -> list[GpuSlot] | None:
    """One node if any holds the job (best fit), else the nodes with most free GPUs first."""
    if need > pool.total_free:
        return None
    node = pool.best_fit_node(need)
    if node is not None:
        return pool.take(node, need)
    slots: list[GpuSlot] = []
    for node in pool.nodes_by_free_desc():
        take = min(need - len(slots), pool.free_on(node))
        slots += pool.take(node, take)
        if len(slots) == need:
            return slots
    raise AssertionError("pool.total_free disagrees with its nodes")  # pragma: no cover


def _consolidated(pool: FreePool, need: int) -> list[GpuSlot] | None:
    """One node for a job that fits one; otherwise whole free nodes plus one node for the remainder."""
    if need > pool.total_free:
        return None
    if need <= pool.max_capacity:
        node = pool.best_fit_node(need)
        return None if node is None else pool.take(node, need)
    chosen: list[int] = []
    remaining = need
    for node in pool.whole_free_nodes():
        if remaining >= pool.capacity[node]:
            chosen.append(node)
            remaining -= pool.capacity[node]
        if remaining == 0:
            break
    tail: int | None = None
    if remaining:
        taken = set(chosen)
        for k in range(remaining, pool.max_capacity + 1):
            tail = min((i for i in pool.buckets[k] if i not in taken), default=None)
            if tail is not None:
                break
        if tail is None:
            return None
    slots: list[GpuSlot] = []
    for node in chosen:
        slots += pool.take(node, pool.capacity[node])
    if tail is not None:
        slots += pool.take(tail, remaining)
    return slots


class CountPlacement(PlacementModel):
    """Only the count matters: placeable whenever ``gpus <= free GPUs`` anywhere."""

    name = "count"

    def place(self, pool: FreePool, job: JobView) -> list[GpuSlot] | None:
        return _fewest_nodes(pool, job.gpus)


class ConsolidatePlacement(PlacementModel):
    """Helios-style: a job of at most one node's GPUs on one node; larger jobs on whole nodes."""

    name = "consolidate"

    def place(self, pool: FreePool, job: JobView) -> list[GpuSlot] | None:
        return _consolidated(pool, job.gpus)


class TopologyPlacement(PlacementModel):
    """Fewest nodes, then fewest racks; spread-sensitive models are kept consolidated."""

    name = "topology"

    def shape(self, job: JobView) -> tuple[int, bool]:
        return (job.gpus, spread_sensitive(job.model))

    def place(self, pool: FreePool, job: JobView) -> list[GpuSlot] | None:
        need = job.gpus
        if need > pool.total_free:
            return None
        node = pool.best_fit_node(need)
        if node is not None:
            return pool.take(node, need)
        if spread_sensitive(job.model):
            return _consolidated(pool, need)
        return self._across_nodes(pool, need)

    @staticmethod
    def _across_nodes(pool: FreePool, need: int) -> list[GpuSlot]:
        order = pool.nodes_by_free_desc()
        # The fewest nodes any arrangement can use: the most-free nodes, in order, until the job is covered.
        fewest, covered = 0, 0
        while covered < need:
            covered += pool.free_on(order[fewest])
            fewest += 1
        # Prefer one rack that can do it with that many nodes; else fill racks with the most free GPUs first.
        by_rack: dict[str, list[int]] = {}
        for node in order:
            by_rack.setdefault(pool.racks[node], []).append(node)
        racks = sorted(by_rack.values(), key=lambda nodes: -sum(pool.free_on(n) for n in nodes[:fewest]))
        plan: list[int] = []
        covered = 0
        for nodes in racks:
            for node in nodes:
                plan.append(node)
                covered += pool.free_on(node)
                if covered >= need:
                    break
            if covered >= need:
                break
        if len(plan) > fewest:  # rack-greedy cost extra nodes: nodes matter more than racks
            plan = order[:fewest]
        slots: list[GpuSlot] = []
        for node in plan:
            slots += pool.take(node, min(need - len(slots), pool.free_on(node)))
        return slots


PLACEMENTS: dict[str, type[PlacementModel]] = {
    CountPlacement.name: CountPlacement,
    ConsolidatePlacement.name: ConsolidatePlacement,
    TopologyPlacement.name: TopologyPlacement,
}


def resolve_placement(placement: str | PlacementModel) -> PlacementModel:
    """A placement model from its name or itself."""
    if isinstance(placement, PlacementModel):
        return placement
    try:
        return PLACEMENTS[placement]()
    except KeyError:
        raise ValueError(f"unknown placement {placement!r}; choose one of {', '.join(PLACEMENTS)}") from None
