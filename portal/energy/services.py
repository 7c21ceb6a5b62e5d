"""Energy saving's writes: the demand sample, the forecaster's training, the planner, power commands and the
reconciliation of power states with what the agents report.

Power changes go through ``portal.energy.power`` (claim under the scheduler's lease, run the command after
commit, record or roll back), so a node with work is never powered down and a failed command loses nothing.

A woken node becomes ``on`` when its agent is heard from again (``energy_reconcile`` compares ``last_heartbeat``
with ``power_changed_at``), so registration and heartbeats need no change.
"""

from __future__ import annotations

import logging
import math
import pickle
from dataclasses import dataclass, field
from datetime import datetime, timedelta

import numpy as np
from django.conf import settings
from django.db import transaction
from django.utils import timezone

from portal.energy.models import DemandModel, DemandSample, PowerAction, PowerActionKind
from portal.energy.power import PowerOutcome, power_off, wake
from portal.energy.selectors import (
    busy_node_ids,
    current_step_start,
    demand_forecaster,
    demand_history,
    demand_now,
    energy_enabled,
    free_gpus_on,
    gpus_waking,
    power_counts,
    power_down_candidates,
    steps_since_planner_wake,
    waiting_gpu_demand,
    wake_candidates,
)
from portal.errors import Conflict
from portal.nodes.models import Node, NodePower, NodeState
from portal.rounds import request_round
from scheduling.core.loan import TRAINING
from scheduling.energy.policies import ForecastPolicy, PowerView
from scheduling.energy.series import STEP_MINUTES, SeriesError, StepSeries

logger = logging.getLogger(__name__)

STEP = timedelta(minutes=STEP_MINUTES)
PLANNER = "planner"
WAITING = "waiting jobs"
AGENT = "agent"
#: Forecasters kept after a training (the newest is used; older ones only for a look back).
MODELS_KEPT = 3
#: History the planner reads: the forecaster's features look a day (and three hours) back from the decision.
PLAN_HISTORY = timedelta(days=2)


@dataclass
class PlanResult:
    """What one planner run decided and did. ``target``: nodes the policy wants powered (None: it did not run)."""

    enabled: bool
    target: int | None = None
    reason: str = ""
    forecast: str = ""
    outcomes: list[PowerOutcome] = field(default_factory=list)

    @property
    def powered_down(self) -> list[str]:
        return [o.node for o in self.outcomes if o.action == PowerActionKind.OFF and o.ok]

    @property
    def woken(self) -> list[str]:
        return [o.node for o in self.outcomes if o.action == PowerActionKind.ON and o.ok]

    @property
    def failed(self) -> list[str]:
        return [o.node for o in self.outcomes if not o.ok]


# --- sampling and training ------------------------------------------------------------------------------------------


@transaction.atomic
def energy_sample(*, now: datetime) -> DemandSample:
    """Write this minute's demand sample (again, if the task ran twice in one minute) and drop samples older than
    ``CORRAL_ENERGY_SAMPLE_DAYS``. Runs whether or not energy saving is on, so a site that turns it on already has
    the history to forecast from."""
    in_use, total = demand_now()
    sample, _ = DemandSample.objects.update_or_create(
        time=now.replace(second=0, microsecond=0), defaults={"in_use": min(in_use, total), "total": total}
    )
    DemandSample.objects.filter(time__lt=now - timedelta(days=float(settings.CORRAL_ENERGY_SAMPLE_DAYS))).delete()
    return sample


def energy_train(*, now: datetime) -> DemandModel | None:
    """Fit the demand forecaster on every stored sample and store it (pickled, in the database, so every worker
    loads the same model); keep the newest :data:`MODELS_KEPT`. None when there is less than a day of history
    (the planner then forecasts "no change"). Seconds of one core at a month of history; the fit runs outside any
    transaction."""
    import sklearn  # here, not at import: the API and pages import this module and never train

    from scheduling.energy.forecast import MIN_TRAIN_STEPS, DemandForecaster

    start = now - timedelta(days=float(settings.CORRAL_ENERGY_SAMPLE_DAYS))
    series = demand_history(since=start, until=now)
    if series is not None:
        series = series.slice(0, series.index_at(current_step_start(now)))  # finished steps only
    if series is None or len(series) < MIN_TRAIN_STEPS + 2:
        return None
    try:
        forecaster = DemandForecaster.fit(series, until=len(series))
    except SeriesError as exc:
        logger.info("energy: forecaster not trained: %s", exc)
        return None
    with transaction.atomic():
        row = DemandModel.objects.create(
            trained_at=now,
            steps=len(series),
            history_start=_aware(series.starts[0]),
            history_end=_aware(series.starts[-1] + np.timedelta64(STEP_MINUTES, "m")),
            sklearn_version=sklearn.__version__,
            artifact=pickle.dumps(forecaster, protocol=5),
        )
        stale = list(DemandModel.objects.values_list("pk", flat=True)[MODELS_KEPT:])
        DemandModel.objects.filter(pk__in=stale).delete()
    return row


