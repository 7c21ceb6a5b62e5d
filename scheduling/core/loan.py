"""Loanable pools: nodes a serving system lends to training while its traffic is low, and takes back (issue #19).

Every node belongs to one pool. Nodes of :data:`TRAINING` (the default) always take Corral's work; nodes of any
other pool belong to a serving system and take work only while lent (:func:`takes_work`). The serving side lends
nodes, then *reclaims* a number of them with a deadline; Corral chooses which ones to give back
(:func:`plan_reclaim`), shrinking elastic jobs first and preempting only when shrinking cannot empty enough nodes.

Server preemption cost (after Aryl's): emptying a node stops, once each, every job with GPUs on it. A stopped job
``j`` costs

    cost(j) = g_j x (r_j + lost_j),   lost_j = c_j if c_j <= deadline else p_j

GPU-seconds, where ``g_j`` is every GPU the job holds *on all the nodes of its gang* (a gang spanning four nodes
stops on all four), ``r_j`` its restart seconds, ``c_j`` the seconds it needs to write a checkpoint after the
signal and ``p_j`` its progress since its last checkpoint. A job that can checkpoint before the deadline loses
only the checkpoint's time; one that cannot is stopped at once and redoes ``p_j`` seconds of work. A node's cost
is the sum over the jobs it would stop that no node chosen before it already stops, so the rest of a gang whose
first node was taken comes for free.

The choice is greedy, node by node: first the nodes that shrinking alone empties (an elastic job losing GPUs only
above its minimum keeps running), cheapest first; then the nodes that need a preemption, cheapest first; ties by
fewer busy GPUs, then the lent order. A reclaim is always answered within its deadline: a job that would take
longer to checkpoint is stopped at once, and the plan says what that cost.

Pure: no clock, no I/O; the caller passes every time.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from scheduling.core.model import JobId

#: The pool of nodes that are Corral's own.
TRAINING = "training"


class LoanError(ValueError):
    """A lend or reclaim that cannot be done as asked: unknown pool or node, or more nodes than are lent."""


@dataclass(frozen=True, slots=True)
class LoanPool:
    """A loanable pool: its nodes, and which of them are lent to training now."""

    name: str
    nodes: frozenset[str]
    lent: frozenset[str] = frozenset()

    def __post_init__(self) -> None:
        if self.name == TRAINING:
            raise LoanError(f"the {TRAINING!r} pool is Corral's own and cannot be lent")
        if not self.lent <= self.nodes:
            raise LoanError(f"pool {self.name!r}: lent nodes must be nodes of the pool")


def takes_work(pool: str, node: str, lent: Iterable[str]) -> bool:
    """True when ``node`` of ``pool`` may run Corral jobs: always in the training pool, else only while lent."""
    return pool == TRAINING or node in set(lent)


def lend(state: LoanPool, nodes: Iterable[str]) -> LoanPool:
    """``state`` with ``nodes`` lent as well. Lending a node that is lent already changes nothing; a node outside
    the pool is refused (:class:`LoanError`) and nothing is lent."""
    asked = set(nodes)
    unknown = sorted(asked - state.nodes)
    if unknown:
        raise LoanError(f"pool {state.name!r} has no node(s) {', '.join(unknown)}")
    return LoanPool(state.name, state.nodes, state.lent | asked)


def give_back(state: LoanPool, nodes: Iterable[str]) -> LoanPool:
    """``state`` with ``nodes`` no longer lent (once a reclaim has emptied them)."""
    returned = set(nodes)
    if not returned <= state.lent:
        raise LoanError(f"pool {state.name!r}: {', '.join(sorted(returned - state.lent))} not lent")
    return LoanPool(state.name, state.nodes, state.lent - returned)


def check_reclaim(state: LoanPool, count: int, deadline: float) -> None:
    """Refuse (:class:`LoanError`) a reclaim of fewer than one node, of more nodes than are lent, or with a
    negative deadline."""
    if count < 1:
        raise LoanError("a reclaim asks for at least one node")
    if count > len(state.lent):
        raise LoanError(f"pool {state.name!r} has {len(state.lent)} node(s) lent; cannot reclaim {count}")
    if not deadline >= 0:
        raise LoanError("the deadline must be a number of seconds >= 0")


@dataclass(frozen=True, slots=True)
class RunningJob:
    """A running job as a reclaim sees it: its GPUs on each node (``per_node``), the size it may shrink to
    (``min_gpus``: equal to its size for an inelastic job), and the times the cost formula needs."""

    id: JobId
    per_node: Mapping[str, int]
    min_gpus: int
    since_checkpoint: float = 0.0
    checkpoint_seconds: float = 0.0
    restart_seconds: float = 0.0

    @property
    def gpus(self) -> int:
        return sum(self.per_node.values())

    def stop_seconds(self, deadline: float) -> float:
        """Seconds it takes to leave its GPUs: its checkpoint if that fits the deadline, else none (stopped)."""
        return self.checkpoint_seconds if self.checkpoint_seconds <= deadline else 0.0

    def cost(self, deadline: float) -> float:
        """GPU-seconds lost by stopping it (the module's formula)."""
        lost = self.checkpoint_seconds if self.checkpoint_seconds <= deadline else self.since_checkpoint
        return self.gpus * (self.restart_seconds + lost)


@dataclass(frozen=True, slots=True)
class ReclaimPlan:
    """What a reclaim gives back and what it costs: the nodes, the elastic jobs shrunk (to their new size), the
    jobs preempted, the cost in GPU-seconds (the module's formula), and when the last node is empty."""

    nodes: tuple[str, ...]
    shrink: dict[JobId, int] = field(default_factory=dict)
    preempt: tuple[JobId, ...] = ()
    cost: float = 0.0
    vacate_seconds: float = 0.0
    deadline: float = 0.0

    @property
    def on_time(self) -> bool:
        return self.vacate_seconds <= self.deadline


def plan_reclaim(*, lent: Sequence[str], jobs: Sequence[RunningJob], count: int, deadline: float) -> ReclaimPlan:
    """Choose ``count`` of the ``lent`` nodes to give back, by least server preemption cost (see the module).

    ``jobs`` are the running jobs with GPUs on any lent node (others are ignored). Refuses (:class:`LoanError`)
    a count it cannot meet or a negative deadline.
    """
    if count < 1 or count > len(lent):
        raise LoanError(f"{len(lent)} node(s) lent; cannot reclaim {count}")
    if not deadline >= 0:
        raise LoanError("the deadline must be a number of seconds >= 0")
    on_node: dict[str, list[RunningJob]] = {name: [] for name in lent}
    for job in jobs:
        for name, n in job.per_node.items():
            if n > 0 and name in on_node:
                on_node[name].append(job)
    removed: dict[JobId, int] = {}  # GPUs taken from each job so far
    stopped: dict[JobId, str] = {}  # job -> "shrink" or "preempt"
    chosen: list[str] = []
    left = list(lent)
    while len(chosen) < count:
        best_key: tuple[int, float, int, int] | None = None
        best_node = ""
        for order, name in enumerate(left):
            preempts, cost = _marginal(on_node[name], name, removed, stopped, deadline)
            busy = sum(job.per_node[name] for job in on_node[name])
            key = (preempts, cost, busy, order)
            if best_key is None or key < best_key:
                best_key, best_node = key, name
        chosen.append(best_node)
        left.remove(best_node)
        for job in on_node[best_node]:
            removed[job.id] = removed.get(job.id, 0) + job.per_node[best_node]
            if job.gpus - removed[job.id] >= job.min_gpus:
                stopped.setdefault(job.id, "shrink")
            else:
                stopped[job.id] = "preempt"
    by_id = {job.id: job for job in jobs}
    shrink = {jid: by_id[jid].gpus - removed[jid] for jid, how in stopped.items() if how == "shrink"}
    preempt = tuple(jid for jid, how in stopped.items() if how == "preempt")
    cost = sum(by_id[jid].cost(deadline) for jid in stopped)
    vacate = max((by_id[jid].stop_seconds(deadline) for jid in stopped), default=0.0)
    return ReclaimPlan(tuple(chosen), shrink, preempt, cost, vacate, deadline)


def _marginal(
    jobs: Sequence[RunningJob], node: str, removed: Mapping[JobId, int], stopped: Mapping[JobId, str], deadline: float
) -> tuple[int, float]:
    """What taking ``node`` as well adds: the number of jobs it newly preempts, and the GPU-seconds of the jobs
    it newly stops (a job already shrunk that now needs preempting costs nothing more: it stopped once)."""
    preempts = 0
    cost = 0.0
    for job in jobs:
        after = job.gpus - removed.get(job.id, 0) - job.per_node[node]
        preempt = after < job.min_gpus
        before = stopped.get(job.id)
        if preempt and before != "preempt":
            preempts += 1
        if before is None:
            cost += job.cost(deadline)
    return preempts, cost
