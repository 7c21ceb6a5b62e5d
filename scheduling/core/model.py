"""The typed contract between the scheduling core and its callers.

The live loop (``portal.scheduler``) and the simulator (``scheduling.sim``) both build a :class:`Snapshot`, call
``scheduling.core.decide`` with the time they own, and apply the :class:`Decision` they get back. Nothing here
knows about Django, Celery or the wall clock: every value is plain and frozen so a decision is a pure function of
its inputs and can be compared in tests with ``==``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum

# Re-exported (``as``): JobState is part of this contract, and the core and simulator import it from here.
from scheduling.core.states import JobState as JobState

JobId = int | str


class WaitReason(StrEnum):
    """Why a pending job was not started in this round. Shown to users, so each has a plain-language label."""

    NOT_ENOUGH_FREE_GPUS = "not_enough_free_gpus"
    NO_NODE_FITS = "no_node_fits"  # enough GPUs in total, but the placement model finds no arrangement
    TENANT_CAP_REACHED = "tenant_cap_reached"
    USER_CAP_REACHED = "user_cap_reached"
    BLOCKED_BY_EARLIER_JOB = "blocked_by_earlier_job"  # strict FIFO: an earlier job that does not fit blocks us
    LOWER_PRIORITY = "lower_priority"  # a priority policy gave the free GPUs to jobs ahead of this one
    NO_SCHEDULABLE_NODES = "no_schedulable_nodes"
    # Its previous attempt still has processes on a node that is up: a job never runs twice at once.
    PREVIOUS_ATTEMPT_STOPPING = "previous_attempt_stopping"
    PREEMPTED = "preempted"  # was running this round and lost its GPUs to a higher-priority job
    # A long job (no time limit, or one above what short-only GPUs take) that only short-only GPUs would hold.
    SHORT_JOBS_ONLY = "short_jobs_only"
    # Would borrow idle quota, and fair share put other tenants' borrowers (less recent usage) ahead of it.
    FAIR_SHARE = "fair_share"
    # Its job array's %N limit: as many of the array's tasks run as it allows (the live loop holds the rest back).
    ARRAY_LIMIT = "array_limit"

    @property
    def label(self) -> str:
        return _REASON_LABELS[self]


_REASON_LABELS: dict[WaitReason, str] = {
    WaitReason.NOT_ENOUGH_FREE_GPUS: "Waiting for GPUs: not enough are free right now.",
    WaitReason.NO_NODE_FITS: "Waiting for GPUs: enough are free in total, but not in a shape the job can use.",
    WaitReason.TENANT_CAP_REACHED: "Waiting: the tenant is using all GPUs its quota allows.",
    WaitReason.USER_CAP_REACHED: "Waiting: you are using all GPUs your per-user cap allows.",
    WaitReason.BLOCKED_BY_EARLIER_JOB: "Queued behind an earlier job that is waiting for GPUs.",
    WaitReason.LOWER_PRIORITY: "Queued: jobs with higher priority get the free GPUs first.",
    WaitReason.NO_SCHEDULABLE_NODES: "Waiting: no node is up and accepting work.",
    WaitReason.PREVIOUS_ATTEMPT_STOPPING: "Waiting for the processes of its previous attempt to stop.",
    WaitReason.PREEMPTED: "Preempted by a higher-priority job; waiting to resume.",
    WaitReason.SHORT_JOBS_ONLY: "Waiting for GPUs: the only free ones that would fit are cordoned (predicted to fail).",
    WaitReason.FAIR_SHARE: "Queued to borrow idle GPUs: tenants that used less of their share lately borrow first.",
    WaitReason.ARRAY_LIMIT: "Waiting: its job array already runs as many tasks at once as its limit allows.",
}


#: Reasons that mean "not enough GPUs": a job waiting for one is told when some are on their way (stopping jobs'
#: GPUs, nodes waking up), elastic jobs give back the GPUs above their minimums to it, and energy saving wakes nodes.
SHORT_OF_GPUS = frozenset(
    {
        WaitReason.NOT_ENOUGH_FREE_GPUS,
        WaitReason.NO_NODE_FITS,
        WaitReason.LOWER_PRIORITY,
        WaitReason.NO_SCHEDULABLE_NODES,
    }
)


def gpu_count(n: int) -> str:
    """``1 GPU``, ``4 GPUs``: wait details are read by people."""
    return f"{n} GPU" if n == 1 else f"{n} GPUs"


@dataclass(frozen=True, slots=True)
class NodeView:
    """A node as the scheduler sees it. ``free_gpus`` holds GPU ids (the caller's own ids) that are not allocated
    and may take work, on a node that accepts work.

    ``short_only`` names GPUs of this node, free or not, that take only *short* jobs: jobs whose time limit is at
    most the placement model's ``short_limit`` (the live loop lists soft-cordoned GPUs here: a GPU predicted to
    fail should not take a job that will still be running when it does). A short-only GPU that is free is in
    ``free_gpus`` too; one held by a running job is listed so that it stays short-only when a preemption frees it.
    """

    name: str
    total_gpus: int
    free_gpus: tuple[int, ...]
    rack: str = ""
    schedulable: bool = True
    short_only: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class GpuSlot:
    """One GPU given to a job: which node it is on and the caller's GPU id."""

    node: str
    gpu: int


