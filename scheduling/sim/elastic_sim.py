"""The elastic replay (issue #19): a training cluster, a loanable inference pool and elastic jobs, after Aryl.

A separate event loop from :mod:`scheduling.sim.simulator`, so that the reference replay (and every result built on
it) stays exactly as it is; it shares the trace, the cluster, the policies, placement and the round
(:func:`scheduling.core.engine.run_round`), and the pure rules of :mod:`scheduling.core.elastic` (the knapsack)
and :mod:`scheduling.core.loan` (which nodes a reclaim gives back). With no pool to lend and no elastic job it
gives the reference replay's numbers (a test holds it to the Tiresias anchor).

Each round, as in the live loop: (1) pending jobs are placed at their minimum by the policy on the free GPUs;
(2) those still waiting may take the GPUs elastic jobs hold above their minimum (those jobs shrink); (3) the GPUs
still idle go to the elastic jobs by the knapsack, with hysteresis. Work is counted in seconds at a job's
minimum size: a job at ``n`` GPUs does ``s(n) / s(min)`` of them per second.

The inference pool's demand (:mod:`scheduling.sim.demand`) is stepped every ``step`` seconds. The serving side
knows its next step ``deadline`` seconds ahead: when it will need more servers it reclaims them then, with that
deadline; when it needs fewer, it lends the idle ones at the step. A reclaim takes its nodes out of service at
once; each job it stops stalls for its restart, plus, if it could not checkpoint within the deadline, the work
since its last checkpoint (jobs checkpoint every ``checkpoint_every`` seconds of a run).

Long on purpose: one event loop whose handlers (arrivals and finishes, the round with its shrinks and the
knapsack's resizes, lending and reclaims) all move the same GPUs and job records; split apart, each piece would
reach into the others' state.
"""

from __future__ import annotations

import heapq
import random
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from scheduling.core.elastic import ElasticJob, allocate_extra
from scheduling.core.engine import run_round
from scheduling.core.loan import RunningJob, plan_reclaim
from scheduling.core.model import GpuSlot, JobState, JobView, NodeView
from scheduling.core.placement import PlacementModel, resolve_placement
from scheduling.core.policies import Policy, resolve_policy
from scheduling.core.pool import FreePool
from scheduling.sim.cluster import Cluster
from scheduling.sim.elastic_setup import ElasticResult as ElasticResult
from scheduling.sim.elastic_setup import ElasticSetup as ElasticSetup
from scheduling.sim.elastic_setup import LoanSetup as LoanSetup
from scheduling.sim.elastic_setup import ReclaimRecord as ReclaimRecord
from scheduling.sim.elastic_setup import Restarts as Restarts
from scheduling.sim.results import JobOutcome
from scheduling.sim.trace import TraceJob

_FINISH, _DEMAND, _LEND, _ARRIVE = 0, 1, 2, 3  # order of events that share an instant


@dataclass(eq=False)
class _Job:
    index: int
    trace: TraceJob
    min: int
    max: int
    sizes: tuple[int, ...]
    view: JobView
    remaining: float  # seconds of work left at the minimum size, as of ``since``
    since: float = 0.0
    rate: float = 1.0
    slots: list[GpuSlot] = field(default_factory=list)
    token: int = 0
    first_start: float | None = None
    run_start: float = 0.0  # start of the current run (checkpoints count from it)
    held: float = 0.0
    preemptions: int = 0
    last_resized: float | None = None
    restarted: bool = False  # stopped or started this round: a resize now costs nothing more


def simulate_elastic(
    trace: Sequence[TraceJob],
    policy: str | Policy = "fifo",
    *,
    cluster: Cluster,
    placement: str | PlacementModel = "count",
    loan: LoanSetup | None = None,
    elastic: ElasticSetup | None = None,
    restarts: Restarts | None = None,
) -> ElasticResult:
    """Replay ``trace`` on ``cluster`` plus the ``loan`` pool with ``elastic`` jobs; see the module."""
    pol = resolve_policy(policy)
    if pol.preemptive or pol.guarantees:
        raise ValueError(f"the elastic replay takes a non-preemptive policy without quotas, not {pol.name}")
    setup = elastic or ElasticSetup()
    return _Replay(trace, pol, cluster, resolve_placement(placement), loan, setup, restarts or Restarts()).run()


