"""The elastic step of a live round (issue #19): after the policy has placed every job's minimum, share out the
GPUs left idle among elastic jobs, by the multiple-choice knapsack of :mod:`scheduling.core.elastic`.

What is spare: the free GPUs of nodes that take work, less those the round's starts take, plus what running elastic
jobs hold above their minimums (keeping it is one of their choices), less what the jobs still waiting for GPUs
need (:data:`~scheduling.core.model.SHORT_OF_GPUS`). Minimums come first: a job waiting for GPUs makes elastic jobs
give their extras back, never the reverse. Cordoned (short-only) GPUs are never handed out as extras.

Two kinds of growth:

- a job the round starts grows for free: its placement is widened with free GPUs before it starts, on the nodes it
  already uses first, then on the nodes with most free GPUs (best fit decreasing, as Aryl places workers);
- a running job changes size only through a restart from its checkpoint (``resize``), charged its restart seconds
  and held by the hysteresis (a job started less than ``min_interval`` ago keeps its size).

Tenant and user caps still hold: a job grows only within what its tenant's and user's caps leave, never while a
job of its own tenant (or user) waits on that cap, and running elastic jobs give their extras back when those keep
such a job waiting. Sizes follow
:func:`size_ladder` (the minimum times a power of two, and the maximum).

A pending job that was stopped to grow (``gpus > min_gpus``) and which the round could not start, whatever the
reason (GPUs taken meanwhile, a cap), goes back to its minimum (``reset``): it never waits for GPUs it was only
offered while they were idle. Starting at its minimum, it is widened again if GPUs are idle then.

Pure: ``now`` is an argument, no I/O.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field

from scheduling.core.elastic import DEFAULT_CURVE, ElasticJob, ElasticPlan, Hysteresis, ScalingCurve, allocate_extra
from scheduling.core.model import SHORT_OF_GPUS, Decision, GpuSlot, JobId, JobView, Placement, Snapshot, WaitReason
from scheduling.core.states import JobState


@dataclass(frozen=True, slots=True)
class ElasticRules:
    """The live loop's settings: a resize's cost, the hysteresis, and the remaining time assumed for a job with
    no estimate (its gain is then a guess, the same for every such job, so sizes follow the scaling curves)."""

    restart_seconds: float = 60.0
    hysteresis: Hysteresis = Hysteresis(min_gain=60.0, min_interval=600.0)
    default_remaining: float = 3600.0


@dataclass(frozen=True, slots=True)
class ElasticOutcome:
    """The round's starts with elastic ones widened, the running jobs to restart at a new size, and the pending
    jobs to send back to their minimum."""

    start: tuple[Placement, ...]
    resize: dict[JobId, int] = field(default_factory=dict)
    reset: tuple[JobId, ...] = ()
    plan: ElasticPlan = field(default_factory=ElasticPlan)


def elastic_step(
    snapshot: Snapshot,
    decision: Decision,
    *,
    now: float,
    rules: ElasticRules = ElasticRules(),
    curves: Mapping[JobId, ScalingCurve] | None = None,
    remaining: Mapping[JobId, float | None] | None = None,
    frozen: Collection[JobId] = (),
) -> ElasticOutcome:
    """Size every elastic job for this round (see the module). ``frozen`` jobs keep their size (a stop is already
    on its way); ``remaining`` is seconds of work left per job (None or missing: ``rules.default_remaining``)."""
    curves = curves or {}
    remaining = remaining or {}
    views = {job.id: job for job in snapshot.jobs}
    starting = {p.job_id: p for p in decision.start}
    reset = tuple(job_id for job_id in decision.waiting if _grown(views.get(job_id)))
    free = _free_after(snapshot, decision)
    short = sum(
        _minimum(views[job_id]) if job_id in reset else views[job_id].gpus
        for job_id, wait in decision.waiting.items()
        if wait.reason in SHORT_OF_GPUS and job_id in views
    )
    candidates: list[ElasticJob] = []
    held_extra = 0
    idle = sum(len(gpus) for gpus in free.values())
    for job in snapshot.jobs:
        if not job.elastic or job.id in frozen:
            continue
        running = job.state == JobState.RUNNING and job.id not in decision.preempt
        if not running and job.id not in starting:
            continue
        assert job.min_gpus is not None and job.max_gpus is not None  # elastic
        size = max(job.min_gpus, min(job.max_gpus, len(job.allocation) if running else len(starting[job.id].slots)))
        if running:
            held_extra += size - job.min_gpus
        candidates.append(
            ElasticJob(
                id=job.id,
                # A job starting this round keeps what it starts with (those GPUs are already out of ``free``) and
                # can grow only into GPUs idle now: what running jobs give back is not free until they restart.
                min_gpus=job.min_gpus if running else size,
                max_gpus=job.max_gpus if running else min(job.max_gpus, size + idle),
                gpus=size,
                remaining=_remaining(remaining.get(job.id), rules),
                curve=curves.get(job.id, DEFAULT_CURVE),
                sizes=size_ladder(job.min_gpus, job.max_gpus),
                restart_seconds=rules.restart_seconds if running else 0.0,
                last_resized=job.last_started if running else None,
                starting=not running,
            )
        )
    if not candidates:
        return ElasticOutcome(start=decision.start, reset=reset)
    spare = max(0, idle + held_extra - short)
    plan = allocate_extra(candidates, spare, now=now, hysteresis=rules.hysteresis)
    headroom = _Headroom.of(snapshot, decision)
    start = list(decision.start)
    resize: dict[JobId, int] = {}
    capped = _capped_waiters(snapshot, decision)
    for item in sorted(candidates, key=lambda c: str(c.id)):
        view = views[item.id]
        # No growth while a job of the same tenant (or user) waits on its cap: the extras would take its place.
        target = min(plan.sizes[item.id], item.gpus) if _blocks(view, capped) else plan.sizes[item.id]
        allowed = headroom.allow(view, item.gpus, target)
        want = max((n for n in item.choices() if n <= allowed), default=item.gpus) if allowed > item.gpus else allowed
        if item.id in starting:
            if want > item.gpus:
                index = start.index(starting[item.id])
                start[index] = _widen(starting[item.id], want - item.gpus, free)
                headroom.take(view, len(start[index].slots) - item.gpus)
        elif want != item.gpus:
            resize[item.id] = want
            headroom.take(view, want - item.gpus)
    _give_back_to_capped(capped, headroom, [c for c in candidates if c.id not in starting], views, resize)
    return ElasticOutcome(start=tuple(start), resize=resize, reset=reset, plan=plan)


#: A waiting job held back by its own tenant's or user's cap: ``(tenant, None)`` or ``(tenant, user)`` -> the GPUs
#: the first such job (in queue order) asks for.
_Capped = dict[tuple[str, str | None], int]


def _capped_waiters(snapshot: Snapshot, decision: Decision) -> _Capped:
    capped: _Capped = {}
    for job in snapshot.jobs:  # queue order
        wait = decision.waiting.get(job.id)
        if wait is None:
            continue
        if wait.reason == WaitReason.TENANT_CAP_REACHED:
            capped.setdefault((job.tenant, None), _minimum(job))
        elif wait.reason == WaitReason.USER_CAP_REACHED:
            capped.setdefault((job.tenant, job.user), _minimum(job))
    return capped


def _blocks(job: JobView, capped: _Capped) -> bool:
    return (job.tenant, None) in capped or (job.tenant, job.user) in capped


def _give_back_to_capped(
    capped: _Capped,
    headroom: _Headroom,
    running: list[ElasticJob],
    views: Mapping[JobId, JobView],
    resize: dict[JobId, int],
) -> None:
    """Shrink running elastic jobs whose extras keep a job of their own tenant (or user) waiting on its cap: enough,
    largest extra first, for the first such job to fit, and only when their extras can make it fit (a shrink is a
    restart; one that frees too little is not worth it)."""
    for (tenant, user), need in capped.items():
        left = headroom.tenant.get(tenant) if user is None else headroom.user.get((tenant, user))
        short = need - max(0, left or 0)
        mine = [
            item
            for item in running
            if views[item.id].tenant == tenant and (user is None or views[item.id].user == user)
        ]
        extra = {item.id: resize.get(item.id, item.gpus) - item.min_gpus for item in mine}
        if short <= 0 or sum(extra.values()) < short:
            continue
        for item in sorted(mine, key=lambda i: (-extra[i.id], str(i.id))):
            if short <= 0:
                break
            current = resize.get(item.id, item.gpus)
            size = max((n for n in item.choices() if n <= current - min(short, extra[item.id])), default=item.min_gpus)
            if size >= current:
                continue
            short -= current - size
            headroom.take(views[item.id], size - current)
            if size == item.gpus:
                resize.pop(item.id, None)
            else:
                resize[item.id] = size


def size_ladder(lo: int, hi: int) -> tuple[int, ...]:
    """The sizes a live elastic job runs at: its minimum times a power of two, and its maximum (2 to 8 GPUs: 2, 4,
    8; 2 to 6: 2, 4, 6). A data-parallel job grows by whole replicas of its minimum, and doublings keep the knapsack
    small: with every size from 1 to 64 it took about a second a round for 300 elastic jobs on 1,024 GPUs, with
    the ladder a tenth of that."""
    sizes = {hi}
    n = lo
    while n < hi:
        sizes.add(n)
        n *= 2
    return tuple(sorted(sizes))


def _minimum(job: JobView) -> int:
    return job.min_gpus if job.min_gpus is not None else job.gpus


def _grown(job: JobView | None) -> bool:
    return job is not None and job.state == JobState.PENDING and job.elastic and job.gpus > _minimum(job)


def _remaining(estimate: float | None, rules: ElasticRules) -> float:
    return rules.default_remaining if estimate is None else max(0.0, estimate)


def _free_after(snapshot: Snapshot, decision: Decision) -> dict[str, list[int]]:
    """Free GPUs of nodes that take work, not cordoned, less the round's starts: node name -> GPU ids."""
    taken = {slot.gpu for p in decision.start for slot in p.slots}
    return {
        node.name: [g for g in node.free_gpus if g not in taken and g not in node.short_only]
        for node in snapshot.nodes
        if node.schedulable
    }


