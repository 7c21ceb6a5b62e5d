"""Shared pieces of the notification tests: a webhook receiver (``webhook.py``, a real HTTP server), jobs taken
through the real services to a finish, and settings for the users of ``tests.fixtures.world``."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from django.contrib.auth.models import AbstractBaseUser

from portal.celery import app as celery_app
from portal.jobs.models import Job, JobTask
from portal.jobs.services import job_submit
from portal.nodes.services import TaskReport, node_heartbeat
from portal.notifications.models import NotificationSettings
from portal.scheduler.services import scheduling_round
from tests.portal.notifications.webhook import Receiver, serve_webhook


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    with serve_webhook() as received:
        yield received


@pytest.fixture
def eager(monkeypatch: pytest.MonkeyPatch) -> None:
    """Queued tasks run at once in this process (retries too, without their countdown)."""
    monkeypatch.setitem(celery_app.conf, "task_always_eager", True)


def wants(user: AbstractBaseUser, *, email: str = "", webhook: str = "", **changes: Any) -> NotificationSettings:
    """Give ``user`` settings: mail to ``email`` (set on the account) and/or ``webhook``; other fields as given."""
    if email:
        user.email = email  # type: ignore[attr-defined]
        user.save()
    values: dict[str, Any] = {"email_enabled": bool(email), "webhook_url": webhook, **changes}
    if "long_wait_minutes" in values:
        values["long_wait"] = timedelta(minutes=values.pop("long_wait_minutes"))
    return NotificationSettings.objects.update_or_create(user=user, defaults=values)[0]


def run(user: AbstractBaseUser, *, name: str = "train-resnet", gpus: int = 1) -> Job:
    """Submit a job and place it: it is running on a node of the world's cluster."""
    job = job_submit(user=user, name=name, command="python train.py", gpus=gpus)  # type: ignore[arg-type]
    scheduling_round()
    job.refresh_from_db()
    assert job.state == "running", job.reason
    return job


def finish(job: Job, exit_code: int) -> Job:
    """The job's agent reports its one task running, then exited with ``exit_code``."""
    task = JobTask.objects.select_related("node").get(job=job, attempt=job.attempt, rank=0)
    node_heartbeat(node=task.node, reports=[TaskReport(job.pk, job.attempt, 0, "running", pid=7)])
    node_heartbeat(node=task.node, reports=[TaskReport(job.pk, job.attempt, 0, "exited", exit_code=exit_code)])
    job.refresh_from_db()
    return job
