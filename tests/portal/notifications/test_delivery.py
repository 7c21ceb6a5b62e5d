"""Delivery: the webhook's JSON as a real HTTP server receives it, retries with the outbox row updated each try,
refusals given up at once, and jobs untouched by any of it. Ref: #18 (notifications)."""

from __future__ import annotations

import pytest
from django.core import mail

from portal.jobs.models import Job
from portal.notifications.models import Channel, DeliveryState, Notification, Topic
from portal.notifications.services import DELIVERY_ATTEMPTS, notification_deliver, notifications_sweep
from portal.notifications.tasks import deliver_notification
from tests.fixtures import World
from tests.portal.notifications.conftest import finish, run, wants
from tests.portal.notifications.webhook import SECRET_BODY, Receiver

pytestmark = pytest.mark.django_db


def _swept_webhook_row(world: World, receiver: Receiver) -> tuple[Job, Notification]:
    """Alice's job failed and the sweep wrote its webhook row; nothing is sent yet."""
    wants(world.alice, webhook=receiver.url)
    job = finish(run(world.alice), exit_code=1)
    notifications_sweep()
    return job, Notification.objects.get(channel=Channel.WEBHOOK)


def test_the_webhook_gets_slack_and_mattermost_compatible_json(
    world: World, receiver: Receiver, eager: None, django_capture_on_commit_callbacks
) -> None:
    wants(world.alice, webhook=receiver.url)
    job = finish(run(world.alice), exit_code=1)
    with django_capture_on_commit_callbacks(execute=True):
        notifications_sweep()
    assert len(receiver.requests) == 1
    request = receiver.requests[0]
    assert request["path"] == "/hooks/T000/B000/abc"
    assert request["content_type"] == "application/json"
    assert request["json"] == {
        "text": f"Job {job.pk} (train-resnet) failed: rank 0: exit code 1 — http://127.0.0.1:8000/jobs/{job.pk}/",
        "job": job.pk,
        "event": "failed",
        "url": f"http://127.0.0.1:8000/jobs/{job.pk}/",
    }
    row = Notification.objects.get()
    assert (row.state, row.attempts, row.last_error) == (DeliveryState.SENT, 1, "")


def test_a_webhook_that_fails_first_is_retried_until_it_answers(world: World, receiver: Receiver, eager: None) -> None:
    job, row = _swept_webhook_row(world, receiver)
    receiver.answers.extend([500, 503])
    deliver_notification.apply(args=(row.pk,))  # the task, with its retries (at once here: eager)
    assert len(receiver.requests) == 3
    assert receiver.bodies[0] == receiver.bodies[2]  # the same message each try
    row.refresh_from_db()
    assert (row.state, row.attempts) == (DeliveryState.SENT, 3)
    assert row.last_error == "the webhook answered 503 Service Unavailable"  # kept: the page says a try failed
    job.refresh_from_db()
    assert job.state == "failed"


def test_each_failed_try_is_recorded_on_the_row(world: World, receiver: Receiver) -> None:
    """Try by try, as a worker runs them: the row stays queued with the error and counts the tries."""
    _, row = _swept_webhook_row(world, receiver)
    receiver.answers.append(500)
    with pytest.raises(Exception, match="answered 500"):
        notification_deliver(notification_id=row.pk)
    row.refresh_from_db()
    assert (row.state, row.attempts, row.last_error) == (
        DeliveryState.QUEUED,
        1,
        "the webhook answered 500 Internal Server Error",
    )
    assert row.sending_until is None
    assert notification_deliver(notification_id=row.pk) is True
    row.refresh_from_db()
    assert (row.state, row.attempts) == (DeliveryState.SENT, 2)
    assert notification_deliver(notification_id=row.pk) is False  # a message delivered twice sends once
    assert len(receiver.requests) == 2


def test_a_webhook_that_keeps_failing_is_given_up_after_the_last_try(
    world: World, receiver: Receiver, eager: None
) -> None:
    job, row = _swept_webhook_row(world, receiver)
    receiver.answers.extend([502] * 10)
    deliver_notification.apply(args=(row.pk,))
    assert len(receiver.requests) == DELIVERY_ATTEMPTS
    row.refresh_from_db()
    assert (row.state, row.attempts) == (DeliveryState.FAILED, DELIVERY_ATTEMPTS)
    assert row.last_error == "the webhook answered 502 Bad Gateway"
    assert SECRET_BODY.decode() not in row.last_error  # the answer's body never reaches the user
    job.refresh_from_db()
    assert job.state == "failed"


