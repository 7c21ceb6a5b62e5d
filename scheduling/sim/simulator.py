"""A deterministic, event-driven replay of a job trace through the scheduling core.

Time jumps from event to event (arrivals, completions, and wake-ups a policy asks for: a queue threshold crossed, a
starvation limit reached, a minimum quantum over); after the events of one instant are applied, one round of
:func:`scheduling.core.engine.run_round` decides what starts and what is preempted. That is the same round the
live loop runs through ``decide``; the simulator only keeps its inputs alive between events instead of rebuilding a
snapshot, which is what makes a 100k-job trace take seconds rather than hours.

Nothing here is random: ties are broken by event kind (completions before arrivals before wake-ups) and then by
trace order, so a trace, a policy and a cluster always give the same result.
"""

from __future__ import annotations

import heapq
import math
from bisect import bisect_left, insort
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from itertools import chain, islice
from operator import attrgetter
from typing import Protocol

from scheduling.core.engine import needs_preemptive_walk, run_round
from scheduling.core.fairshare import UsageMeter
from scheduling.core.model import FinishedJob, GpuSlot, JobState, JobView, TenantLimits
from scheduling.core.placement import PlacementModel, resolve_placement
from scheduling.core.policies import Key, Policy, resolve_policy
from scheduling.core.pool import FreePool
from scheduling.core.preemption import PreemptionCost
from scheduling.sim.trace import TraceJob

_FINISH, _ARRIVE, _WAKE = 0, 1, 2  # order of events that share an instant


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


@dataclass(frozen=True, slots=True)
class JobOutcome:
    """One finished job. ``held`` is the seconds it held GPUs, restore overheads included."""

    job_id: str
    tenant: str
    user: str
    gpus: int
    submit: float
    first_start: float
    finish: float
    duration: float
    held: float
    preemptions: int

    @property
    def jct(self) -> float:
        return self.finish - self.submit

    @property
    def queued(self) -> float:
        """Time spent without GPUs (the first wait plus every wait after a preemption)."""
        return self.jct - self.held


@dataclass(frozen=True, slots=True)
class Timeline:
    """Step series after every round: busy GPUs and waiting jobs from ``times[i]`` until ``times[i + 1]``."""

    times: tuple[float, ...]
    busy_gpus: tuple[int, ...]
    queued_jobs: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class SimResult:
    policy: str
    clairvoyant: bool
    placement: str
    cluster: Cluster
    outcomes: tuple[JobOutcome, ...]
    timeline: Timeline
    skipped: tuple[str, ...] = ()  # jobs that could never run here (more GPUs than the cluster or their cap)
    rounds: int = 0

    @property
    def preemptions(self) -> int:
        return sum(o.preemptions for o in self.outcomes)


class SimObserver(Protocol):
    """Optional hooks for tests and debugging: every GPU hand-out and hand-back, and the state after each round."""

    def started(self, job_id: str, slots: tuple[GpuSlot, ...], now: float) -> None: ...

    def stopped(self, job_id: str, slots: tuple[GpuSlot, ...], now: float, *, finished: bool) -> None: ...

    def round_done(self, now: float, free_gpus: int, waiting: Sequence[JobView]) -> None: ...


class SimulationStuck(RuntimeError):
    """Jobs are waiting but nothing is running and no event is left: a policy or placement bug."""


class _Job:
    """The simulator's mutable record of one job; ``view`` is what the core sees."""

    __slots__ = (
        "index",
        "trace",
        "view",
        "remaining",
        "run_start",
        "token",
        "wake",
        "sort_key",
        "done",
        "first_start",
        "held",
        "preemptions",
    )

    def __init__(self, index: int, trace: TraceJob) -> None:
        self.index = index
        self.trace = trace
        self.view = JobView(
            id=index,
            tenant=trace.tenant,
            user=trace.user,
            gpus=trace.gpus,
            submit_time=trace.submit_time,
            last_queued=trace.submit_time,
            name=trace.name,
            model=trace.model,
            duration=trace.duration,
        )
        self.remaining = trace.duration
        self.run_start = 0.0
        self.token = 0
        self.wake = math.inf
        self.sort_key: tuple[Key, int] | tuple[()] = ()  # (policy key, trace index) once ranked
        self.done = False
        self.first_start: float | None = None
        self.held = 0.0
        self.preemptions = 0


