"""Elastic jobs: how many GPUs beyond its minimum each one gets (issue #19, after Aryl).

A job with ``min_gpus < max_gpus`` is guaranteed its minimum by the live policy like any other job; the GPUs left
idle once every minimum is placed (and the loaned ones) are then shared out here. Each elastic job picks exactly
one size, and a size is worth what it saves, so the hand-out is a *multiple-choice knapsack*: items are the jobs,
an item's choices are its sizes, a choice weighs its GPUs above the minimum and is worth its gain. At our scale
(tens of elastic jobs, a few hundred spare GPUs, a handful of sizes each) the exact dynamic programme over
(jobs x spare GPUs) is cheap, so there is no approximation to document.

The gain of a size is, by default, the job's *JCT reduction*: with ``remaining`` seconds of work left at its
minimum size, running at ``n`` GPUs finishes ``remaining x (1 - s(min) / s(n))`` seconds sooner, where ``s`` is
the job's scaling curve. The caller estimates ``remaining`` (the simulator knows it; the live loop may use the
time limit or a prediction). Where no estimate exists, ``objective="throughput"`` values a size by its extra
throughput instead, ``s(n) / s(min) - 1`` (minimum-size jobs' worth of progress per second).

Resizing is a restart from a checkpoint, so a job must not be grown and shrunk back and forth. :class:`Hysteresis`
says how: a job resized less than ``min_interval`` seconds ago keeps its size (unless the spare GPUs it holds are
no longer there), and every change of size is charged ``min_gain`` plus the job's ``restart_seconds`` (under the
JCT objective), so the knapsack changes a size only when what it gains is larger than that. The charge is part of
each choice's value, which keeps the programme exact.

Pure: no clock (``now`` is an argument), no I/O.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import StrEnum

from scheduling.core.model import JobId

#: Amdahl's parallel fraction of the default scaling curve: 95 % of a step scales with GPUs. It gives 1.90x on 2
#: GPUs, 3.48x on 4 and 5.93x on 8 (74 % efficiency at 8): a guess between near-linear data-parallel CNNs and
#: communication-bound models, for jobs that state no curve of their own.
DEFAULT_PARALLEL_FRACTION = 0.95


@dataclass(frozen=True, slots=True)
class ScalingCurve:
    """How much faster a job runs on ``n`` GPUs than on one: :meth:`speedup`.

    Either Amdahl's law with ``parallel_fraction`` (the default curve), or measured ``points`` of
    ``(gpus, speedup)``: linear between points, flat past the last one (more GPUs than were ever measured buy
    nothing), proportional below the first.
    """

    parallel_fraction: float = DEFAULT_PARALLEL_FRACTION
    points: tuple[tuple[int, float], ...] = ()

    def __post_init__(self) -> None:
        if not 0.0 <= self.parallel_fraction <= 1.0:
            raise ValueError(f"the parallel fraction must be between 0 and 1, not {self.parallel_fraction}")
        sizes = [n for n, _ in self.points]
        if sizes != sorted(set(sizes)) or any(n < 1 or not s > 0 for n, s in self.points):
            raise ValueError("scaling points need increasing GPU counts >= 1 and positive speedups")

    def speedup(self, gpus: int) -> float:
        """Throughput on ``gpus`` GPUs relative to one GPU."""
        if gpus < 1:
            raise ValueError("a job runs on at least one GPU")
        if not self.points:
            p = self.parallel_fraction
            return 1.0 / ((1.0 - p) + p / gpus)
        first_n, first_s = self.points[0]
        if gpus <= first_n:
            return first_s * gpus / first_n
        for (n0, s0), (n1, s1) in zip(self.points, self.points[1:], strict=False):
            if gpus <= n1:
                return s0 + (s1 - s0) * (gpus - n0) / (n1 - n0)
        return self.points[-1][1]

    def rate(self, gpus: int, base: int) -> float:
        """Throughput on ``gpus`` GPUs relative to ``base`` GPUs (the job's minimum)."""
        return self.speedup(gpus) / self.speedup(base)


DEFAULT_CURVE = ScalingCurve()


class Objective(StrEnum):
    """What a size is worth: seconds of JCT saved (needs a remaining-time estimate), or extra throughput."""

    JCT = "jct"
    THROUGHPUT = "throughput"


@dataclass(frozen=True, slots=True)
class ElasticJob:
    """One running elastic job as the knapsack sees it.

    ``gpus`` is its size now (its minimum for a job that starts this round). ``remaining`` is the caller's
    estimate of seconds of work left *at the minimum size* (only the JCT objective reads it). ``sizes`` lists the
    sizes it may run at (for example multiples of its minimum, one data-parallel replica each); empty means every
    size from ``min_gpus`` to ``max_gpus``. ``restart_seconds`` is what a resize costs it (checkpoint and restart);
    0 for a job that starts this round (``starting``: it picks any size for free, uncharged). ``last_resized`` is
    when its size last changed (None: never).
    """

    id: JobId
    min_gpus: int
    max_gpus: int
    gpus: int
    remaining: float = 0.0
    curve: ScalingCurve = DEFAULT_CURVE
    sizes: tuple[int, ...] = ()
    restart_seconds: float = 0.0
    last_resized: float | None = None
    starting: bool = False  # it starts this round: any size is free to pick, no resize charge

    def __post_init__(self) -> None:
        if not 1 <= self.min_gpus <= self.max_gpus:
            raise ValueError(f"job {self.id}: need 1 <= min_gpus <= max_gpus, got {self.min_gpus}, {self.max_gpus}")
        if not self.min_gpus <= self.gpus <= self.max_gpus:
            raise ValueError(f"job {self.id}: its size {self.gpus} is outside {self.min_gpus}..{self.max_gpus}")

    def choices(self) -> tuple[int, ...]:
        """The sizes it may take, ascending, always including its minimum and its current size."""
        listed = self.sizes or range(self.min_gpus, self.max_gpus + 1)
        return tuple(sorted({n for n in listed if self.min_gpus <= n <= self.max_gpus} | {self.min_gpus, self.gpus}))


def gain(job: ElasticJob, gpus: int, objective: Objective = Objective.JCT) -> float:
    """What running ``job`` at ``gpus`` GPUs is worth against its minimum (0 at the minimum).

    JCT: seconds it finishes sooner, ``remaining x (1 - s(min) / s(gpus))``. Throughput: ``s(gpus) / s(min) - 1``.
    A curve that is slower at more GPUs gives a negative gain, which the knapsack never picks.
    """
    rate = job.curve.rate(gpus, job.min_gpus)
    if objective == Objective.THROUGHPUT:
        return rate - 1.0
    return job.remaining * (1.0 - 1.0 / rate)


@dataclass(frozen=True, slots=True)
class Hysteresis:
    """Keeps jobs from being resized back and forth.

    ``min_interval``: seconds after a resize during which a job keeps its size. ``min_gain``: what any change of
    size must gain beyond its cost (in the objective's units: seconds for JCT), so small improvements are not
    worth a restart.
    """

    min_gain: float = 0.0
    min_interval: float = 0.0

    def __post_init__(self) -> None:
        if self.min_gain < 0 or self.min_interval < 0 or math.isnan(self.min_gain + self.min_interval):
            raise ValueError("hysteresis thresholds must be >= 0")


@dataclass(frozen=True, slots=True)
class ElasticPlan:
    """Every job's size after the hand-out, what the sizes are worth (net of resize charges), which jobs change
    size, and which the hysteresis interval held at their size (resized too recently to change again)."""

    sizes: dict[JobId, int] = field(default_factory=dict)
    value: float = 0.0
    resized: tuple[JobId, ...] = ()
    held: tuple[JobId, ...] = ()


def extra_of(jobs: Sequence[ElasticJob], plan: ElasticPlan) -> int:
    """GPUs the plan gives beyond the jobs' minimums."""
    return sum(plan.sizes[job.id] - job.min_gpus for job in jobs)


def choice_values(
    job: ElasticJob, *, objective: Objective, hysteresis: Hysteresis, locked: bool
) -> list[tuple[int, float]]:
    """The job's knapsack item: ``(extra GPUs, value)`` per size it may take this round.

    A locked job (resized within the hysteresis interval) may only keep its size. Any other change of size is
    charged ``min_gain`` plus, under the JCT objective, the seconds a restart costs it.
    """
    if locked:
        return [(job.gpus - job.min_gpus, gain(job, job.gpus, objective))]
    if job.starting:
        return [(n - job.min_gpus, gain(job, n, objective)) for n in job.choices()]
    charge = hysteresis.min_gain + (job.restart_seconds if objective == Objective.JCT else 0.0)
    return [(n - job.min_gpus, gain(job, n, objective) - (charge if n != job.gpus else 0.0)) for n in job.choices()]


def allocate_extra(
    jobs: Sequence[ElasticJob],
    extra_gpus: int,
    *,
    now: float,
    objective: Objective | str = Objective.JCT,
    hysteresis: Hysteresis = Hysteresis(),
) -> ElasticPlan:
    """Choose every elastic job's size so that the sizes' total value is the largest possible, giving out at most
    ``extra_gpus`` GPUs beyond the jobs' minimums.

    ``extra_gpus`` counts every GPU the jobs may share: the idle ones after all minimums are placed *and* those
    the jobs already hold beyond their minimums (a job keeping them is one of its choices). Exact: a dynamic
    programme over (jobs x GPUs) with one choice per job. Of equally valuable plans it returns one giving out the
    fewest GPUs, the same one for equal inputs.

    Hysteresis: a job resized less than ``min_interval`` seconds before ``now`` keeps its size; when those jobs
    alone hold more than ``extra_gpus`` (spare GPUs were taken back) they are all free to shrink.
    """
    objective = Objective(objective)
    if extra_gpus < 0:
        raise ValueError("extra_gpus must be >= 0")
    ids = [job.id for job in jobs]
    if len(set(ids)) != len(ids):
        raise ValueError("each elastic job may appear once")
    locked = [job.last_resized is not None and now - job.last_resized < hysteresis.min_interval for job in jobs]
    if sum(job.gpus - job.min_gpus for job, lock in zip(jobs, locked, strict=True) if lock) > extra_gpus:
        locked = [False] * len(jobs)
    items = [
        choice_values(job, objective=objective, hysteresis=hysteresis, locked=lock)
        for job, lock in zip(jobs, locked, strict=True)
    ]
    picks = _solve(items, extra_gpus)
    sizes: dict[JobId, int] = {}
    value = 0.0
    for job, item, pick in zip(jobs, items, picks, strict=True):
        extra, worth = item[pick]
        sizes[job.id] = job.min_gpus + extra
        value += worth
    resized = tuple(job.id for job in jobs if sizes[job.id] != job.gpus)
    held = tuple(job.id for job, lock in zip(jobs, locked, strict=True) if lock)
    return ElasticPlan(sizes=sizes, value=value, resized=resized, held=held)


def _solve(items: Sequence[Sequence[tuple[int, float]]], capacity: int) -> list[int]:
    """Exact multiple-choice knapsack: the index of one choice per item, total weight <= ``capacity``, largest
    total value. ``best[c]`` is the best value of the items so far within weight ``c``; ``pick[i][c]`` remembers
    item ``i``'s choice there. Every item has a weight-0 choice or its only choice fits (the caller makes sure),
    so a solution exists. O(items x capacity x choices)."""
    capacity = min(capacity, sum(max(w for w, _ in item) for item in items))  # more is never usable
    neg = -math.inf
    best = [0.0] * (capacity + 1)
    picks: list[list[int]] = []
    for item in items:
        new = [neg] * (capacity + 1)
        choice = [-1] * (capacity + 1)
        for k, (weight, worth) in enumerate(item):
            if weight > capacity:
                continue
            for c in range(weight, capacity + 1):
                v = best[c - weight]
                if v == neg:
                    continue
                v += worth
                if v > new[c]:  # strict: on a tie the earlier (smaller) choice stays
                    new[c] = v
                    choice[c] = k
        best = new
        picks.append(choice)
    c = max(range(capacity + 1), key=lambda i: (best[i], -i))  # the best value, then the fewest GPUs
    if best[c] == neg:
        raise ValueError("no feasible hand-out: jobs that must keep their size hold more than is spare")
    chosen: list[int] = [0] * len(items)
    for i in range(len(items) - 1, -1, -1):
        k = picks[i][c]
        chosen[i] = k
        c -= items[i][k][0]
    return chosen
