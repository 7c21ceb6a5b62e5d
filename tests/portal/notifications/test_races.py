"""Sweeps and deliveries racing on PostgreSQL: still one notification per piece of news and channel, and one
request per notification. Ref: #18 (notifications)."""

from __future__ import annotations

import pytest
from django.db import connection

from portal.notifications.models import DeliveryState, Notification
from portal.notifications.services import SweepResult, notification_deliver, notifications_sweep
from tests.concurrency import run_together
from tests.fixtures import World
from tests.portal.notifications.conftest import finish, run, wants
from tests.portal.notifications.webhook import Receiver

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(connection.vendor != "postgresql", reason="row locks need PostgreSQL (make test runs it)"),
]


def test_racing_sweeps_write_each_notification_once(world: World, receiver: Receiver, eager: None) -> None:
    wants(world.alice, webhook=receiver.url, on_long_wait=False)
    jobs = [finish(run(world.alice, name=f"job{n}"), exit_code=n % 2) for n in range(3)]
    outcomes = run_together(notifications_sweep, threads=8)
    assert all(isinstance(outcome, SweepResult) for outcome in outcomes), outcomes
    assert sum(outcome.written for outcome in outcomes if isinstance(outcome, SweepResult)) == 3
    assert sorted(Notification.objects.values_list("job_id", flat=True)) == sorted(job.pk for job in jobs)
    assert len(receiver.requests) == 3  # each delivered once, after its sweep committed


def test_racing_deliveries_of_one_notification_send_it_once(world: World, receiver: Receiver) -> None:
    wants(world.alice, webhook=receiver.url)
    finish(run(world.alice), exit_code=1)
    notifications_sweep()
    row = Notification.objects.get()
    outcomes = run_together(lambda: notification_deliver(notification_id=row.pk), threads=6)
    assert sorted(outcomes, key=str) == [False] * 5 + [True]
    assert len(receiver.requests) == 1
    row.refresh_from_db()
    assert (row.state, row.attempts) == (DeliveryState.SENT, 1)
