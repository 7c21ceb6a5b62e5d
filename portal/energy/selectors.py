"""Reads for energy saving: which nodes it manages, which are busy or idle, demand history, the stored forecaster,
and node-hours saved. Each is a fixed number of queries, whatever the cluster's size."""

from __future__ import annotations

import pickle
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from django.conf import settings
from django.db.models import Count, Max, Q, Sum
from django.utils import timezone

from portal.energy.models import DemandModel, DemandSample, PowerAction, PowerActionKind
from portal.jobs.models import Allocation, Job, JobTask, TaskState
from portal.nodes.models import Gpu, GpuHealth, Node, NodePower, NodeState
from scheduling.core.loan import TRAINING
from scheduling.core.model import SHORT_OF_GPUS
from scheduling.core.states import JobState
from scheduling.energy.series import StepSeries, steps_from_minutes

if TYPE_CHECKING:
    from scheduling.energy.forecast import DemandForecaster

#: Wait reasons that more powered nodes would cure: a pending job with one of these, while nodes are powered down,
#: wakes nodes. (Tenant caps, array limits and the like are not cured by more nodes.)
WAITS_FOR_GPUS = tuple(sorted(reason.value for reason in SHORT_OF_GPUS))


def energy_enabled() -> bool:
    """On only when the site configured both power commands (the default has neither: nothing is ever powered)."""
    off = str(settings.CORRAL_POWER_OFF_COMMAND).strip()
    on = str(settings.CORRAL_POWER_ON_COMMAND).strip()
    return bool(off and on)


#: The nodes energy saving manages: Corral's own pool (a loanable pool's nodes belong to their serving system and
#: are never powered by Corral), minus those that failed (down while Corral thinks them on).
MANAGED = Q(pool=TRAINING) & (Q(power__in=[NodePower.OFF, NodePower.WAKING]) | ~Q(state=NodeState.DOWN))
#: Managed nodes that are on and heard from: what can run work now.
ON = MANAGED & Q(power=NodePower.ON)


def busy_node_ids(*, now: datetime) -> set[int]:
    """Nodes with work: an active allocation (fenced GPUs included), a live task, or an allocation released
    within ``CORRAL_POWER_IDLE_MINUTES`` (a node that just finished a job is likely to get the next). Two queries."""
    recent = now - timedelta(minutes=float(settings.CORRAL_POWER_IDLE_MINUTES))
    held = set(
        Allocation.objects.filter(Q(released_at__isnull=True) | Q(released_at__gte=recent))
        .values_list("node_id", flat=True)
        .distinct()
    )
    live = JobTask.objects.filter(state__in=(TaskState.ASSIGNED, TaskState.RUNNING)).values_list("node_id", flat=True)
    return held | set(live.distinct())


def demand_now() -> tuple[int, int]:
    """(managed nodes holding an active allocation, managed nodes): one minute's sample. Two queries."""
    total = Node.objects.filter(MANAGED).count()
    in_use = (
        Allocation.objects.filter(released_at__isnull=True)
        .filter(node__in=Node.objects.filter(MANAGED))
        .values("node_id")
        .distinct()
        .count()
    )
    return in_use, total


@dataclass(frozen=True)
class PowerCounts:
    """Managed nodes by power state: ``on`` (and heard from), ``waking``, ``off``, and ``total`` managed."""

    on: int
    waking: int
    off: int
    total: int


def power_counts() -> PowerCounts:
    """One query."""
    counts = Node.objects.filter(MANAGED).aggregate(
        on=Count("pk", filter=Q(power=NodePower.ON)),
        waking=Count("pk", filter=Q(power=NodePower.WAKING)),
        off=Count("pk", filter=Q(power=NodePower.OFF)),
        total=Count("pk"),
    )
    return PowerCounts(counts["on"], counts["waking"], counts["off"], counts["total"])


def nodes_waking() -> int:
    """How many nodes are waking (their power-on command ran; their agents have not reported yet). For the wait
    reasons: a job short of GPUs while this is above zero waits for a wake-up. One query."""
    return Node.objects.filter(power=NodePower.WAKING).count()


def nodes_powered_down() -> int:
    """One query."""
    return Node.objects.filter(power=NodePower.OFF).count()


def gpus_waking() -> int:
    """Present GPUs of waking nodes: what is on its way. One query."""
    return Gpu.objects.filter(present=True, node__power=NodePower.WAKING).count()


def free_gpus_on() -> int:
    """Healthy whole GPUs without an allocation on managed nodes that take work now (up and on). One query."""
    return (
        Gpu.objects.filter(present=True, shared=False, health=GpuHealth.HEALTHY)
        .filter(node__in=Node.objects.filter(ON, state=NodeState.UP))
        .exclude(pk__in=Allocation.objects.filter(released_at__isnull=True).values("gpu_id"))
        .count()
    )


def waiting_gpu_demand() -> int:
    """GPUs asked for by pending jobs that more nodes would let start (:data:`WAITS_FOR_GPUS`). One query."""
    need = Job.objects.filter(state=JobState.PENDING.value, reason_code__in=WAITS_FOR_GPUS).aggregate(n=Sum("gpus"))
    return int(need["n"] or 0)