def _aware(start: np.datetime64) -> datetime:
    naive = start.astype("datetime64[m]").astype(datetime)
    return timezone.make_aware(naive, timezone.get_current_timezone())


# --- reconciling with the agents ------------------------------------------------------------------------------------


@transaction.atomic
def energy_reconcile(*, now: datetime) -> list[str]:
    """Bring power states in line with what the agents say. Returns the names of the nodes it changed.

    - A waking node whose agent was heard from after its power-on command is ``on`` (and a round is asked for).
    - A waking node not heard from within ``CORRAL_POWER_WAKE_TIMEOUT_MINUTES`` is given up: ``on`` and down with
      the reason (the failure is logged), so it is shown and handled as any node that stopped sending heartbeats,
      and a registration brings it back as usual.
    - A powered-down node whose agent reports again well after its power-off (someone switched it on) is ``on``.
    """
    changed: list[str] = []
    timeout = timedelta(minutes=float(settings.CORRAL_POWER_WAKE_TIMEOUT_MINUTES))
    grace = timedelta(seconds=float(settings.CORRAL_POWER_COMMAND_TIMEOUT) + float(settings.CORRAL_NODE_TIMEOUT))
    rows = Node.objects.select_for_update().filter(power__in=[NodePower.WAKING, NodePower.OFF]).order_by("pk")
    for node in rows:
        since = node.power_changed_at or now
        heard = node.last_heartbeat is not None and node.last_heartbeat > since
        if node.power == NodePower.WAKING and heard:
            node.power, node.power_changed_at, node.power_detail = NodePower.ON, now, ""
            node.save(update_fields=["power", "power_changed_at", "power_detail"])
        elif node.power == NodePower.WAKING and now - since > timeout:
            minutes = timeout.total_seconds() / 60
            detail = f"did not come back within {minutes:g} min of its power-on command"
            node.power, node.power_changed_at, node.power_detail = NodePower.ON, now, detail
            fields = ["power", "power_changed_at", "power_detail"]
            if node.state == NodeState.UP:
                node.state, node.state_reason = NodeState.DOWN, detail
                fields += ["state", "state_reason"]
            node.save(update_fields=fields)
            PowerAction.objects.create(
                node=node, at=now, action=PowerActionKind.ON, ok=False, detail=detail, by=PLANNER
            )
            logger.warning("energy: node %s %s", node.name, detail)
        elif node.power == NodePower.OFF and node.last_heartbeat is not None and node.last_heartbeat > since + grace:
            detail = "its agent reports again: switched on outside Corral"
            node.power, node.power_changed_at, node.power_detail = NodePower.ON, now, detail
            node.save(update_fields=["power", "power_changed_at", "power_detail"])
            PowerAction.objects.create(node=node, at=now, action=PowerActionKind.ON, ok=True, detail=detail, by=AGENT)
        else:
            continue
        changed.append(node.name)
    if changed:
        request_round()
    return changed


# --- waking for waiting jobs, and the planner -------------------------------------------------------------------------


def energy_wake_for_waiting(*, now: datetime) -> list[PowerOutcome]:
    """Wake powered-down nodes for pending jobs that wait for GPUs (``selectors.WAITS_FOR_GPUS``): enough nodes that
    their GPUs, with the free ones and those already waking, cover what the jobs ask for; at least one while the
    jobs wait with GPUs free and none waking (free GPUs in a shape they cannot use). Nothing when energy saving is
    off or no node is powered down. Waking too many costs a little energy until the planner powers them down again;
    waking too few would leave a job waiting for ever, so the count errs high."""
    if not energy_enabled():
        return []
    waiting = waiting_gpu_demand()
    if waiting == 0:
        return []
    coming = gpus_waking()
    need = waiting - free_gpus_on() - coming
    if need <= 0 and coming == 0:
        need = 1  # GPUs are free but the jobs still wait (their shape does not fit): a fresh node may fit them
    chosen: list[Node] = []
    for node, gpus in wake_candidates():
        if need <= 0:
            break
        if gpus > 0:
            chosen.append(node)
            need -= gpus
    return wake(chosen, now=now, by=WAITING, why="pending jobs wait for GPUs")


def energy_tick(*, now: datetime) -> list[PowerOutcome]:
    """The every-minute work: write the demand sample, reconcile power states, wake nodes for waiting jobs."""
    energy_sample(now=now)
    if not energy_enabled():
        return []
    energy_reconcile(now=now)
    return energy_wake_for_waiting(now=now)