@dataclass(frozen=True, slots=True)
class JobView:
    """A job in the system (pending or running) as the scheduler sees it.

    ``attained_service`` is GPU-seconds executed so far (GPUs x seconds), the quantity Tiresias's 2D-LAS ranks by;
    ``executed_time`` is plain seconds executed. ``duration`` is only set by the simulator for clairvoyant oracle
    policies and must be ignored by every non-clairvoyant one. ``time_limit`` is what the user promised: seconds
    one attempt may run before the portal stops it (None: no limit). Placement reads it to decide whether the job
    may use short-only GPUs; no policy ranks by it.
    """

    id: JobId
    tenant: str
    user: str
    gpus: int
    submit_time: float
    state: JobState = JobState.PENDING
    allocation: tuple[GpuSlot, ...] = ()
    attained_service: float = 0.0
    executed_time: float = 0.0
    last_started: float | None = None  # when the current run began (running jobs), for the minimum quantum
    last_queued: float | None = None  # when it last entered the queue (submit or preemption), for starvation
    name: str = ""
    model: str = ""
    duration: float | None = None
    # When ``attained_service``/``executed_time`` were measured. None means "as of ``now``" (what the live loop
    # sends). The simulator sets it to the start of the current run so a running job's view need not be rebuilt
    # every event: the core extrapolates ``gpus x (now - service_at)`` for running jobs.
    service_at: float | None = None
    time_limit: float | None = None
    # An elastic job (issue #19): ``gpus`` is its size now (held, or asked for by its next attempt), and it may run
    # at any size from ``min_gpus`` to ``max_gpus``. None: inelastic. See ``scheduling.core.elastic_round``.
    min_gpus: int | None = None
    max_gpus: int | None = None

    @property
    def elastic(self) -> bool:
        return self.max_gpus is not None and self.min_gpus is not None and self.max_gpus > self.min_gpus

    def attained_at(self, now: float) -> float:
        """GPU-seconds executed as of ``now`` (running jobs keep accruing service after ``service_at``)."""
        if self.service_at is None or self.state != JobState.RUNNING:
            return self.attained_service
        return self.attained_service + self.gpus * (now - self.service_at)

    def executed_at(self, now: float) -> float:
        """Seconds executed as of ``now``."""
        if self.service_at is None or self.state != JobState.RUNNING:
            return self.executed_time
        return self.executed_time + (now - self.service_at)


@dataclass(frozen=True, slots=True)
class TenantLimits:
    """A tenant's quota. ``gpu_cap`` is the most GPUs its jobs may hold at once (None = no cap);
    ``guaranteed_gpus`` is the share it can always reclaim; ``user_cap`` limits each member."""

    gpu_cap: int | None = None
    guaranteed_gpus: int = 0
    user_cap: int | None = None


@dataclass(frozen=True, slots=True)
class UsageHistory:
    """Fair share's input (:mod:`scheduling.core.fairshare`): each tenant's decayed usage in GPU-seconds as of
    one instant, and the half-life (seconds) it decays with. Tenants not in ``usage`` used nothing that still
    counts."""

    half_life: float
    usage: Mapping[str, float]

    def __post_init__(self) -> None:
        if not self.half_life > 0:
            raise ValueError(f"the usage half-life must be positive, not {self.half_life}")


@dataclass(frozen=True, slots=True)
class HeldGpus:
    """GPUs an attempt that is over still holds: its processes have not been confirmed gone (they are stopping,
    or their node is fenced). They are in no node's ``free_gpus``, belong to no job the round may move, and still
    count against their tenant's cap and guarantee and their user's cap."""

    tenant: str
    user: str
    gpus: int


@dataclass(frozen=True, slots=True)
class Snapshot:
    """Everything one scheduling round needs. Jobs are pending or running; finished jobs are not included."""

    nodes: tuple[NodeView, ...]
    jobs: tuple[JobView, ...]
    tenants: Mapping[str, TenantLimits] = field(default_factory=dict)
    #: Decayed usage per tenant; with the quota layer it orders who borrows idle quota first. None: no fair share.
    usage: UsageHistory | None = None
    #: GPUs still held by attempts that are over (see :class:`HeldGpus`).
    held: tuple[HeldGpus, ...] = ()


@dataclass(frozen=True, slots=True)
class Placement:
    """Start ``job_id`` on exactly these GPUs (a whole gang at once)."""

    job_id: JobId
    slots: tuple[GpuSlot, ...]


@dataclass(frozen=True, slots=True)
class Wait:
    """A pending job left waiting, with the reason the UI shows and an optional detail line."""

    reason: WaitReason
    detail: str = ""


@dataclass(frozen=True, slots=True)
class Decision:
    """The outcome of one round: which jobs to preempt (their GPUs are reused in ``start``), which to start
    where, and for every pending job not started, why."""

    start: tuple[Placement, ...] = ()
    preempt: tuple[JobId, ...] = ()
    waiting: Mapping[JobId, Wait] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class FinishedJob:
    """A finished job as history-learning policies (Gittins, QSSF) are told about it.

    The live loop and the simulator both call ``policy.observe_finished(record)`` when a job ends, so a policy only
    ever learns from the past. ``executed_time`` is the seconds the job held its GPUs (its service time).
    """

    id: JobId
    tenant: str
    user: str
    gpus: int
    submit_time: float
    finish_time: float
    executed_time: float
    name: str = ""
    model: str = ""
    succeeded: bool = True

    @property
    def service(self) -> float:
        """GPU-seconds consumed: the quantity 2D schedulers rank by."""
        return self.gpus * self.executed_time