def _widen(placement: Placement, extra: int, free: dict[str, list[int]]) -> Placement:
    """``placement`` with up to ``extra`` more free GPUs (taken out of ``free``): on its own nodes first, most free
    first, then on the nodes with most free GPUs."""
    own = Counter(slot.node for slot in placement.slots)
    order = sorted(free, key=lambda name: (name not in own, -len(free[name]), name))
    added: list[GpuSlot] = []
    for name in order:
        while free[name] and len(added) < extra:
            added.append(GpuSlot(node=name, gpu=free[name].pop(0)))
    return Placement(job_id=placement.job_id, slots=placement.slots + tuple(added))


@dataclass
class _Headroom:
    """GPUs each tenant's and user's cap still allows, after the running jobs, the held GPUs and the round's
    starts (None: no cap)."""

    tenant: dict[str, int | None]
    user: dict[tuple[str, str], int | None]

    @classmethod
    def of(cls, snapshot: Snapshot, decision: Decision) -> _Headroom:
        used_t: dict[str, int] = defaultdict(int)
        used_u: dict[tuple[str, str], int] = defaultdict(int)
        views = {job.id: job for job in snapshot.jobs}
        holders = [
            (job.tenant, job.user, job.gpus)
            for job in snapshot.jobs
            if job.state == JobState.RUNNING and job.id not in decision.preempt
        ]
        holders += [(views[p.job_id].tenant, views[p.job_id].user, len(p.slots)) for p in decision.start]
        holders += [(held.tenant, held.user, held.gpus) for held in snapshot.held]
        for tenant, user, gpus in holders:
            used_t[tenant] += gpus
            used_u[(tenant, user)] += gpus
        tenant_left: dict[str, int | None] = {}
        user_left: dict[tuple[str, str], int | None] = {}
        for name, limits in snapshot.tenants.items():
            tenant_left[name] = None if limits.gpu_cap is None else limits.gpu_cap - used_t[name]
        for job in snapshot.jobs:
            of_tenant = snapshot.tenants.get(job.tenant)
            cap = of_tenant.user_cap if of_tenant is not None else None
            user_left[(job.tenant, job.user)] = None if cap is None else cap - used_u[(job.tenant, job.user)]
        return cls(tenant_left, user_left)

    def allow(self, job: JobView, size: int, want: int) -> int:
        """``want`` if it shrinks or the caps leave room for the growth, else as much growth as they leave."""
        if want <= size:
            return want
        room = [
            left for left in (self.tenant.get(job.tenant), self.user.get((job.tenant, job.user))) if left is not None
        ]
        return size + max(0, min([want - size, *room]))

    def take(self, job: JobView, gpus: int) -> None:
        key = (job.tenant, job.user)
        if self.tenant.get(job.tenant) is not None:
            self.tenant[job.tenant] = (self.tenant[job.tenant] or 0) - gpus
        if self.user.get(key) is not None:
            self.user[key] = (self.user[key] or 0) - gpus
