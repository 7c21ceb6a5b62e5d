"""What the elastic replay (:mod:`scheduling.sim.elastic_sim`) is told and what it reports.

Kept apart from its event loop so the benchmark and tests can describe a setup, and read a result, without the
loop: the loanable pool (:class:`LoanSetup`), which jobs are elastic (:class:`ElasticSetup`), what stopping a job
costs (:class:`Restarts`), every reclaim (:class:`ReclaimRecord`) and the run's figures (:class:`ElasticResult`).
"""

from __future__ import annotations

from dataclasses import dataclass

from scheduling.core.elastic import DEFAULT_CURVE, Hysteresis, Objective, ScalingCurve
from scheduling.sim.demand import Demand, Diurnal
from scheduling.sim.results import JobOutcome


@dataclass(frozen=True, slots=True)
class LoanSetup:
    """The loanable pool: ``servers`` nodes of ``gpus_per_node`` GPUs, its demand, and whether it lends at all
    (``lend=False`` is the no-loaning baseline over the same fleet). ``keep_idle`` servers stay unlent."""

    servers: int
    gpus_per_node: int = 8
    demand: Demand = Diurnal()
    lend: bool = True
    step: float = 600.0
    deadline: float = 60.0
    keep_idle: int = 0

    def __post_init__(self) -> None:
        if self.servers < 0 or self.gpus_per_node < 1 or self.keep_idle < 0:
            raise ValueError("the pool needs >= 0 servers of >= 1 GPU and keep_idle >= 0")
        if not 0 <= self.deadline < self.step:
            raise ValueError("a reclaim deadline must be >= 0 and shorter than a demand step")


@dataclass(frozen=True, slots=True)
class ElasticSetup:
    """Which jobs are elastic and how they are grown. A ``share`` of jobs (drawn with ``seed``) may grow to
    ``factor`` x their size, in multiples of it; a trace's ``max_gpus`` column overrides the draw."""

    share: float = 0.0
    factor: int = 4
    seed: int = 0
    curve: ScalingCurve = DEFAULT_CURVE
    objective: Objective = Objective.JCT
    #: None: :data:`DEFAULT_HYSTERESIS` for the objective.
    hysteresis: Hysteresis | None = None

    def __post_init__(self) -> None:
        if not 0.0 <= self.share <= 1.0 or self.factor < 1:
            raise ValueError("the elastic share must be in [0, 1] and the factor >= 1")

    @property
    def rule(self) -> Hysteresis:
        return self.hysteresis or DEFAULT_HYSTERESIS[self.objective]


#: A resize must save a minute of JCT (or add 5 % of a minimum-size job's throughput), and a job keeps a new size
#: for ten minutes: about twenty restarts' worth of running at the default 30 s restart.
DEFAULT_HYSTERESIS = {
    Objective.JCT: Hysteresis(min_gain=60.0, min_interval=600.0),
    Objective.THROUGHPUT: Hysteresis(min_gain=0.05, min_interval=600.0),
}


@dataclass(frozen=True, slots=True)
class Restarts:
    """What stopping a job costs it: ``restart_seconds`` of stall; ``checkpoint_seconds`` to write a checkpoint
    on the signal (a reclaim with a shorter deadline stops it without one); a checkpoint every
    ``checkpoint_every`` seconds of a run otherwise."""

    restart_seconds: float = 30.0
    checkpoint_seconds: float = 30.0
    checkpoint_every: float = 1800.0


@dataclass(frozen=True, slots=True)
class ReclaimRecord:
    time: float
    count: int
    deadline: float
    vacate_seconds: float
    cost: float
    shrunk: int
    preempted: int

    @property
    def on_time(self) -> bool:
        return self.vacate_seconds <= self.deadline


@dataclass(frozen=True, slots=True)
class ElasticResult:
    """One elastic replay: every finished job, the reclaims, and the GPU-seconds busy with training and serving on
    a fleet of ``fleet_gpus`` (training cluster plus pool), over the whole run (``[first submission, last
    finish]``) and over the arrival window (``window``: first to last submission, while work keeps coming; the
    drain after it is as long as the backlog, so a whole-run average mostly measures how long the tail is)."""

    outcomes: tuple[JobOutcome, ...]
    reclaims: tuple[ReclaimRecord, ...]
    resizes: int
    fleet_gpus: int
    training_gpus: int
    training_busy: float
    serving_busy: float
    lent_node_seconds: float
    window: tuple[float, float] = (0.0, 0.0)
    window_training_busy: float = 0.0
    window_serving_busy: float = 0.0
    skipped: tuple[str, ...] = ()

    def summary(self) -> dict[str, float | int]:
        """The figures the benchmark reports: averages in seconds, usage as a share of the fleet's GPU-time."""
        n = len(self.outcomes)
        start = min((o.submit for o in self.outcomes), default=0.0)
        end = max((o.finish for o in self.outcomes), default=0.0)
        span = max(end - start, 1e-9)
        width = max(self.window[1] - self.window[0], 1e-9)
        return {
            "jobs": n,
            "avg_jct": sum(o.jct for o in self.outcomes) / n if n else 0.0,
            "avg_queue": sum(o.queued for o in self.outcomes) / n if n else 0.0,
            "makespan": end - start,
            "usage": (self.window_training_busy + self.window_serving_busy) / (width * self.fleet_gpus),
            "training_usage": self.window_training_busy / (width * self.fleet_gpus),
            "usage_whole_run": (self.training_busy + self.serving_busy) / (span * self.fleet_gpus),
            "preemptions": sum(o.preemptions for o in self.outcomes),
            "resizes": self.resizes,
            "reclaims": len(self.reclaims),
            "reclaims_on_time": sum(r.on_time for r in self.reclaims),
            "reclaim_cost_gpu_hours": sum(r.cost for r in self.reclaims) / 3600.0,
            "lent_node_hours": self.lent_node_seconds / 3600.0,
        }
