"""The sharing replay (issue #17): tasks take shares of GPUs, run at the interference model's speed, and offline
ones are evicted (and requeued) when an online neighbour's load rises.

A separate event loop from :mod:`scheduling.sim.simulator`, whose figures must not move: that one replays gangs of
whole GPUs under a scheduling policy; this one replays single-GPU tasks, first come first served, with one of the
share placers of :mod:`scheduling.core.share_placement` (``sharing=True``) or a whole GPU per task
(``sharing=False``, the baseline).

What it models, and what it assumes (docs/sharing.md):

- **Speed.** An offline task's rate (1: as fast as alone with its ask) is ``alone(grant) / alone(ask)`` (capped at
  1) times the interference factor of its neighbours' load. An online task is a service: it lives for its
  duration whatever its speed, and its slowdown (``1 - factor``) is integrated over its life.
- **Load.** An online task's measured load follows a day: ``ask * (mid + amp * sin(2π t / day + phase))``, its
  phase from its id; it is re-measured every ``tick`` seconds. Offline tasks keep their grant busy. A task on a
  whole GPU keeps only its ask busy (a task that asked for 22 % uses 22 %, whatever it is given).
- **Dynamic SM allocation and eviction.** At each tick the rule :func:`scheduling.core.sharing.evictions_for_load`
  names the offline clients that no longer fit; they are stopped after a checkpoint (their progress is kept), and
  requeued in their original place, paying ``restart_overhead`` seconds when they start again. Never failed.
- **Fallback.** A share that fits no shared GPU may take a free GPU that accepts no shares (e.g. a Pascal GPU,
  which has no MPS limits) to itself, as it would without sharing.
"""

from __future__ import annotations

import heapq
import math
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

from scheduling.core.share_placement import resolve_placer
from scheduling.core.sharing import (
    DEFAULT_POLICY,
    ShareDemand,
    SharedGpu,
    SharedGpuState,
    SharingPolicy,
    WorkloadClass,
    evictions_for_load,
    free_for_whole,
    neighbour_load,
    offline_room,
)
from scheduling.sim.share_trace import ShareTask

DAY = 86400.0


@dataclass(frozen=True, slots=True)
class OnlineLoad:
    """An online task's measured load over the day, as a part of its ask: from ``mid - amp`` to ``mid + amp``."""

    mid: float = 0.7
    amp: float = 0.3

    def at(self, task: ShareTask, t: float) -> float:
        phase = (zlib.crc32(task.task_id.encode()) % 1000) / 1000 * 2 * math.pi
        part = self.mid + self.amp * math.sin(2 * math.pi * t / DAY + phase)
        return task.gpu_fraction * min(1.0, max(0.0, part))


@dataclass(frozen=True, slots=True)
class TaskRecord:
    """How one task fared: when it arrived, first started and finished, how often it was evicted, and (online
    tasks) its time-averaged and worst slowdown."""

    task_id: str
    workload_class: WorkloadClass
    gpu_fraction: float
    submit_time: float
    start_time: float
    finish_time: float
    evictions: int = 0
    mean_slowdown: float = 0.0
    max_slowdown: float = 0.0

    @property
    def jct(self) -> float:
        return self.finish_time - self.submit_time

    @property
    def queueing(self) -> float:
        return self.start_time - self.submit_time


@dataclass(frozen=True, slots=True)
class ShareSimResult:
    """A replay's tasks and its cluster-wide integrals: GPU-seconds from the first arrival to the last (``span``)."""

    mode: str
    records: tuple[TaskRecord, ...]
    gpus: int
    span: float
    allocated_gpu_seconds: float
    busy_gpu_seconds: float
    fragmented_gpu_seconds: float
    evictions: int
    skipped: int = 0


@dataclass
class _Run:
    task: ShareTask
    order: int
    remaining: float
    started: float | None = None
    gpu: int | None = None
    rate: float = 0.0
    since: float = 0.0
    version: int = 0
    evictions: int = 0
    overhead: float = 0.0
    slow_integral: float = 0.0
    slow_max: float = 0.0
    finished: float | None = None


