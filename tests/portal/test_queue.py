"""Tasks are queued by name (portal.queue), so a name that matches no task would fail silently in production: every
name must be a registered task, and every task the product defines must have its name there. Ref: #14"""

from __future__ import annotations

from django.utils.module_loading import autodiscover_modules

from portal.celery import app
from portal.queue import TASK_NAMES


def test_every_task_name_is_a_registered_task_and_back() -> None:
    autodiscover_modules("tasks")  # every installed app's tasks module, as a worker finds them at start
    ours = {name for name in app.tasks if not name.startswith("celery.")}
    assert ours == set(TASK_NAMES)


def test_the_beat_schedule_names_only_registered_tasks() -> None:
    autodiscover_modules("tasks")
    scheduled = {entry["task"] for entry in app.conf.beat_schedule.values()}
    assert scheduled and scheduled <= set(TASK_NAMES)