@pytest.mark.parametrize(("status", "error"), [(404, "the webhook answered 404 Not Found"), (301, "a redirect")])
def test_a_refusal_is_not_retried(world: World, receiver: Receiver, eager: None, status: int, error: str) -> None:
    _, row = _swept_webhook_row(world, receiver)
    receiver.answers.append(status)
    deliver_notification.apply(args=(row.pk,))
    assert len(receiver.requests) == 1
    row.refresh_from_db()
    assert row.state == DeliveryState.FAILED
    assert error in row.last_error


def test_a_slow_webhook_times_out(world: World, receiver: Receiver, settings) -> None:
    settings.CORRAL_NOTIFY_WEBHOOK_TIMEOUT = 0.2
    _, row = _swept_webhook_row(world, receiver)
    receiver.delay = 1.0
    with pytest.raises(Exception, match="did not answer within 0.2 s"):
        notification_deliver(notification_id=row.pk)
    row.refresh_from_db()
    assert row.state == DeliveryState.QUEUED and row.attempts == 1


def test_an_unreachable_webhook_says_so(world: World, receiver: Receiver) -> None:
    wants(world.alice, webhook="http://127.0.0.1:1/hook")  # nothing listens on port 1
    finish(run(world.alice), exit_code=0)
    notifications_sweep()
    row = Notification.objects.get()
    with pytest.raises(Exception, match="could not reach the webhook's host"):
        notification_deliver(notification_id=row.pk)


def test_a_webhook_whose_host_resolves_into_a_refused_network_is_not_contacted(
    world: World,
    receiver: Receiver,
    settings,  # noqa: ANN001
) -> None:
    """The address was fine when saved (a name, or a network the site refused later): each delivery checks what the
    host resolves to, and a refused one fails for good without a request."""
    wants(world.alice, webhook=receiver.url.replace("127.0.0.1", "localhost"))
    settings.CORRAL_NOTIFY_WEBHOOK_DENY_NETWORKS = ["127.0.0.0/8", "::1/128"]
    finish(run(world.alice), exit_code=0)
    notifications_sweep()
    row = Notification.objects.get()
    notification_deliver(notification_id=row.pk)
    row.refresh_from_db()
    assert row.state == DeliveryState.FAILED and "sends no webhooks to" in row.last_error
    assert receiver.requests == []


def test_mail_and_webhook_both_go_out_and_are_tracked_apart(
    world: World, receiver: Receiver, eager: None, django_capture_on_commit_callbacks
) -> None:
    wants(world.alice, email="alice@example.org", webhook=receiver.url)
    receiver.answers.extend([500] * 10)  # the webhook is down; mail is not
    job = finish(run(world.alice), exit_code=0)
    with django_capture_on_commit_callbacks(execute=True):
        notifications_sweep()
    states = dict(Notification.objects.values_list("channel", "state"))
    assert states == {Channel.EMAIL: DeliveryState.SENT, Channel.WEBHOOK: DeliveryState.FAILED}
    assert len(mail.outbox) == 1
    assert Notification.objects.filter(topic=Topic.SUCCEEDED, job=job).count() == 2


def test_a_state_change_stands_whatever_notifications_do(
    world: World, eager: None, django_capture_on_commit_callbacks
) -> None:
    """Nothing runs inside the job's transaction: the exit commits, and a webhook that cannot be reached only
    fails its own row, later."""
    wants(world.alice, webhook="http://127.0.0.1:1/hook")
    with django_capture_on_commit_callbacks(execute=True):
        job = finish(run(world.alice), exit_code=1)
    assert not Notification.objects.exists()  # nothing until the sweep
    with django_capture_on_commit_callbacks(execute=True):
        notifications_sweep()
    job.refresh_from_db()
    assert job.state == "failed" and job.exit_code == 1
    row = Notification.objects.get()
    assert (row.state, row.attempts) == (DeliveryState.FAILED, DELIVERY_ATTEMPTS)
