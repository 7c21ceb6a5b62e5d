"""Applying power changes to nodes, safely for jobs: claim, command, record.

1. **Claim** (one transaction holding the scheduler's lease, ``hold_round_lease``): re-check under row locks that
   the node is idle and may change, and set its power to ``off`` (or ``waking``). A round that already read the node
   as free finishes first and its allocation is seen here; a later round sees the node off and places nothing on it
   (``Node.takes_new_work``).
2. **Command**, after commit, outside any transaction: ``portal.energy.commands.run_power_command``, several nodes
   at once in threads (each may take up to ``CORRAL_POWER_COMMAND_TIMEOUT``).
3. **Record** (one transaction): a command that worked is logged; one that failed puts the node back as it was (a
   failed power-down leaves it on and asks for a round, so nothing waits for it), says why in ``power_detail`` and
   logs the failure. No job is touched at any step: only idle nodes are ever claimed.

Used by ``portal.energy.services`` (the planner, waiting jobs, an admin by hand); not called from elsewhere.
"""

from __future__ import annotations

import logging
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.conf import settings
from django.db import transaction

from portal.energy.commands import CommandResult, run_power_command
from portal.energy.models import PowerAction, PowerActionKind
from portal.energy.selectors import ON, busy_node_ids
from portal.jobs.lease import hold_round_lease
from portal.nodes.models import Node, NodePower, NodeState
from portal.rounds import request_round
from scheduling.core.loan import TRAINING

logger = logging.getLogger(__name__)

#: Power commands run at once, at most.
PARALLEL_COMMANDS = 8


@dataclass(frozen=True)
class PowerOutcome:
    """One power command's result, for the caller's report."""

    node: str
    action: str
    ok: bool
    detail: str


def _run_all(command: str, names: list[str]) -> list[CommandResult]:
    timeout = float(settings.CORRAL_POWER_COMMAND_TIMEOUT)
    if len(names) <= 1:
        return [run_power_command(command, name, timeout=timeout) for name in names]
    with ThreadPoolExecutor(max_workers=min(PARALLEL_COMMANDS, len(names))) as pool:
        return list(pool.map(lambda name: run_power_command(command, name, timeout=timeout), names))


@transaction.atomic
def _claim_off(ids: list[int], *, now: datetime, states: tuple[str, ...], floor: int) -> list[Node]:
    """Mark the nodes of ``ids`` that are still idle, on, of the training pool and in ``states`` as off, in that
    order, while at least ``floor`` nodes stay on. Holds the scheduler's lease (see the module docstring)."""
    hold_round_lease()
    busy = busy_node_ids(now=now)
    on = Node.objects.filter(ON).count()
    locked = {n.pk: n for n in Node.objects.select_for_update().filter(pk__in=ids).order_by("pk")}
    claimed: list[Node] = []
    for pk in ids:
        node = locked.get(pk)
        if node is None or on - 1 < floor:
            continue
        if pk in busy or node.power != NodePower.ON or node.state not in states or node.pool != TRAINING:
            continue
        node.power, node.power_changed_at = NodePower.OFF, now
        node.power_detail = "powering down: the power-off command runs"
        node.save(update_fields=["power", "power_changed_at", "power_detail"])
        claimed.append(node)
        on -= 1
    return claimed


@transaction.atomic
def _record(
    claimed: list[Node], results: list[CommandResult], *, action: str, at: datetime, by: str, why: str
) -> list[PowerOutcome]:
    """Log each command; a failed one puts its node back (on after a failed power-down, off after a failed
    power-up) and says why in ``power_detail``."""
    outcomes: list[PowerOutcome] = []
    back_on = False
    claimed_as = NodePower.OFF if action == PowerActionKind.OFF else NodePower.WAKING
    for node, result in zip(claimed, results, strict=True):
        node = Node.objects.select_for_update().get(pk=node.pk)
        verb = "power-off" if action == PowerActionKind.OFF else "power-on"
        if node.power == claimed_as:  # else something else changed it while the command ran: leave that be
            if result.ok:
                node.power_changed_at = at
                node.power_detail = (
                    f"powered down ({by}): {why}" if action == PowerActionKind.OFF else f"waking ({by}): {why}"
                )[:255]
            else:
                node.power = NodePower.ON if action == PowerActionKind.OFF else NodePower.OFF
                node.power_changed_at = at
                node.power_detail = f"{verb} failed: {result.detail}"[:255]
                back_on = back_on or node.power == NodePower.ON
            node.save(update_fields=["power", "power_changed_at", "power_detail"])
        if not result.ok:
            logger.warning("energy: %s command failed for node %s: %s", verb, node.name, result.detail)
        detail = result.detail if not result.ok else (f"{why}; {result.detail}" if result.detail else why)
        PowerAction.objects.create(node=node, at=at, action=action, ok=result.ok, detail=detail[:255], by=by[:150])
        outcomes.append(PowerOutcome(node.name, action, result.ok, detail[:255]))
    if back_on:
        request_round()  # the node takes work again
    return outcomes


def power_off(
    nodes: list[Node], *, now: datetime, by: str, why: str, states: tuple[str, ...] = (NodeState.UP,)
) -> list[PowerOutcome]:
    if not nodes:
        return []
    floor = max(0, int(settings.CORRAL_POWER_MIN_NODES_ON))
    claimed = _claim_off([n.pk for n in nodes], now=now, states=states, floor=floor)
    started = time.monotonic()
    results = _run_all(str(settings.CORRAL_POWER_OFF_COMMAND), [n.name for n in claimed])
    at = now + timedelta(seconds=time.monotonic() - started)
    return _record(claimed, results, action=PowerActionKind.OFF, at=at, by=by, why=why)


@transaction.atomic
def _claim_wake(ids: list[int], *, now: datetime) -> list[Node]:
    claimed: list[Node] = []
    locked = {n.pk: n for n in Node.objects.select_for_update().filter(pk__in=ids).order_by("pk")}
    for pk in ids:
        node = locked.get(pk)
        if node is None or node.power != NodePower.OFF:
            continue
        node.power, node.power_changed_at = NodePower.WAKING, now
        node.power_detail = "waking: the power-on command runs"
        node.save(update_fields=["power", "power_changed_at", "power_detail"])
        claimed.append(node)
    return claimed


def wake(nodes: list[Node], *, now: datetime, by: str, why: str) -> list[PowerOutcome]:
    if not nodes:
        return []
    claimed = _claim_wake([n.pk for n in nodes], now=now)
    started = time.monotonic()
    results = _run_all(str(settings.CORRAL_POWER_ON_COMMAND), [n.name for n in claimed])
    at = now + timedelta(seconds=time.monotonic() - started)
    return _record(claimed, results, action=PowerActionKind.ON, at=at, by=by, why=why)
