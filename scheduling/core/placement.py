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

Every model also keeps *long* jobs off short-only GPUs (``NodeView.short_only``): a job may use them only when
its time limit is at most the model's ``short_limit`` (0, the default, lets no job use them). A long job is placed
in the pool's ``open`` view, so none of its GPUs, on any node of a gang, is short-only.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from scheduling.core.durations import format_duration
from scheduling.core.model import (
    Decision,
    GpuSlot,
    JobId,
    JobState,
    JobView,
    NodeView,
    Snapshot,
    Wait,
    WaitReason,
    gpu_count,
)
from scheduling.core.pool import FreePool

#: Model-name prefixes whose training slows badly when spread across nodes. Tiresias (NSDI'19, section 4)
#: measured that models with a skewed tensor-size distribution (a few large layers) are the consolidation-sensitive
#: ones; VGG and AlexNet are its examples, ResNet and Inception are not.
SPREAD_SENSITIVE_MODELS: tuple[str, ...] = ("vgg", "alexnet")


#: What decides whether a job fits a pool: its GPU count, whether it must stay consolidated (spread-sensitive),
#: and whether it may use short-only GPUs.
Shape = tuple[int, bool, bool]


def spread_sensitive(model: str) -> bool:
    """True when the job's model is known to need a consolidated placement."""
    return bool(model) and model.lower().startswith(SPREAD_SENSITIVE_MODELS)


class PlacementModel:
    """Chooses concrete GPUs for one gang job from the round's :class:`FreePool`, or returns None.

    ``short_limit`` is the longest time limit (seconds) with which a job may use short-only GPUs; 0 lets none.
    """

    name: ClassVar[str] = ""

    def __init__(self, *, short_limit: float = 0.0) -> None:
        self.short_limit = short_limit

    def place(self, pool: FreePool, job: JobView) -> list[GpuSlot] | None:
        raise NotImplementedError

    def may_use_short_only(self, job: JobView) -> bool:
        """True for a short job: one whose time limit is at most :attr:`short_limit`."""
        limit = job.time_limit
        return limit is not None and limit <= self.short_limit

    def usable(self, pool: FreePool, job: JobView) -> FreePool:
        """The pool ``job`` may take GPUs from: all of it, or its ``open`` view for a long job."""
        if pool.open is not None and not self.may_use_short_only(job):
            return pool.open
        return pool

    def shape(self, job: JobView) -> Shape:
        """The part of a job that decides whether it fits: two jobs with the same shape fit or fail together in a
        pool that only shrinks, which lets a round remember failures instead of retrying them. A short job fits
        where a long one of the same size may not (short-only GPUs are free to it), so shortness is part of it."""
        return (job.gpus, False, self.may_use_short_only(job))

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
        if pool.open is not None:
            pool = self.usable(pool, job)
        return _fewest_nodes(pool, job.gpus)


class ConsolidatePlacement(PlacementModel):
    """Helios-style: a job of at most one node's GPUs on one node; larger jobs on whole nodes."""

    name = "consolidate"

    def place(self, pool: FreePool, job: JobView) -> list[GpuSlot] | None:
        if pool.open is not None:
            pool = self.usable(pool, job)
        return _consolidated(pool, job.gpus)


class TopologyPlacement(PlacementModel):
    """Fewest nodes, then fewest racks; spread-sensitive models are kept consolidated."""

    name = "topology"

    def shape(self, job: JobView) -> Shape:
        return (job.gpus, spread_sensitive(job.model), self.may_use_short_only(job))

    def place(self, pool: FreePool, job: JobView) -> list[GpuSlot] | None:
        if pool.open is not None:
            pool = self.usable(pool, job)
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


def resolve_placement(placement: str | PlacementModel, *, short_limit: float = 0.0) -> PlacementModel:
    """A placement model from its name (letting jobs with a time limit up to ``short_limit`` use short-only
    GPUs), or the model itself, unchanged."""
    if isinstance(placement, PlacementModel):
        return placement
    try:
        model = PLACEMENTS[placement]
    except KeyError:
        raise ValueError(f"unknown placement {placement!r}; choose one of {', '.join(PLACEMENTS)}") from None
    return model(short_limit=short_limit)


#: Wait reasons that only say "the GPUs are not there"; a long job left with one of them may be waiting only
#: because the GPUs that would hold it are short-only.
_CAPACITY_REASONS = frozenset({WaitReason.NOT_ENOUGH_FREE_GPUS, WaitReason.NO_NODE_FITS, WaitReason.LOWER_PRIORITY})