@dataclass
class _Cluster:
    gpus: list[SharedGpuState]
    policy: SharingPolicy
    frag_ref: float
    busy: list[float] = field(default_factory=list)
    alloc: list[bool] = field(default_factory=list)
    frag: list[bool] = field(default_factory=list)

    def __post_init__(self) -> None:
        n = len(self.gpus)
        self.busy, self.alloc, self.frag = [0.0] * n, [False] * n, [False] * n


def simulate_sharing(
    tasks: Sequence[ShareTask],
    gpus: Sequence[SharedGpu],
    *,
    sharing: bool = True,
    placer: str = "first-fit",
    policy: SharingPolicy = DEFAULT_POLICY,
    online_load: OnlineLoad | None = None,
    tick: float = 900.0,
    restart_overhead: float = 30.0,
    lookahead: int = 128,
    progress: Callable[[int], object] | None = None,
    audit: Callable[[Sequence[SharedGpuState]], object] | None = None,
) -> ShareSimResult:
    """Replay ``tasks`` on ``gpus``; see the module docstring. The placer sees the ``lookahead`` oldest waiting
    shares (a bound on each round's cost, as a live round has one). ``progress`` is called with 1 per finished
    task. ``audit`` is shown the GPUs after every instant's events (the tests check the rule holds throughout)."""
    if not gpus:
        raise ValueError("a sharing replay needs at least one GPU")
    place = resolve_placer(placer)
    load = online_load or OnlineLoad()
    model = policy.model
    shares = sorted(t.gpu_fraction for t in tasks if t.is_share)
    cl = _Cluster([SharedGpuState(gpu=g) for g in gpus], policy, shares[len(shares) // 2] if shares else 0.5)
    runs = [_Run(t, i, t.duration) for i, t in enumerate(tasks)]
    events: list[tuple[float, int, int, int]] = []  # (time, kind, order, version); kinds below
    arrive, finish, tick_kind = 0, 1, 2
    for r in runs:
        heapq.heappush(events, (r.task.submit_time, arrive, r.order, 0))
    waiting: list[_Run] = []
    online_on: dict[int, _Run] = {}  # GPU index -> its online run
    online_whole: set[int] = set()  # GPUs an online task holds whole (their busy part follows its load)
    now = tasks[0].submit_time if tasks else 0.0
    start = now
    integrals = [0.0, 0.0, 0.0]  # allocated, busy, fragmented GPU-seconds
    evictions = 0
    done = 0
    if tasks:
        heapq.heappush(events, (now + tick, tick_kind, -1, 0))

    def settle(i: int, t: float) -> None:
        """Bring GPU ``i``'s tenants' progress and slowdowns up to ``t``."""
        for tenant in cl.gpus[i].tenants:
            r = runs[int(tenant.job_id)]
            dt = t - r.since
            if dt > 0:
                if r.task.workload_class == WorkloadClass.ONLINE:
                    s = model.slowdown(neighbour_load(cl.gpus[i], r.order))
                    r.slow_integral += s * dt
                    r.slow_max = max(r.slow_max, s)
                    r.remaining -= dt
                else:
                    r.remaining -= r.rate * dt
            r.since = t
        holder = cl.gpus[i].whole_holder
        if holder is not None:
            r = runs[int(holder)]
            r.remaining -= t - r.since
            r.since = t

    def refresh(i: int, t: float) -> None:
        """New rates and finish events for GPU ``i``'s tenants (after :func:`settle`), and its cached figures."""
        g = cl.gpus[i]
        busy = 0.0
        for tenant in g.tenants:
            r = runs[int(tenant.job_id)]
            if r.task.workload_class == WorkloadClass.ONLINE:
                r.rate = 1.0
                busy += g.online_load if g.online_load is not None else tenant.fraction
            else:
                r.rate = min(1.0, model.alone(tenant.grant) / model.alone(r.task.gpu_fraction))
                r.rate *= model.factor(neighbour_load(g, r.order))
                busy += tenant.grant
            _schedule_finish(r, t)
        if g.whole_holder is not None:
            r = runs[int(g.whole_holder)]
            r.rate = 1.0
            busy += load.at(r.task, t) if r.task.workload_class == WorkloadClass.ONLINE else r.task.gpu_fraction
            _schedule_finish(r, t)
        cl.busy[i] = min(1.0, busy)
        cl.alloc[i] = bool(g.tenants) or g.whole_holder is not None
        room = offline_room(g, policy) if g.tenants else 0.0
        cl.frag[i] = bool(g.tenants) and 0.0 < room < cl.frag_ref

    def _schedule_finish(r: _Run, t: float) -> None:
        r.version += 1
        if r.rate > 0:
            heapq.heappush(events, (t + max(0.0, r.remaining) / r.rate, finish, r.order, r.version))

    def start_on(i: int, r: _Run, t: float, *, whole: bool) -> None:
        if r.started is None:
            r.started = t
        r.gpu, r.since = i, t
        r.remaining += r.overhead  # a restart after an eviction pays its overhead once
        r.overhead = 0.0
        if whole and r.task.workload_class == WorkloadClass.ONLINE:
            online_whole.add(i)
        if whole:
            cl.gpus[i] = replace(cl.gpus[i], whole_holder=r.order)
        if r.task.workload_class == WorkloadClass.ONLINE and not whole:
            online_on[i] = r
            cl.gpus[i] = replace(cl.gpus[i], online_load=load.at(r.task, t))

    def schedule(t: float, only: list[_Run] | None = None) -> None:
        """Start what fits. ``only``: nothing was freed since the last try, so only these new arrivals can fit
        (placing only ever adds clients, so what did not fit then still does not)."""
        nonlocal waiting
        if not waiting:
            return
        waiting.sort(key=lambda r: r.order)
        candidates_of = waiting if only is None else sorted(only, key=lambda r: r.order)
        placed: set[int] = set()
        touched: set[int] = set()
        if sharing:
            share_waiting = [r for r in candidates_of if r.task.is_share][:lookahead]
            demands = [
                ShareDemand(
                    job_id=r.order,
                    gpu_fraction=r.task.gpu_fraction,
                    workload_class=r.task.workload_class,
                    gpu_memory_bytes=r.task.gpu_memory_bytes,
                    evictions=r.evictions,
                )
                for r in share_waiting
            ]
            candidates = _candidates(cl.gpus, len(demands))
            if demands and candidates:
                result = place([cl.gpus[i] for i in candidates], demands, t, policy)
                for p in result.placements:
                    i = candidates[p.index]
                    if i not in touched:
                        settle(i, t)  # progress so far at the old rates, before the neighbours change
                    cl.gpus[i] = result.gpus[p.index]
                    r = runs[int(p.job_id)]
                    r.since = t
                    start_on(i, r, t, whole=False)
                    placed.add(r.order)
                    touched.add(i)
        # Whole GPUs: any free one without sharing; with sharing, GPUs that take no shares first, and a share
        # takes a GPU to itself only where it could take no share (the fallback in the module docstring).
        free = [i for i, g in enumerate(cl.gpus) if free_for_whole(g)]
        unshared = [i for i in free if not cl.gpus[i].gpu.sharing] if sharing else free
        shared_free = [i for i in free if cl.gpus[i].gpu.sharing] if sharing else []
        for r in candidates_of:
            if not unshared and not shared_free:
                break
            if r.order in placed:
                continue
            if unshared:
                free_i = unshared.pop(0)
            elif not r.task.is_share:
                free_i = shared_free.pop(0)
            else:
                continue
            start_on(free_i, r, t, whole=True)
            placed.add(r.order)
            touched.add(free_i)
        for i in touched:
            refresh(i, t)
        waiting = [r for r in waiting if r.order not in placed]

    def on_tick(t: float) -> None:
        nonlocal evictions
        for i, online in list(online_on.items()):
            settle(i, t)
            measured = load.at(online.task, t)
            for job_id in evictions_for_load(cl.gpus[i], measured, policy):
                r = runs[int(job_id)]
                cl.gpus[i] = cl.gpus[i].without([job_id])
                r.gpu, r.evictions, r.overhead = None, r.evictions + 1, restart_overhead
                r.version += 1  # its pending finish event is void
                waiting.append(r)
                evictions += 1
            cl.gpus[i] = replace(cl.gpus[i], online_load=measured)
            refresh(i, t)
        for i in online_whole:
            settle(i, t)
            refresh(i, t)

    # The cluster figures are integrated while tasks still arrive: a long drain (a service that runs for months
    # after the last arrival) would otherwise decide them.
    window_end = tasks[-1].submit_time if tasks else now
    while events:
        t = events[0][0]
        dt = min(t, window_end) - min(now, window_end)
        if dt > 0:
            integrals[0] += dt * sum(cl.alloc)
            integrals[1] += dt * sum(cl.busy)
            integrals[2] += dt * sum(cl.frag)
        now = t
        ticked = freed = False
        arrived: list[_Run] = []
        while events and events[0][0] == t:
            _, kind, order, version = heapq.heappop(events)
            if kind == arrive:
                waiting.append(runs[order])
                arrived.append(runs[order])
            elif kind == finish:
                r = runs[order]
                if version != r.version or r.gpu is None:
                    continue
                i = r.gpu
                settle(i, t)
                r.finished, r.gpu = t, None
                if cl.gpus[i].whole_holder == order:
                    cl.gpus[i] = replace(cl.gpus[i], whole_holder=None)
                    online_whole.discard(i)
                else:
                    cl.gpus[i] = cl.gpus[i].without([order])
                    if online_on.get(i) is r:
                        del online_on[i]
                        cl.gpus[i] = replace(cl.gpus[i], online_load=None)
                refresh(i, t)
                freed = True
                done += 1
                if progress is not None:
                    progress(1)
            else:
                ticked = True
        if ticked:
            on_tick(t)
        if ticked or freed:
            schedule(t)
        elif arrived:
            schedule(t, only=arrived)
        if audit is not None:
            audit(cl.gpus)
        if ticked and done < len(runs):
            heapq.heappush(events, (t + tick, tick_kind, -1, 0))
    records = tuple(_record(r) for r in runs if r.finished is not None)
    return ShareSimResult(
        mode=placer if sharing else "whole-gpu",
        records=records,
        gpus=len(gpus),
        span=window_end - start,
        allocated_gpu_seconds=integrals[0],
        busy_gpu_seconds=integrals[1],
        fragmented_gpu_seconds=integrals[2],
        evictions=evictions,
        skipped=len(runs) - len(records),
    )


def _candidates(gpus: Sequence[SharedGpuState], wanted: int) -> list[int]:
    """GPUs a placer may use: every shared GPU in use by shares, and up to ``wanted`` empty shared GPUs (empty
    GPUs of one kind are interchangeable; offering them all would only make the placers slower)."""
    used = [i for i, g in enumerate(gpus) if g.gpu.sharing and g.whole_holder is None and g.tenants]
    empty = [i for i, g in enumerate(gpus) if g.gpu.sharing and free_for_whole(g)][:wanted]
    return sorted(used + empty)


def _record(r: _Run) -> TaskRecord:
    assert r.started is not None and r.finished is not None
    life = r.finished - r.started
    return TaskRecord(
        task_id=r.task.task_id,
        workload_class=r.task.workload_class,
        gpu_fraction=r.task.gpu_fraction,
        submit_time=r.task.submit_time,
        start_time=r.started,
        finish_time=r.finished,
        evictions=r.evictions,
        mean_slowdown=r.slow_integral / life if life > 0 else 0.0,
        max_slowdown=r.slow_max,
    )