_by_sort_key = attrgetter("sort_key")
_view = attrgetter("view")


def simulate(
    trace: Sequence[TraceJob],
    policy: str | Policy,
    *,
    cluster: Cluster,
    placement: str | PlacementModel = "count",
    overhead: PreemptionCost | None = None,
    tenants: Mapping[str, TenantLimits] | None = None,
    progress: Callable[[int], None] | None = None,
    observer: SimObserver | None = None,
    usage_half_life: float | None = None,
) -> SimResult:
    """Replay ``trace`` under ``policy`` on ``cluster`` and return every job's outcome.

    ``policy`` may be a name (a fresh, history-free object) or an object, which then learns from this run.
    ``progress`` is called with the number of jobs finished since its last call. ``usage_half_life`` (seconds)
    turns on fair share for a ``+quota`` policy: tenants' usage is metered from the replay itself, starting from
    nothing, and orders who borrows idle quota first.
    """
    return _Simulation(
        trace,
        resolve_policy(policy),
        cluster,
        resolve_placement(placement),
        overhead or PreemptionCost(),
        dict(tenants or {}),
        progress,
        observer,
        usage_half_life,
    ).run()


def can_ever_run(job: TraceJob, cluster: Cluster, tenants: Mapping[str, TenantLimits]) -> bool:
    """Whether ``job`` fits the cluster and its tenant's and user's caps at all; a replay skips (and counts) the
    jobs that do not, rather than leaving them waiting for ever."""
    if job.gpus < 1 or job.gpus > cluster.total_gpus:
        return False
    lim = tenants.get(job.tenant)
    if lim is None:
        return True
    return (lim.gpu_cap is None or job.gpus <= lim.gpu_cap) and (lim.user_cap is None or job.gpus <= lim.user_cap)


@dataclass
class _Clock:
    times: list[float] = field(default_factory=list)
    busy: list[int] = field(default_factory=list)
    queued: list[int] = field(default_factory=list)

    def record(self, t: float, busy: int, queued: int) -> None:
        if self.times and self.busy[-1] == busy and self.queued[-1] == queued:
            return
        if self.times and self.times[-1] == t:
            self.busy[-1], self.queued[-1] = busy, queued
            return
        self.times.append(t)
        self.busy.append(busy)
        self.queued.append(queued)