class _Replay:
    def __init__(
        self,
        trace: Sequence[TraceJob],
        policy: Policy,
        cluster: Cluster,
        placement: PlacementModel,
        loan: LoanSetup | None,
        elastic: ElasticSetup,
        restarts: Restarts,
    ) -> None:
        self.policy, self.placement, self.loan, self.elastic, self.restarts = policy, placement, loan, elastic, restarts
        self.names: list[str] = []
        self.sizes: dict[str, int] = {}
        self.free: dict[str, list[int]] = {}
        self.first: dict[str, int] = {}  # each node's first GPU id
        self.training_gpus = cluster.total_gpus
        gpu = 0
        for i, (gpus, _) in enumerate(cluster.layout or [(cluster.gpus_per_node, "")] * cluster.nodes):
            gpu = self._add_node(f"n{i}", gpus, gpu)
        self.servers: list[str] = []
        for i in range(loan.servers if loan else 0):
            assert loan is not None
            self.servers.append(f"s{i}")
            gpu = self._add_node(f"s{i}", loan.gpus_per_node, gpu)
            self.free[f"s{i}"] = []  # serving until lent
        self.lent: dict[str, None] = {}  # ordered: lent servers, in lending order
        rng = random.Random(elastic.seed)
        self.jobs: list[_Job] = []
        self.skipped: list[str] = []
        for t in trace:
            draw = rng.random()
            if t.gpus < 1 or t.gpus > self.training_gpus:
                self.skipped.append(t.job_id)
                continue
            top = (
                t.max_gpus if t.max_gpus is not None else (t.gpus * elastic.factor if draw < elastic.share else t.gpus)
            )
            top = max(t.gpus, min(top, gpu))
            sizes = tuple(range(t.gpus, top + 1, t.gpus)) + ((top,) if top % t.gpus else ())
            view = JobView(id=len(self.jobs), tenant=t.tenant, user=t.user, gpus=t.gpus, submit_time=t.submit_time,
                           name=t.name, model=t.model, duration=t.duration)  # fmt: skip
            self.jobs.append(_Job(len(self.jobs), t, t.gpus, top, sizes, view, t.duration))
        self.heap: list[tuple[float, int, int, int]] = []
        self.seq = 0
        self.pending: list[_Job] = []
        self.running: dict[int, _Job] = {}
        self.outcomes: list[JobOutcome] = []
        self.reclaims: list[ReclaimRecord] = []
        self.resizes = 0
        self.unfinished = len(self.jobs)
        self.last_t: float | None = None
        self.busy_training = 0
        self.busy_serving = 0
        self.area_training = self.area_serving = self.area_lent = 0.0
        self.window_training = self.window_serving = 0.0
        submits = [job.trace.submit_time for job in self.jobs]
        self.window = (min(submits, default=0.0), max(submits, default=0.0))

    def _add_node(self, name: str, gpus: int, first: int) -> int:
        self.names.append(name)
        self.sizes[name] = gpus
        self.first[name] = first
        self.free[name] = list(range(first, first + gpus))
        return first + gpus

    def _push(self, t: float, kind: int, index: int) -> None:
        self.seq += 1
        heapq.heappush(self.heap, (t, kind, self.seq, index))

    # -- the loop -----------------------------------------------------------------------------------------------
    def run(self) -> ElasticResult:
        for job in self.jobs:
            self._push(job.trace.submit_time, _ARRIVE, job.index)
        loan = self.loan
        if loan is not None and self.jobs:
            first = int(self.jobs[0].trace.submit_time // loan.step)
            self._set_serving(loan.demand.busy(first, loan.step, loan.servers))
            self._push(max(0.0, (first + 1) * loan.step - loan.deadline), _DEMAND, first + 1)
        while self.heap:
            now = self.heap[0][0]
            self._account(now)
            while self.heap and self.heap[0][0] == now:
                _, kind, _, index = heapq.heappop(self.heap)
                if kind == _FINISH:
                    job = self.jobs[index >> 20]
                    if index & 0xFFFFF == job.token & 0xFFFFF and job.index in self.running:
                        self._finish(job, now)
                elif kind == _ARRIVE:
                    self.pending.append(self.jobs[index])
                elif kind == _DEMAND:
                    self._demand(index, now)
                else:
                    self._set_serving(index)
            self._round(now)
        if self.pending:
            raise RuntimeError(f"{len(self.pending)} jobs still waiting with nothing left to run them")
        return ElasticResult(
            outcomes=tuple(self.outcomes),
            reclaims=tuple(self.reclaims),
            resizes=self.resizes,
            fleet_gpus=sum(self.sizes.values()),
            training_gpus=self.training_gpus,
            training_busy=self.area_training,
            serving_busy=self.area_serving,
            lent_node_seconds=self.area_lent,
            window=self.window,
            window_training_busy=self.window_training,
            window_serving_busy=self.window_serving,
            skipped=tuple(self.skipped),
        )

    def _account(self, now: float) -> None:
        """Add the GPU-time since the last event; only between the first submission and the last finish."""
        if self.last_t is not None and self.unfinished and (self.pending or self.running or self.outcomes):
            dt = now - self.last_t
            self.area_training += self.busy_training * dt
            self.area_serving += self.busy_serving * dt
            self.area_lent += len(self.lent) * dt
            inside = max(0.0, min(now, self.window[1]) - max(self.last_t, self.window[0]))
            self.window_training += self.busy_training * inside
            self.window_serving += self.busy_serving * inside
        self.last_t = now

    # -- jobs -----------------------------------------------------------------------------------------------------
    def _settle(self, job: _Job, now: float) -> None:
        """Count the work done since ``since`` at the job's rate."""
        job.remaining = max(0.0, job.remaining - (now - job.since) * job.rate)
        job.held += now - job.since
        job.since = now

    def _schedule_finish(self, job: _Job, now: float) -> None:
        job.token += 1
        self._push(now + job.remaining / job.rate, _FINISH, (job.index << 20) | (job.token & 0xFFFFF))

    def _set_slots(self, job: _Job, slots: list[GpuSlot], now: float, stall: float) -> None:
        """Run ``job`` on ``slots`` from ``now`` (settled before), after ``stall`` seconds of restart."""
        self.busy_training += len(slots) - len(job.slots)
        job.slots = slots
        job.rate = self.elastic.curve.rate(len(slots), job.min) if len(slots) != job.min else 1.0
        job.remaining += stall * job.rate
        job.since = now
        self._schedule_finish(job, now)

    def _start(self, job: _Job, slots: Sequence[GpuSlot], now: float) -> None:
        for slot in slots:
            self.free[slot.node].remove(slot.gpu)
        self.pending.remove(job)
        self.running[job.index] = job
        stall = self.restarts.restart_seconds if job.preemptions else 0.0
        if job.first_start is None:
            job.first_start = now
        job.run_start = now
        job.restarted = True
        self._set_slots(job, list(slots), now, stall)

    def _finish(self, job: _Job, now: float) -> None:
        self._settle(job, now)
        self._release(job.slots)
        self.busy_training -= len(job.slots)
        job.slots = []
        del self.running[job.index]
        self.unfinished -= 1
        t = job.trace
        assert job.first_start is not None
        self.outcomes.append(
            JobOutcome(t.job_id, t.tenant, t.user, t.gpus, t.submit_time, job.first_start, now, t.duration,
                       job.held, job.preemptions)
        )  # fmt: skip

    def _release(self, slots: Sequence[GpuSlot]) -> None:
        for slot in slots:
            if slot.node in self.free and self._takes_work(slot.node):
                self.free[slot.node].append(slot.gpu)

    def _takes_work(self, node: str) -> bool:
        return node.startswith("n") or node in self.lent

    # -- rounds ---------------------------------------------------------------------------------------------------
    def _views(self, extras: bool) -> list[NodeView]:
        """Nodes that take work, training ones first (ties in placement go to them), with their free GPUs and,
        with ``extras``, the GPUs elastic jobs hold above their minimum."""
        spare: dict[str, list[int]] = {}
        if extras:
            for job in self.running.values():
                for slot in job.slots[job.min :]:
                    spare.setdefault(slot.node, []).append(slot.gpu)
        return [
            NodeView(name, self.sizes[name], tuple(sorted(self.free[name] + spare.get(name, []))))
            for name in self.names
            if self._takes_work(name)
        ]

    def _round(self, now: float) -> None:
        """Minimums first, then spare GPUs taken back for waiting jobs, then the knapsack (see the module)."""
        if self.pending:
            self._place(now, extras=False)
        if self.pending and any(len(j.slots) > j.min for j in self.running.values()):
            self._place(now, extras=True)
        if any(j.max > j.min for j in self.running.values()):
            self._grow(now)
        for job in self.running.values():
            job.restarted = False  # a stop at this instant made the round's resizes free; the next round pays

    def _place(self, now: float, *, extras: bool) -> None:
        ordered = self.policy.order([job.view for job in self.pending], now)
        result = run_round(
            ordered=ordered, running=(), pool=FreePool(self._views(extras)), placement=self.placement,
            policy=self.policy, now=now, limits={}, explain=False,
        )  # fmt: skip
        if not result.start:
            return
        taken = {slot for start in result.start for slot in start.slots}
        if extras:  # elastic jobs whose spare GPUs a waiting job took shrink now
            for job in list(self.running.values()):
                lost = [slot for slot in job.slots[job.min :] if slot in taken]
                if lost:
                    self._settle(job, now)
                    for slot in lost:
                        self.free[slot.node].append(slot.gpu)  # handed straight on by _start below
                    self._resized(job, [s for s in job.slots if s not in lost], now)
        for start in result.start:
            self._start(self.jobs[int(start.job_id)], start.slots, now)

    def _resized(self, job: _Job, slots: list[GpuSlot], now: float) -> None:
        stall = 0.0 if job.restarted else self.restarts.restart_seconds
        job.restarted = True
        job.last_resized = now
        job.run_start = now
        self.resizes += 1
        self._set_slots(job, slots, now, stall)

    def _grow(self, now: float) -> None:
        """Hand the idle GPUs to the elastic jobs by the knapsack (which may also take some back)."""
        jobs = [job for job in self.running.values() if job.max > job.min]
        free = sum(len(self.free[name]) for name in self.names if self._takes_work(name))
        spare = free + sum(len(job.slots) - job.min for job in jobs)
        if spare == 0:
            return
        asks = []
        for job in jobs:
            done = (now - job.since) * job.rate
            asks.append(
                ElasticJob(
                    job.index, job.min, job.max, len(job.slots), remaining=max(0.0, job.remaining - done),
                    curve=self.elastic.curve, sizes=job.sizes,
                    restart_seconds=0.0 if job.restarted else self.restarts.restart_seconds,
                    last_resized=None if job.restarted else job.last_resized,
                )
            )  # fmt: skip
        plan = allocate_extra(asks, spare, now=now, objective=self.elastic.objective, hysteresis=self.elastic.rule)
        changes = [(self.jobs[int(i)], plan.sizes[i]) for i in plan.resized]
        for job, size in sorted(changes, key=lambda c: len(c[0].slots) - c[1], reverse=True):  # shrinks first
            self._settle(job, now)
            if size < len(job.slots):
                self._release(job.slots[size:])
                self._resized(job, job.slots[:size], now)
            else:
                self._resized(job, job.slots + self._take(job, size - len(job.slots)), now)

    def _take(self, job: _Job, need: int) -> list[GpuSlot]:
        """Free GPUs for an elastic job to grow into: on its own nodes first, then lent servers, then the
        training nodes with most free."""
        own = {slot.node for slot in job.slots}
        order = sorted(
            (name for name in self.names if self._takes_work(name) and self.free[name]),
            key=lambda name: (name not in own, name.startswith("n"), -len(self.free[name])),
        )
        slots: list[GpuSlot] = []
        for name in order:
            ids = sorted(self.free[name])[: need - len(slots)]
            for gpu in ids:
                self.free[name].remove(gpu)
            slots += [GpuSlot(name, gpu) for gpu in ids]
            if len(slots) == need:
                return slots
        raise AssertionError("the knapsack gave out more GPUs than are free")  # pragma: no cover

    # -- the loanable pool ----------------------------------------------------------------------------------------
    def _set_serving(self, busy: int) -> None:
        loan = self.loan
        assert loan is not None
        self.busy_serving = busy * loan.gpus_per_node
        lendable = max(0, loan.servers - busy - loan.keep_idle) if loan.lend else 0
        if lendable > len(self.lent):
            self._lend_now(lendable - len(self.lent))

    def _demand(self, k: int, now: float) -> None:
        """``deadline`` seconds before step ``k``: reclaim what it will need, or lend at the step what it will not."""
        loan = self.loan
        assert loan is not None
        busy = loan.demand.busy(k, loan.step, loan.servers)
        lendable = max(0, loan.servers - busy - loan.keep_idle) if loan.lend else 0
        if lendable < len(self.lent):
            self._reclaim(len(self.lent) - lendable, now)
        self._push(k * loan.step, _LEND, busy)
        if self.unfinished:
            self._push((k + 1) * loan.step - loan.deadline, _DEMAND, k + 1)

    def _lend_now(self, count: int) -> None:
        for name in self.servers:
            if count == 0:
                return
            if name not in self.lent:
                self.lent[name] = None
                self.free[name] = list(range(self.first[name], self.first[name] + self.sizes[name]))
                count -= 1

    def _reclaim(self, count: int, now: float) -> None:
        loan = self.loan
        assert loan is not None
        r = self.restarts
        touched: list[RunningJob] = []
        for job in self.running.values():
            per_node: dict[str, int] = {}
            for slot in job.slots:
                per_node[slot.node] = per_node.get(slot.node, 0) + 1
            if any(name in self.lent for name in per_node):
                ran = now - job.run_start
                touched.append(
                    RunningJob(job.index, per_node, job.min, since_checkpoint=ran % r.checkpoint_every,
                               checkpoint_seconds=r.checkpoint_seconds, restart_seconds=r.restart_seconds)
                )  # fmt: skip
        plan = plan_reclaim(lent=list(self.lent), jobs=touched, count=count, deadline=loan.deadline)
        back = set(plan.nodes)
        for name in plan.nodes:
            del self.lent[name]
            self.free[name] = []
        by_id = {j.id: j for j in touched}
        for jid, _size in plan.shrink.items():
            job = self.jobs[int(jid)]
            self._settle(job, now)
            job.remaining += self._lost(by_id[jid], loan.deadline) * job.rate
            self._resized(job, [s for s in job.slots if s.node not in back], now)
        for jid in plan.preempt:
            job = self.jobs[int(jid)]
            self._settle(job, now)
            job.remaining += self._lost(by_id[jid], loan.deadline) * job.rate
            self._release(job.slots)
            self.busy_training -= len(job.slots)
            job.slots, job.rate = [], 1.0
            job.token += 1
            job.preemptions += 1
            del self.running[job.index]
            job.view = replace(job.view, state=JobState.PENDING, last_queued=now)
            self.pending.append(job)
        self.reclaims.append(
            ReclaimRecord(now, count, loan.deadline, plan.vacate_seconds, plan.cost, len(plan.shrink),
                          len(plan.preempt))
        )  # fmt: skip

    @staticmethod
    def _lost(job: RunningJob, deadline: float) -> float:
        """Work a stopped job redoes: none if it checkpointed in time, else its progress since its checkpoint."""
        return 0.0 if job.checkpoint_seconds <= deadline else job.since_checkpoint
