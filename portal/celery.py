"""The Celery application and every periodic task Corral runs (one place, each with its cadence and expiry)."""

from __future__ import annotations

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")

app = Celery("portal")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks(["scheduling.live", "telemetry"])


@app.on_after_configure.connect
def _periodic_tasks(sender: Celery, **_: object) -> None:
    from django.conf import settings

    every = settings.CORRAL_SCHEDULE_EVERY
    # A round every few seconds catches whatever the on-commit kicks missed (a worker restart, a lost message);
    # it expires after one period, so a backlog never turns into a burst of redundant rounds.
    sender.add_periodic_task(every, _task("scheduling.live.tasks.schedule_round"), expires=every, name="schedule-round")
    # Liveness: often enough that a dead node's jobs are requeued within about CORRAL_NODE_TIMEOUT + 10 s.
    sender.add_periodic_task(10.0, _task("scheduling.live.tasks.sweep_nodes"), expires=10.0, name="sweep-nodes")


def _task(name: str):  # noqa: ANN202 - a Celery signature
    return app.signature(name)