class _Simulation:
    def __init__(
        self,
        trace: Sequence[TraceJob],
        policy: Policy,
        cluster: Cluster,
        placement: PlacementModel,
        overhead: PreemptionCost,
        tenants: dict[str, TenantLimits],
        progress: Callable[[int], None] | None,
        observer: SimObserver | None = None,
        usage_half_life: float | None = None,
    ) -> None:
        self.observer = observer
        self.meter = UsageMeter(usage_half_life) if usage_half_life is not None and policy.guarantees else None
        self.policy = policy
        self.cluster = cluster
        self.placement = placement
        self.overhead = overhead
        self.tenants = tenants
        self.has_caps = any(t.gpu_cap is not None or t.user_cap is not None for t in tenants.values())
        self.progress = progress
        self.pool = cluster.free_pool()
        self.preemptive_walk = needs_preemptive_walk(policy)
        self.jobs: list[_Job] = []
        self.skipped: list[str] = []
        for t in trace:
            if can_ever_run(t, cluster, tenants):
                self.jobs.append(_Job(len(self.jobs), t))
            else:
                self.skipped.append(t.job_id)
        self.heap: list[tuple[float, int, int, int, int]] = []
        self.seq = 0
        self.running: dict[int, _Job] = {}
        # Pending jobs sorted by (key, trace index). Under a preemptive walk, running jobs are kept sorted the same
        # way in ``run_sorted``; a job's key changes only at a wake-up, a state change or a policy refit.
        self.pend_sorted: list[_Job] = []
        self.run_sorted: list[_Job] = []
        self.waiting = 0
        self.pending_gpus = 0
        self.outcomes: list[JobOutcome] = []
        self.clock = _Clock()
        self.rounds = 0
        self.seen_version = policy.version
        self.arrived: set[int] = set()  # only tracked for an observer

    # -- events -------------------------------------------------------------------------------------------------
    def _push(self, t: float, kind: int, job: _Job, token: int) -> None:
        self.seq += 1
        heapq.heappush(self.heap, (t, kind, self.seq, job.index, token))

    def run(self) -> SimResult:
        for job in self.jobs:
            self._push(job.trace.submit_time, _ARRIVE, job, 0)
        heap, jobs = self.heap, self.jobs
        while heap:
            now = heap[0][0]
            changed = False
            while heap and heap[0][0] == now:
                _, kind, _, index, token = heapq.heappop(heap)
                job = jobs[index]
                if kind == _FINISH:
                    if token == job.token:
                        self._finish(job, now)
                        changed = True
                elif kind == _ARRIVE:
                    self._arrive(job, now)
                    changed = True
                elif job.wake == now and not job.done:  # a wake-up that is still wanted
                    job.wake = math.inf
                    changed = self._requeue(job, now) or changed
            if changed or self.policy.version != self.seen_version:
                self._round(now)
            if self.observer is not None:
                waiting = [j.view for j in self.jobs if j.view.state == JobState.PENDING and j.index in self.arrived]
                self.observer.round_done(now, self.pool.total_free, waiting)
            self.clock.record(now, self.cluster.total_gpus - self.pool.total_free, self.waiting)
        if self.waiting:
            raise SimulationStuck(f"{self.waiting} jobs still waiting with nothing running under {self.policy.name}")
        return SimResult(
            policy=self.policy.name,
            clairvoyant=self.policy.clairvoyant,
            placement=self.placement.name,
            cluster=self.cluster,
            outcomes=tuple(self.outcomes),
            timeline=Timeline(tuple(self.clock.times), tuple(self.clock.busy), tuple(self.clock.queued)),
            skipped=tuple(self.skipped),
            rounds=self.rounds,
        )

    def _arrive(self, job: _Job, now: float) -> None:
        self.waiting += 1
        self.pending_gpus += job.trace.gpus
        if self.observer is not None:
            self.arrived.add(job.index)
        self._rekey(job, now)
        insort(self.pend_sorted, job, key=_by_sort_key)

    def _finish(self, job: _Job, now: float) -> None:
        view = job.view
        self.pool.give(view.allocation)
        if self.meter is not None:
            self.meter.change(view.tenant, -view.gpus, now)
        if self.observer is not None:
            self.observer.stopped(job.trace.job_id, view.allocation, now, finished=True)
            self.arrived.discard(job.index)
        del self.running[job.index]
        if self.preemptive_walk:
            _remove(self.run_sorted, job)
        job.done = True
        ran = now - job.run_start
        job.held += ran
        t = job.trace
        assert job.first_start is not None
        self.outcomes.append(
            JobOutcome(
                t.job_id, t.tenant, t.user, t.gpus, t.submit_time, job.first_start, now, t.duration, job.held,
                job.preemptions,
            )
        )  # fmt: skip
        self.policy.observe_finished(
            FinishedJob(
                id=view.id,
                tenant=t.tenant,
                user=t.user,
                gpus=t.gpus,
                submit_time=t.submit_time,
                finish_time=now,
                executed_time=view.executed_time + ran,
                name=t.name,
                model=t.model,
            )
        )
        if self.progress is not None:
            self.progress(1)

    # -- keys ---------------------------------------------------------------------------------------------------
    def _rekey(self, job: _Job, now: float) -> None:
        """Recompute a job's priority and wake up when it next changes (a queue threshold crossed, a starvation
        limit reached) so a preemptive policy reacts at that instant, not at the next arrival."""
        if not self.preemptive_walk:  # plain walks never re-rank a waiting job: no wake-ups
            job.sort_key = (self.policy.key(job.view, now), job.index)
            return
        key, expiry = self.policy.key_and_expiry(job.view, now)
        job.sort_key = (key, job.index)
        if now < expiry < job.wake:
            job.wake = expiry
            self._push(expiry, _WAKE, job, 0)

    def _requeue(self, job: _Job, now: float) -> bool:
        """Move a woken job to where its new key belongs. True if that can change a round's outcome: any waiting
        job moving, or a running one that ranks (or ranked) behind the best waiting job. A running job that stays
        ahead of every waiting one is kept by any round, so its wake-up alone needs no round."""
        running = job.index in self.running
        lst = self.run_sorted if running else self.pend_sorted
        old_key = job.sort_key
        _remove(lst, job)
        self._rekey(job, now)
        insort(lst, job, key=_by_sort_key)
        if not running:
            return True
        pend = self.pend_sorted
        return bool(pend) and max(old_key, job.sort_key) > pend[0].sort_key

    def _rekey_all(self, jobs: list[_Job], now: float) -> None:
        for job in jobs:
            self._rekey(job, now)
        jobs.sort(key=_by_sort_key)

    # -- rounds -------------------------------------------------------------------------------------------------
    def _round(self, now: float) -> None:
        if not self.waiting:
            return
        self.rounds += 1
        policy = self.policy
        pin_running = False
        movable: list[_Job] = list(self.running.values())
        if not self.preemptive_walk:
            ordered: Iterable[JobView] = map(_view, self.pend_sorted)
        else:
            if policy.version != self.seen_version:  # the policy refit what it learned: every key may move
                self.seen_version = policy.version
                self._rekey_all(self.pend_sorted, now)
                self._rekey_all(self.run_sorted, now)
            if policy.guarantees or self.has_caps:
                movable = self._exact_running(now, 0)
            else:
                movable = self._contested_running(now)
                pin_running = not movable
            if pin_running:
                ordered = map(_view, self.pend_sorted)
            else:
                ordered = self._merged(movable)
        result = run_round(
            ordered=ordered,
            running=() if pin_running else [job.view for job in movable],
            pool=self.pool,
            placement=self.placement,
            policy=policy,
            now=now,
            limits=self.tenants,
            explain=False,
            pin_running=pin_running,
            usage=None if self.meter is None else self.meter.history(now),
        )
        jobs = self.jobs
        for view in result.preempt:
            self._preempt(jobs[view.id], now)  # type: ignore[index]
        for placement in result.start:
            self._start(jobs[placement.job_id], placement.slots, now)  # type: ignore[index]

    def _merged(self, running: list[_Job]) -> Iterator[JobView]:
        """Running and pending jobs in one order. The pending jobs ranked behind every running one are not sorted
        in (the walk often stops before reaching them); the part they interleave with is sorted by C code."""
        pend = self.pend_sorted
        if not running:
            return map(_view, pend)
        k = bisect_left(pend, running[-1].sort_key, key=_by_sort_key)
        head = running + pend[:k]
        head.sort(key=_by_sort_key)
        return chain(map(_view, head), map(_view, islice(pend, k, None)))

    def _contested_running(self, now: float) -> list[_Job]:
        """The running jobs that rank behind the first pending job that overflows the free GPUs: the only ones a
        round could preempt.

        The pending jobs ahead of that one fit in the free GPUs, so every job ranked before it (those pending jobs
        and the running jobs between them) fits in the walk's capacity and is taken, whatever comes after. Leaving
        those running jobs out of the round, with their GPUs, leaves the same budget for the rest of the walk and
        gives the same result for a fraction of the work. When everything waiting fits in the free GPUs no running
        job is contested at all.
        """
        runs, pend = self.run_sorted, self.pend_sorted
        free = self.pool.total_free
        if not runs or not pend or self.pending_gpus <= free:
            return []
        i = 0
        while free >= pend[i].trace.gpus:  # ends: the pending jobs need more than ``free`` in all
            free -= pend[i].trace.gpus
            i += 1
        cut = pend[i].sort_key
        return self._exact_running(now, bisect_left(runs, cut, key=_by_sort_key), cut)

    def _exact_running(self, now: float, first: int, cut: tuple[Key, int] | tuple[()] = ()) -> list[_Job]:
        """``run_sorted[first:]`` with exact keys. With improving keys the cached keys are upper bounds: refresh
        the ones that might rank behind ``cut`` (the first pending job that overflows the free GPUs), re-sort, and
        cut again."""
        runs = self.run_sorted
        if self.policy.improving_keys and first < len(runs):
            key = self.policy.key
            for job in runs[first:]:
                job.sort_key = (key(job.view, now), job.index)
            runs.sort(key=_by_sort_key)
            if first:
                first = bisect_left(runs, cut, key=_by_sort_key)
        return runs[first:]

    def _start(self, job: _Job, slots: tuple[GpuSlot, ...], now: float) -> None:
        if job.preemptions:
            job.remaining += self.overhead.overhead(job.trace.gpus)
        job.run_start = now
        job.token += 1
        if self.meter is not None:
            self.meter.change(job.trace.tenant, job.trace.gpus, now)
        if job.first_start is None:
            job.first_start = now
        _remove(self.pend_sorted, job)
        job.view = replace(job.view, state=JobState.RUNNING, allocation=slots, last_started=now, service_at=now)
        self.running[job.index] = job
        self.waiting -= 1
        self.pending_gpus -= job.trace.gpus
        if self.observer is not None:
            self.observer.started(job.trace.job_id, slots, now)
        self._push(now + job.remaining, _FINISH, job, job.token)
        if self.preemptive_walk:
            self._rekey(job, now)
            insort(self.run_sorted, job, key=_by_sort_key)
            quantum = self.policy.min_quantum
            if quantum > 0 and now + quantum < job.wake:
                job.wake = now + quantum
                self._push(now + quantum, _WAKE, job, 0)

    def _preempt(self, job: _Job, now: float) -> None:
        ran = now - job.run_start
        job.remaining -= ran
        job.held += ran
        job.token += 1  # its completion event is void now
        job.preemptions += 1
        view = job.view
        if self.meter is not None:
            self.meter.change(view.tenant, -view.gpus, now)
        if self.observer is not None:
            self.observer.stopped(job.trace.job_id, view.allocation, now, finished=False)
        _remove(self.run_sorted, job)
        job.view = replace(
            view,
            state=JobState.PENDING,
            allocation=(),
            last_queued=now,
            service_at=None,
            attained_service=view.attained_service + view.gpus * ran,
            executed_time=view.executed_time + ran,
        )
        del self.running[job.index]
        self.waiting += 1
        self.pending_gpus += job.trace.gpus
        self._rekey(job, now)
        insort(self.pend_sorted, job, key=_by_sort_key)


def _remove(jobs: list[_Job], job: _Job) -> None:
    """Delete ``job`` from a list sorted by ``sort_key`` (keys are unique: they end in the trace index)."""
    i = bisect_left(jobs, job.sort_key, key=_by_sort_key)
    if i >= len(jobs) or jobs[i] is not job:
        raise AssertionError(f"job {job.trace.job_id} is not where its key says")
    del jobs[i]