@dataclass(frozen=True, slots=True)
class _FreeGpus:
    """Free GPUs of the schedulable nodes at one moment of a round, with and without the short-only ones."""

    every: tuple[NodeView, ...]
    not_barred: tuple[NodeView, ...]
    free: int
    barred: int

    @classmethod
    def of(cls, nodes: tuple[NodeView, ...], taken: frozenset[GpuSlot]) -> _FreeGpus:
        every: list[NodeView] = []
        not_barred: list[NodeView] = []
        free = barred_free = 0
        for node in nodes:
            if not node.schedulable:
                continue
            barred = frozenset(node.short_only)
            ids = tuple(g for g in node.free_gpus if GpuSlot(node.name, g) not in taken) if taken else node.free_gpus
            open_ids = tuple(g for g in ids if g not in barred)
            free += len(ids)
            barred_free += len(ids) - len(open_ids)
            every.append(NodeView(node.name, node.total_gpus, ids, rack=node.rack))
            not_barred.append(NodeView(node.name, node.total_gpus - len(barred), open_ids, rack=node.rack))
        return cls(_with_free(every), _with_free(not_barred), free, barred_free)

    def only_short_only_fit(self, placement: PlacementModel, job: JobView) -> bool:
        """True when ``job`` fits these GPUs, and not without the short-only ones."""
        return (
            placement.place(FreePool(self.every), job) is not None
            and placement.place(FreePool(self.not_barred), job) is None
        )


def _with_free(nodes: list[NodeView]) -> tuple[NodeView, ...]:
    """The nodes that have a free GPU, plus the largest node if it has none: a node without free GPUs changes no
    placement except through the pool's largest node size (``consolidate`` keeps jobs that fit one node on one)."""
    kept = [node for node in nodes if node.free_gpus]
    largest = max(nodes, key=lambda node: node.total_gpus, default=None)
    if largest is not None and not largest.free_gpus:
        kept.append(largest)
    return tuple(kept)


def explain_short_only(snapshot: Snapshot, decision: Decision, placement: PlacementModel) -> Decision:
    """``decision`` with the reason of every long job that only short-only GPUs would hold made
    :attr:`WaitReason.SHORT_JOBS_ONLY`, saying how many are free and which time limit would let the job use them.

    The round counts short-only GPUs as free, so such a job would otherwise read "not in a usable shape" or "jobs
    ahead of it took the GPUs". A job is relabelled when it fits the GPUs left free after the decision's starts
    only with the short-only ones, or else the GPUs free at the start of the round (a short job may have taken
    the short-only GPUs since); checked once per job shape. Only reasons about free capacity are relabelled: caps,
    head-of-line blocking and preemption keep theirs. A snapshot without short-only GPUs gets ``decision`` back as
    it is, after one look at each node.
    """
    if not any(node.short_only and node.schedulable for node in snapshot.nodes):
        return decision
    asked = {job_id for job_id, wait in decision.waiting.items() if wait.reason in _CAPACITY_REASONS}
    jobs = [
        job
        for job in snapshot.jobs
        if job.id in asked and job.state == JobState.PENDING and not placement.may_use_short_only(job)
    ]
    if not jobs:
        return decision
    if placement.short_limit > 0:
        rule = f"only jobs with a time limit of at most {format_duration(placement.short_limit)} may use cordoned GPUs"
    else:
        rule = "cordoned GPUs take no new jobs"
    taken = frozenset(slot for start in decision.start for slot in start.slots)
    moments: list[_FreeGpus] = []  # after the starts, then at the start of the round; each built when first needed
    waits: dict[Shape, Wait | None] = {}  # per job shape: the new wait, or None to keep the old one
    waiting: dict[JobId, Wait] = dict(decision.waiting)
    changed = False
    for job in jobs:
        shape = placement.shape(job)
        if shape not in waits:
            waits[shape] = None
            for moment in range(2):
                if len(moments) == moment:
                    moments.append(_FreeGpus.of(snapshot.nodes, taken if moment == 0 else frozenset()))
                free = moments[moment]
                if free.only_short_only_fit(placement, job):
                    verb = "is" if free.barred == 1 else "are"
                    detail = (
                        f"needs {gpu_count(job.gpus)}; {free.barred} of {gpu_count(free.free)} free {verb} cordoned"
                    )
                    waits[shape] = Wait(WaitReason.SHORT_JOBS_ONLY, f"{detail}; {rule}")
                    break
        new = waits[shape]
        if new is not None:
            waiting[job.id] = new
            changed = True
    return Decision(start=decision.start, preempt=decision.preempt, waiting=waiting) if changed else decision
