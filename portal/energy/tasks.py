"""Celery tasks of energy saving. Thin: each calls one service with the current time and is safe to run twice."""

from __future__ import annotations

from celery import shared_task
from django.utils import timezone

from portal.energy.selectors import energy_enabled
from portal.energy.services import energy_plan, energy_tick, energy_train
from portal.queue import ENERGY_PLAN, ENERGY_TICK, ENERGY_TRAIN, RETRY_ON_DB_ERROR


@shared_task(name=ENERGY_TICK, **RETRY_ON_DB_ERROR)
def tick() -> list[str]:
    """The demand sample of this minute; with energy saving on, power states reconciled and nodes woken for
    waiting jobs. Returns the nodes it woke."""
    return [o.node for o in energy_tick(now=timezone.now()) if o.ok]


@shared_task(name=ENERGY_PLAN, **RETRY_ON_DB_ERROR)
def plan() -> str:
    """One planner run; returns its reason (shown in the worker's log)."""
    result = energy_plan(now=timezone.now())
    return f"{result.reason}; down {result.powered_down}, woken {result.woken}, failed {result.failed}"


@shared_task(name=ENERGY_TRAIN, **RETRY_ON_DB_ERROR)
def train() -> int | None:
    """Retrain the demand forecaster (only while energy saving is on); returns the new model's id."""
    if not energy_enabled():
        return None
    row = energy_train(now=timezone.now())
    return row.pk if row else None
