"""The Celery application and every periodic task Corral runs (one place, each with its cadence and expiry)."""

from __future__ import annotations

import os
from typing import Any

from celery import Celery, Signature

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")

app = Celery("portal")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()  # every installed app's tasks module


@app.on_after_configure.connect
def _periodic_tasks(sender: Celery, **_: object) -> None:
    from django.conf import settings

    from portal.queue import (
        BEAT_ROUND,
        ENERGY_PLAN,
        ENERGY_TICK,
        ENERGY_TRAIN,
        PRUNE_ROUNDS,
        PRUNE_SAMPLES,
        RECLAIMS_PROGRESS,
        REFRESH_START_FORECASTS,
        ROLLUP_SAMPLES,
        SCORE_GPUS,
        SWEEP_NODES,
        SWEEP_NOTIFICATIONS,
        SWEEP_WHATIF_RUNS,
        TRAIN_FAILURE_MODEL,
    )

    every = settings.CORRAL_SCHEDULE_EVERY
    # Every few seconds: time limits, and a full round when one is due (asked for and maybe lost, a preemptive
    # policy, or none for CORRAL_IDLE_ROUND_EVERY); it expires after one period, so a backlog never bursts.
    sender.add_periodic_task(every, _task(BEAT_ROUND), expires=every, name="schedule-round")
    # Liveness: a third of the node timeout (at most 10 s), so a dead node's jobs are requeued within about
    # 1.3 x CORRAL_NODE_TIMEOUT.
    sweep = min(10.0, max(1.0, settings.CORRAL_NODE_TIMEOUT / 3))
    sender.add_periodic_task(sweep, _task(SWEEP_NODES), expires=sweep, name="sweep-nodes")
    # Reclaims of lent nodes (issue #19): hand back the emptied nodes, and the rest at their deadline; at the
    # round's cadence, so a node is back within a few seconds of its last job leaving. One run replaces the next.
    sender.add_periodic_task(every, _task(RECLAIMS_PROGRESS), expires=every, name="pools-reclaims")
    # Start forecasts for pending jobs: a look ahead with the live policy, much heavier than a round, so it has
    # its own slower cadence; each run replaces the last, so it expires after one period.
    forecast = settings.CORRAL_FORECAST_EVERY
    sender.add_periodic_task(forecast, _task(REFRESH_START_FORECASTS), expires=forecast, name="forecast-starts")
    # Telemetry rollups: each run rebuilds the last few 1-minute buckets and the current hour (idempotent upserts);
    # expires after one period so a stalled worker never queues a backlog of identical runs.
    sender.add_periodic_task(60.0, _task(ROLLUP_SAMPLES), expires=60.0, name="telemetry-rollup")
    # Failure-risk scoring on the hourly rollups: every 5 minutes is ample for a 24 h horizon. On a fresh install
    # it also requests the first model training.
    sender.add_periodic_task(300.0, _task(SCORE_GPUS), expires=300.0, name="telemetry-score")
    # Retention: hourly; deletes in chunks, so a missed run only leaves a little more for the next one.
    sender.add_periodic_task(3600.0, _task(PRUNE_SAMPLES), expires=3600.0, name="telemetry-prune")
    # Round statistics older than a day are dropped; every 10 minutes keeps the table at about a day of rounds.
    sender.add_periodic_task(600.0, _task(PRUNE_ROUNDS), expires=600.0, name="scheduler-prune-rounds")
    # What-if runs whose message or worker was lost are sent again or failed, so none waits for ever.
    sender.add_periodic_task(300.0, _task(SWEEP_WHATIF_RUNS), expires=300.0, name="whatif-sweep")
    # Notifications: job events and long waits since the last sweep into the outbox, each row then delivered by its
    # own task; every few seconds so news arrives promptly, and one sweep replaces the next, so it expires after one.
    notify = settings.CORRAL_NOTIFY_EVERY
    sender.add_periodic_task(notify, _task(SWEEP_NOTIFICATIONS), expires=notify, name="notifications-sweep")
    # Sliding retraining of the failure predictor on the latest window: daily, seconds to minutes of one core.
    sender.add_periodic_task(86_400.0, _task(TRAIN_FAILURE_MODEL), expires=3600.0, name="telemetry-train")
    # Energy saving (docs/energy.md): a demand sample each minute (with power states reconciled and nodes woken for
    # waiting jobs when it is on); the planner once a 10-minute step, its unit of decision; the forecaster retrained
    # every CORRAL_ENERGY_TRAIN_HOURS. Each replaces the last, so each expires after one period.
    sender.add_periodic_task(60.0, _task(ENERGY_TICK), expires=60.0, name="energy-tick")
    sender.add_periodic_task(600.0, _task(ENERGY_PLAN), expires=600.0, name="energy-plan")
    train = settings.CORRAL_ENERGY_TRAIN_HOURS * 3600.0
    sender.add_periodic_task(train, _task(ENERGY_TRAIN), expires=train, name="energy-train")


def _task(name: str) -> Signature[Any]:  # a task by name: its result type is unknown here
    return app.signature(name)
