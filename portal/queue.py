"""How services ask for background work: by task name, after their transaction commits.

Services never import task modules (a task module imports its service, so the reverse import would be a circle);
they name the task here instead. Each name is defined once, in this module, and used by the task's decorator, by
the services that queue it and by the beat schedule in ``portal/celery.py``; a test checks that every name here is a
registered task.
"""

from __future__ import annotations

from typing import Any, TypedDict

from celery import current_app
from django.db import OperationalError, transaction
from django.utils.module_loading import autodiscover_modules

#: The scheduling loop (``portal.scheduler.tasks``).
SCHEDULE_ROUND = "scheduler.schedule_round"
BEAT_ROUND = "scheduler.beat_round"
REFRESH_START_FORECASTS = "scheduler.refresh_start_forecasts"
PRUNE_ROUNDS = "scheduler.prune_rounds"
#: Node liveness (``portal.nodes.tasks``).
SWEEP_NODES = "nodes.sweep"
#: Telemetry (``portal.telemetry.tasks``).
ROLLUP_SAMPLES = "telemetry.rollup_samples"
PRUNE_SAMPLES = "telemetry.prune_samples"
SCORE_GPUS = "telemetry.score_gpus"
TRAIN_FAILURE_MODEL = "telemetry.train_failure_model"
NOTIFY_ADMINS = "telemetry.notify_admins"
#: What-if replays (``portal.whatif.tasks``).
WHATIF_RUN = "whatif.run"
SWEEP_WHATIF_RUNS = "whatif.sweep_runs"
#: Notifications (``portal.notifications.tasks``).
SWEEP_NOTIFICATIONS = "notifications.sweep"
DELIVER_NOTIFICATION = "notifications.deliver"
#: Loanable pools (``portal.pools.tasks``).
RECLAIMS_PROGRESS = "pools.reclaims_progress"
#: Energy saving (``portal.energy.tasks``).
ENERGY_TICK = "energy.tick"
ENERGY_PLAN = "energy.plan"
ENERGY_TRAIN = "energy.train"

TASK_NAMES = (
    SCHEDULE_ROUND,
    BEAT_ROUND,
    REFRESH_START_FORECASTS,
    PRUNE_ROUNDS,
    SWEEP_NODES,
    ROLLUP_SAMPLES,
    PRUNE_SAMPLES,
    SCORE_GPUS,
    TRAIN_FAILURE_MODEL,
    NOTIFY_ADMINS,
    WHATIF_RUN,
    SWEEP_WHATIF_RUNS,
    SWEEP_NOTIFICATIONS,
    DELIVER_NOTIFICATION,
    RECLAIMS_PROGRESS,
    ENERGY_TICK,
    ENERGY_PLAN,
    ENERGY_TRAIN,
)


def enqueue(name: str, *args: Any) -> None:
    """Queue task ``name`` now. The current app is Corral's: importing any ``portal`` module loads it
    (``portal/__init__.py``).

    Through a signature, so that a task this process knows runs eagerly under ``task_always_eager`` (tests, and
    ``CELERY_TASK_ALWAYS_EAGER``). A web process knows its tasks only once the apps' task modules are discovered,
    as a worker discovers them at start, so that is done here the first time a name is unknown. (Not through
    Celery's loader: its Django fix-up would run ``django.setup()`` again and rebuild the logging handlers.)
    """
    if name not in current_app.tasks:
        autodiscover_modules("tasks")  # each installed app's tasks module, as the admin finds admin modules
    current_app.signature(name, args=args).delay()


def enqueue_later(name: str, *args: Any, countdown: float) -> None:
    """Queue task ``name`` to run ``countdown`` seconds from now (at once under ``task_always_eager``)."""
    if name not in current_app.tasks:
        autodiscover_modules("tasks")
    current_app.signature(name, args=args).apply_async(countdown=countdown)


def enqueue_on_commit(name: str, *args: Any) -> None:
    """Queue task ``name`` once the current transaction commits, never for a change that rolled back.

    ``robust``: if the broker is briefly unreachable the change still stands; every task queued this way has a
    periodic safety net (the beat round, the what-if sweep), so a lost message only delays the work.
    """
    transaction.on_commit(lambda: enqueue(name, *args), robust=True)


class RetryOptions(TypedDict):
    """The options every periodic and queued task shares; typed, so that ``shared_task``'s overloads check them."""

    autoretry_for: tuple[type[Exception], ...]
    retry_backoff: bool
    max_retries: int
    ignore_result: bool


#: Retry only on transient database errors (a failover, a dropped connection), with backoff; results are unused.
RETRY_ON_DB_ERROR: RetryOptions = {
    "autoretry_for": (OperationalError,),
    "retry_backoff": True,
    "max_retries": 3,
    "ignore_result": True,
}