def power_down_candidates(*, now: datetime, states: tuple[str, ...] = (NodeState.UP,)) -> list[Node]:
    """Managed nodes that are on, in ``states``, idle (:func:`busy_node_ids`) and not switched on within
    ``CORRAL_POWER_IDLE_MINUTES``: what may be powered down, longest idle first. Three queries."""
    busy = busy_node_ids(now=now)
    settled = now - timedelta(minutes=float(settings.CORRAL_POWER_IDLE_MINUTES))
    nodes = (
        Node.objects.filter(ON, state__in=states)
        .filter(Q(power_changed_at__isnull=True) | Q(power_changed_at__lte=settled))
        .exclude(pk__in=busy)
        .annotate(last_work=Max("allocations__released_at"))
    )
    floor = datetime.min.replace(tzinfo=now.tzinfo)
    return sorted(nodes, key=lambda n: (getattr(n, "last_work", None) or floor, n.name))


def wake_candidates() -> list[tuple[Node, int]]:
    """Powered-down managed nodes that would take work once on (up, not draining), with their present GPUs; the
    longest off first, so wake-ups spread over the machines. One query."""
    nodes = (
        Node.objects.filter(MANAGED, power=NodePower.OFF, state=NodeState.UP)
        .annotate(n_gpus=Count("gpus", filter=Q(gpus__present=True)))
        .order_by("power_changed_at", "name")
    )
    return [(n, n.n_gpus) for n in nodes]


def demand_history(*, since: datetime, until: datetime) -> StepSeries | None:
    """The samples in ``[since, until)`` as 10-minute steps, in the cluster's local wall-clock time (the
    forecaster's calendar features read hours from it); None without samples. One query."""
    rows = list(DemandSample.objects.filter(time__gte=since, time__lt=until).values_list("time", "in_use", "total"))
    if not rows:
        return None
    times = [timezone.localtime(t).replace(tzinfo=None) for t, _, _ in rows]
    return steps_from_minutes(times, [a for _, a, _ in rows], [t for _, _, t in rows])


def current_step_start(now: datetime) -> datetime:
    """The local wall-clock start of the 10-minute step ``now`` falls in."""
    local = timezone.localtime(now).replace(tzinfo=None, second=0, microsecond=0)
    return local - timedelta(minutes=local.minute % 10)


def demand_forecaster() -> tuple[DemandForecaster | None, DemandModel | None]:
    """The newest stored forecaster that this scikit-learn can load; (None, None) when there is none. Rows are
    pickled by our own control plane only (``energy_train``), never taken from users. One or two queries."""
    import sklearn  # here, not at import: pages and /metrics read this module and need no scikit-learn

    from scheduling.energy.forecast import DemandForecaster

    row = DemandModel.objects.filter(sklearn_version=sklearn.__version__).first()
    if row is None:
        return None, None
    try:
        model = pickle.loads(bytes(row.artifact))  # noqa: S301 - written by energy_train, never by users
    except Exception:  # noqa: BLE001 - a row that cannot be loaded is as good as none: forecast "no change"
        return None, row
    return (model, row) if isinstance(model, DemandForecaster) else (None, row)


def steps_since_planner_wake(*, now: datetime) -> int:
    """10-minute steps since the planner last woke nodes (a large number if it never did). One query."""
    last = PowerAction.objects.filter(action=PowerActionKind.ON, ok=True, by="planner").aggregate(at=Max("at"))["at"]
    if last is None:
        return 10**9
    return int((now - last).total_seconds() // 600)


def node_hours_saved(*, start: datetime | None = None, end: datetime) -> float:
    """Node-hours spent powered down in ``[start, end)`` (from the first record without ``start``): a node is off
    from a power-down that worked until the next power-up that worked (or ``end``). One query."""
    rows = PowerAction.objects.filter(ok=True, at__lt=end).order_by("node_id", "at", "pk")
    seconds = 0.0
    off_since: dict[int, datetime] = {}
    for node_id, at, action in rows.values_list("node_id", "at", "action"):
        if action == PowerActionKind.OFF:
            off_since.setdefault(node_id, at)
        elif node_id in off_since:
            seconds += _overlap(off_since.pop(node_id), at, start)
    seconds += sum(_overlap(since, end, start) for since in off_since.values())
    return seconds / 3600


def _overlap(since: datetime, until: datetime, start: datetime | None) -> float:
    lo = since if start is None else max(since, start)
    return max(0.0, (until - lo).total_seconds())


def power_command_failures() -> int:
    """Power commands that failed, ever (a counter for Prometheus). One query."""
    return PowerAction.objects.filter(ok=False).count()


def power_action_list(*, limit: int = 50) -> list[PowerAction]:
    """The latest power actions, newest first, with their nodes. One query."""
    return list(PowerAction.objects.select_related("node")[:limit])


@dataclass(frozen=True)
class EnergyFigures:
    """What Prometheus and the dashboard show: nodes powered down and waking now, node-hours saved so far, and
    power commands that failed so far."""

    powered_down: int
    waking: int
    node_hours_saved: float
    command_failures: int