def energy_plan(*, now: datetime) -> PlanResult:
    """One planner run (every 10 minutes): wake nodes for waiting jobs, then run Corral's forecast policy
    (``scheduling.energy.policies.ForecastPolicy``) on the stored history and the stored forecaster, and wake or
    power down nodes to what it asks, never below ``CORRAL_POWER_MIN_NODES_ON`` and never a node with work, a lent
    node or one that is not up. Powers nothing down while a job waits for GPUs, or without an hour of recent
    history. Without a trained forecaster the forecast is "no change" (the last step's demand)."""
    if not energy_enabled():
        return PlanResult(enabled=False, reason="energy saving is off (no power commands configured)")
    energy_reconcile(now=now)
    result = PlanResult(enabled=True)
    result.outcomes += energy_wake_for_waiting(now=now)
    policy = ForecastPolicy(buffer=int(settings.CORRAL_POWER_BUFFER), floor=int(settings.CORRAL_POWER_MIN_NODES_ON))
    step_start = current_step_start(now)
    series = demand_history(since=now - PLAN_HISTORY, until=now)
    if series is not None:
        series = series.slice(0, series.index_at(step_start))  # finished steps only
    if series is None or len(series) < policy.memory_steps or _last_start(series) != step_start - STEP:
        result.reason = "holding: less than an hour of recent demand samples"
        return result
    forecaster, row = demand_forecaster()
    if forecaster is not None:
        forecast = tuple(float(x) for x in forecaster.forecast_next(series.demand, np.datetime64(step_start, "m")))
        result.forecast = f"model of {row.trained_at:%Y-%m-%d %H:%M}" if row else "model"
    else:
        forecast = (float(series.demand[-1]),) * max(policy.future, 1)
        result.forecast = "no change (no trained model yet)"
    counts = power_counts()
    view = PowerView(
        total=counts.total,
        on=counts.on,
        waking=counts.waking,
        recent=tuple(int(d) for d in series.demand[-policy.memory_steps :]),
        forecast=forecast,
        wake_steps=max(0, math.ceil(float(settings.CORRAL_POWER_WAKE_MINUTES) / STEP_MINUTES)),
        steps_since_wake=steps_since_planner_wake(now=now),
    )
    decision = policy.decide(view)
    result.target, result.reason = decision.target, decision.reason.value
    why = f"{decision.reason.value} (forecast {max(forecast[:6]):.0f} nodes, target {decision.target})"
    if decision.target > view.powered:
        chosen = [node for node, _ in wake_candidates()][: decision.target - view.powered]
        result.outcomes += wake(chosen, now=now, by=PLANNER, why=why)
    elif decision.target < view.powered and waiting_gpu_demand() == 0 and not result.outcomes:
        chosen = power_down_candidates(now=now)[: view.powered - decision.target]
        result.outcomes += power_off(chosen, now=now, by=PLANNER, why=why)
    return result


def _last_start(series: StepSeries) -> datetime:
    value: datetime = series.starts[-1].astype("datetime64[m]").astype(datetime)
    return value


# --- by hand ------------------------------------------------------------------------------------------------------


def node_power_set(*, node: Node, on: bool, by: str, now: datetime) -> PowerOutcome:
    """An admin powers ``node`` down or up by hand, through the same commands and rules as the planner: only a
    training node that is idle and up or draining goes down, and never below ``CORRAL_POWER_MIN_NODES_ON``; only a
    powered-down node is woken. Refusals are :class:`portal.errors.Conflict` (409) saying why; a command that
    fails is an outcome with ``ok`` False (the node stays as it was)."""
    if not energy_enabled():
        raise Conflict("energy saving is off: set CORRAL_POWER_OFF_COMMAND and CORRAL_POWER_ON_COMMAND first")
    if node.pool != TRAINING:
        raise Conflict(f"node {node.name} belongs to the {node.pool} pool: Corral never powers it")
    if on:
        if node.power != NodePower.OFF:
            raise Conflict(f"node {node.name} is not powered down (it is {node.get_power_display().lower()})")
        outcomes = wake([node], now=now, by=by, why="by hand")
    else:
        if node.power != NodePower.ON or node.state not in (NodeState.UP, NodeState.DRAINING):
            raise Conflict(f"node {node.name} is not up and powered on")
        if node.pk in busy_node_ids(now=now):
            raise Conflict(f"node {node.name} has work (or finished some within CORRAL_POWER_IDLE_MINUTES)")
        outcomes = power_off([node], now=now, by=by, why="by hand", states=(NodeState.UP, NodeState.DRAINING))
        if not outcomes:
            floor = settings.CORRAL_POWER_MIN_NODES_ON
            raise Conflict(f"powering {node.name} down would leave fewer than {floor} node(s) on")
    if not outcomes:
        raise Conflict(f"node {node.name} changed meanwhile; try again")
    return outcomes[0]
