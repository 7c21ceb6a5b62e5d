"""The data behind ``GET /metrics``, read in one go so the collector itself never touches the database."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.db.models import Count, Max, Sum
from django.utils import timezone

from portal.energy.selectors import EnergyFigures, energy_enabled, node_hours_saved, power_command_failures
from portal.jobs.models import Allocation, Job
from portal.nodes.models import Gpu, Node, NodePower
from portal.pools.selectors import reclaims_late_count
from portal.scheduler.models import SchedulerRound
from portal.telemetry.models import Alert, FailureModel, NodeTelemetry
from portal.telemetry.selectors import gpus_with_telemetry
from scheduling.core.loan import TRAINING
from scheduling.core.states import JobState


@dataclass(frozen=True)
class MetricsData:
    """What /metrics exposes, read in one go so the collector itself never touches the database."""

    gpus: list[Gpu]
    jobs_by_state: dict[str, int]
    pending_by_reason: dict[str, int]
    last_round: SchedulerRound | None
    rounds_5m: int
    round_max_ms_5m: float | None
    nodes: list[tuple[str, str, NodeTelemetry | None]]  # name, hostname, bookkeeping
    active_model: FailureModel | None
    active_alerts: dict[str, int]
    #: Issue #17: shared GPU id -> (shares on it, compute percent given), and evictions of shares so far.
    share_clients: dict[int, tuple[int, int]] = field(default_factory=dict)
    share_evictions: int = 0
    #: Issue #19: loanable pool -> (nodes, lent, being given back), and reclaims that missed their deadline so far.
    pools: dict[str, tuple[int, int, int]] = field(default_factory=dict)
    reclaims_late: int = 0
    #: Issue #19: energy saving's nodes powered down and waking, node-hours saved, power commands failed.
    energy: EnergyFigures | None = None


def metrics_data(*, now: datetime | None = None) -> MetricsData:
    """The data behind ``GET /metrics``, in nine queries regardless of cluster size: one more where GPUs are shared,
    one more where a pool is loanable, two more where energy saving is on."""
    now = now or timezone.now()
    jobs_by_state = {s.value: 0 for s in JobState}
    by_state = Job.objects.values("state").annotate(n=Count("pk"), ev=Sum("evictions")).values_list("state", "n", "ev")
    evictions = 0
    for state, n, ev in by_state:
        jobs_by_state[state] = n
        evictions += ev or 0
    pending = dict(
        Job.objects.filter(state=JobState.PENDING.value)
        .values("reason_code")
        .annotate(n=Count("pk"))
        .values_list("reason_code", "n")
    )
    recent = SchedulerRound.objects.filter(at__gte=now - timedelta(minutes=5)).aggregate(
        n=Count("pk"), worst=Max("duration_ms")
    )
    telemetry = {t.node_id: t for t in NodeTelemetry.objects.all()}
    all_nodes = list(Node.objects.order_by("name"))
    nodes = [(n.name, n.hostname, telemetry.get(n.pk)) for n in all_nodes]
    pools: dict[str, tuple[int, int, int]] = {}
    for node in all_nodes:
        if node.pool != TRAINING:
            total, lent, returning = pools.get(node.pool, (0, 0, 0))
            pools[node.pool] = (total + 1, lent + node.lent, returning + node.returning)
    alerts = dict(
        Alert.objects.filter(resolved_at__isnull=True)
        .values("severity")
        .annotate(n=Count("pk"))
        .values_list("severity", "n")
    )
    gpus = list(gpus_with_telemetry())
    shares: dict[int, tuple[int, int]] = {}
    if any(g.shared for g in gpus):  # one more query, only on a cluster that shares GPUs
        shares = {g.pk: (0, 0) for g in gpus if g.shared}
        shares.update(
            (gpu_id, (n, int(p or 0)))
            for gpu_id, n, p in Allocation.objects.filter(released_at__isnull=True, compute_percent__isnull=False)
            .values("gpu_id")
            .annotate(n=Count("pk"), p=Sum("compute_percent"))
            .values_list("gpu_id", "n", "p")
        )
    return MetricsData(
        gpus=gpus,
        jobs_by_state=jobs_by_state,
        pending_by_reason={(k or "unknown"): v for k, v in pending.items()},
        last_round=SchedulerRound.objects.order_by("-at").first(),
        rounds_5m=recent["n"] or 0,
        round_max_ms_5m=recent["worst"],
        nodes=nodes,
        active_model=FailureModel.objects.filter(active=True).defer("artifact").first(),
        active_alerts=alerts,
        share_clients=shares,
        share_evictions=evictions,
        pools=pools,
        reclaims_late=reclaims_late_count() if pools else 0,  # one more query, only where a pool is loanable
        energy=_energy(all_nodes, now=now),
    )


def _energy(nodes: list[Node], *, now: datetime) -> EnergyFigures | None:
    """Energy saving's figures: from the nodes already read, plus two queries of the power log, only where energy
    saving is on or has left nodes off (None otherwise: a site without it pays nothing)."""
    off = sum(node.power == NodePower.OFF for node in nodes)
    waking = sum(node.power == NodePower.WAKING for node in nodes)
    if not (energy_enabled() or off or waking):
        return None
    return EnergyFigures(off, waking, node_hours_saved(end=now), power_command_failures())
