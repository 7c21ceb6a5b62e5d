"""The sweep: job news into the outbox, once per piece of news and channel, only to the job's own owner, with a
bounded number of queries; and mail that reads like a person wrote it. Ref: #18 (notifications)."""

from __future__ import annotations

import math
from datetime import timedelta

import pytest
from django.core import mail
from django.db import connection
from django.utils import timezone

from portal.jobs.array_services import job_array_submit
from portal.jobs.models import EventKind, Job, JobEvent
from portal.jobs.services import job_cancel, job_preempt, job_submit
from portal.notifications.models import Channel, DeliveryState, EventCursor, Notification, Topic
from portal.notifications.services import LOST_AFTER, notifications_sweep, settle
from tests.fixtures import World
from tests.portal.notifications.conftest import finish, run, wants
from tests.portal.notifications.webhook import Receiver

pytestmark = pytest.mark.django_db


def test_a_failed_job_mails_its_owner_what_failed_and_where_to_look(
    world: World, eager: None, django_capture_on_commit_callbacks
) -> None:
    wants(world.alice, email="alice@example.org")
    job = finish(run(world.alice), exit_code=1)
    assert job.state == "failed"
    with django_capture_on_commit_callbacks(execute=True):
        notifications_sweep()
    assert len(mail.outbox) == 1
    sent = mail.outbox[0]
    assert sent.to == ["alice@example.org"]
    assert sent.from_email == "Corral <corral@localhost>"
    assert sent.subject == f"[Corral] Job {job.pk} (train-resnet) failed: rank 0: exit code 1"
    assert sent.body.startswith(
        f"Job {job.pk} (train-resnet) failed: rank 0: exit code 1 — http://127.0.0.1:8000/jobs/{job.pk}/\n"
    )
    assert "http://127.0.0.1:8000/account/notifications/" in sent.body  # where to change or stop it
    row = Notification.objects.get()
    assert (row.state, row.attempts, row.topic, row.channel) == (DeliveryState.SENT, 1, Topic.FAILED, Channel.EMAIL)
    assert row.sent_at is not None


def test_links_start_at_the_public_url(world: World, settings, eager: None, django_capture_on_commit_callbacks) -> None:
    settings.CORRAL_PUBLIC_URL = "https://corral.example.org/"
    wants(world.alice, email="alice@example.org")
    job = finish(run(world.alice), exit_code=0)
    with django_capture_on_commit_callbacks(execute=True):
        notifications_sweep()
    assert mail.outbox[0].subject == f"[Corral] Job {job.pk} (train-resnet) succeeded"
    assert f"succeeded — https://corral.example.org/jobs/{job.pk}/" in mail.outbox[0].body


def test_each_piece_of_news_is_written_once_per_channel_even_when_swept_twice(
    world: World, receiver: Receiver, django_capture_on_commit_callbacks
) -> None:
    wants(world.alice, email="alice@example.org", webhook=receiver.url)
    finish(run(world.alice), exit_code=0)
    finish(run(world.alice, name="second"), exit_code=3)
    with django_capture_on_commit_callbacks() as queued:
        first = notifications_sweep()
    again = notifications_sweep()
    assert (first.written, again.written) == (4, 0)
    assert again.events == 0  # told already: skipped by the read, though still after the cursor
    assert len(queued) == 4  # one delivery each, after commit
    rows = Notification.objects.order_by("event_id", "channel")
    assert [(r.topic, r.channel) for r in rows] == [
        (Topic.SUCCEEDED, Channel.EMAIL),
        (Topic.SUCCEEDED, Channel.WEBHOOK),
        (Topic.FAILED, Channel.EMAIL),
        (Topic.FAILED, Channel.WEBHOOK),
    ]


def test_only_the_asked_for_news_is_written(world: World) -> None:
    wants(world.alice, email="alice@example.org", on_succeeded=False, on_cancelled=False)
    finish(run(world.alice), exit_code=0)
    job_cancel(job=job_submit(user=world.alice, command="x", gpus=1), by=world.alice)
    finish(run(world.alice, name="bad"), exit_code=2)
    notifications_sweep()
    assert list(Notification.objects.values_list("topic", flat=True)) == [Topic.FAILED]


def test_a_cancel_and_a_preemption_read_as_such(world: World) -> None:
    wants(world.alice, email="alice@example.org")
    cancelled = job_cancel(job=job_submit(user=world.alice, name="sweep", command="x", gpus=1), by=world.alice)
    preempted = run(world.alice, name="big")
    assert job_preempt(job_id=preempted.pk, actor="scheduler")
    notifications_sweep()
    texts = {n.topic: n.text for n in Notification.objects.all()}
    assert (
        texts[Topic.CANCELLED]
        == f"Job {cancelled.pk} (sweep) was cancelled — http://127.0.0.1:8000/jobs/{cancelled.pk}/"
    )
    assert texts[Topic.REQUEUED] == (
        f"Job {preempted.pk} (big) is back in the queue: preempted for a higher-priority job — "
        f"http://127.0.0.1:8000/jobs/{preempted.pk}/"
    )


def test_a_user_without_settings_or_channel_gets_nothing(world: World) -> None:
    wants(world.bob)  # settings saved, but no channel on
    world.eve.email = "eve@example.org"  # an address, but no settings at all
    world.eve.save()
    wants(world.admin, email="", webhook="", email_enabled=True)  # email on, but no address to mail
    for user in (world.bob, world.eve, world.admin):
        finish(run(user, name=f"job-of-{user.get_username()}"), exit_code=1)
    result = notifications_sweep()
    assert (result.events, result.written) == (0, 0)
    assert not Notification.objects.exists()


def test_nobody_hears_of_anyone_elses_job(world: World) -> None:
    """Bob shares alice's tenant and labadmin administers it: both see her jobs, neither is told of them."""
    wants(world.alice, email="alice@example.org")
    wants(world.bob, email="bob@example.org")
    wants(world.admin, email="admin@example.org")
    wants(world.eve, email="eve@example.org")
    job = finish(run(world.alice), exit_code=1)
    notifications_sweep()
    assert list(Notification.objects.values_list("user__username", "job_id")) == [("alice", job.pk)]


def test_a_long_wait_is_told_once_per_queueing(world: World, receiver: Receiver) -> None:
    wants(world.alice, webhook=receiver.url, long_wait_minutes=30)
    job = job_submit(user=world.alice, name="huge", command="x", gpus=1)  # no round runs: it waits
    now = timezone.now()
    Job.objects.filter(pk=job.pk).update(queued_at=now - timedelta(minutes=29), reason="not enough free GPUs")
    assert notifications_sweep(now=now).long_waits == 0  # 29 minutes: not yet
    Job.objects.filter(pk=job.pk).update(queued_at=now - timedelta(minutes=31))
    assert notifications_sweep(now=now).long_waits == 1
    assert notifications_sweep(now=now + timedelta(hours=5)).long_waits == 0  # the same queueing: told already
    row = Notification.objects.get(topic=Topic.LONG_WAIT)
    assert row.text == (
        f"Job {job.pk} (huge) has waited 31m to start: not enough free GPUs — http://127.0.0.1:8000/jobs/{job.pk}/"
    )
    # Back in the queue (a requeue moves queued_at): a new queueing, told again once it has waited as long.
    Job.objects.filter(pk=job.pk).update(queued_at=now + timedelta(hours=1))
    assert notifications_sweep(now=now + timedelta(hours=1, minutes=10)).long_waits == 0
    assert notifications_sweep(now=now + timedelta(hours=1, minutes=30)).long_waits == 1
    assert Notification.objects.filter(topic=Topic.LONG_WAIT).count() == 2


def test_long_waits_follow_each_owners_threshold_and_switch(world: World) -> None:
    wants(world.alice, email="alice@example.org", long_wait_minutes=10)
    wants(world.bob, email="bob@example.org", long_wait_minutes=120)
    wants(world.admin, email="admin@example.org", on_long_wait=False)
    now = timezone.now()
    for user in (world.alice, world.bob, world.admin):
        job = job_submit(user=user, command="x", gpus=1)
        Job.objects.filter(pk=job.pk).update(queued_at=now - timedelta(minutes=60))
    notifications_sweep(now=now)
    assert list(Notification.objects.values_list("user__username", flat=True)) == ["alice"]


def test_the_sweep_reads_a_thousand_events_in_a_bounded_number_of_queries(
    world: World, receiver: Receiver, django_assert_max_num_queries, django_capture_on_commit_callbacks
) -> None:
    wants(world.alice, email="alice@example.org", webhook=receiver.url)
    wants(world.bob, email="bob@example.org")
    jobs = [
        job_submit(user=user, name=f"j{n}", command="x", gpus=1) for n, user in enumerate([world.alice, world.bob] * 5)
    ]
    JobEvent.objects.bulk_create(
        JobEvent(job=jobs[n % len(jobs)], kind=EventKind.FAILED, actor="agent:n1", reason=f"rank 0: exit code {n}")
        for n in range(1000)
    )
    # One read of the events (what was told is skipped inside it), the inserts, the cursor (created, this first
    # time), the long waits and lost messages: no query per event. The inserts are one statement on PostgreSQL;
    # SQLite takes 999 values a statement.
    columns = len([f for f in Notification._meta.concrete_fields if not f.primary_key])
    per_insert = (connection.features.max_query_params or 1_000_000) // columns
    inserts = math.ceil(1500 / per_insert)
    with django_capture_on_commit_callbacks() as queued, django_assert_max_num_queries(14 + inserts):
        result = notifications_sweep()
    assert result.events == 1000
    assert result.written == 1500  # alice's 500 events by mail and webhook, bob's 500 by mail
    assert len(queued) == 1500
    with django_assert_max_num_queries(10):  # and the next sweep, reading the same 1,000 again, writes nothing
        assert notifications_sweep().written == 0


def test_the_cursor_moves_past_settled_events_and_never_skips_a_late_commit(world: World) -> None:
    """Ids are handed out at insert and become visible at commit: an event with a smaller id than one already read
    may still appear. The cursor moves only past ids that were seen a settle time ago."""
    wants(world.alice, email="alice@example.org")
    first = finish(run(world.alice), exit_code=0)
    now = timezone.now()
    notifications_sweep(now=now)
    cursor = EventCursor.objects.get()
    seen = cursor.seen_id
    assert cursor.event_id == 0 and seen == JobEvent.objects.latest("id").pk
    # An event whose transaction began before that sweep and commits after it: a smaller id than the last seen.
    late = JobEvent.objects.filter(job=first).order_by("id").first()
    assert late is not None
    late_id = late.pk
    late.delete()
    notifications_sweep(now=now + timedelta(seconds=5))
    JobEvent.objects.create(pk=late_id, job=first, kind=EventKind.FAILED, actor="agent:n1", reason="late")
    notifications_sweep(now=now + settle() + timedelta(seconds=1))
    assert Notification.objects.filter(event_id=late_id).exists()  # read although its id was below the last seen
    cursor.refresh_from_db()
    assert cursor.event_id == seen  # and now the cursor is past both
    # Past the cursor, nothing is read again.
    assert notifications_sweep(now=now + 2 * settle() + timedelta(seconds=2)).events == 0


def test_a_first_sweep_on_an_old_site_does_not_send_its_history(world: World) -> None:
    wants(world.alice, email="alice@example.org")
    job = finish(run(world.alice), exit_code=1)
    JobEvent.objects.filter(job=job).update(at=timezone.now() - timedelta(days=3))
    fresh = finish(run(world.alice, name="today"), exit_code=1)
    notifications_sweep()
    assert list(Notification.objects.values_list("job_id", flat=True)) == [fresh.pk]


def test_job_array_tasks_are_not_told_one_by_one(world: World) -> None:
    wants(world.alice, email="alice@example.org")
    array = job_array_submit(user=world.alice, name="sweep", command="x", gpus=1, array="0-9")
    for task in Job.objects.filter(array=array):
        job_cancel(job=task, by=world.alice)
    assert JobEvent.objects.filter(kind=EventKind.CANCELLED).count() == 10
    assert notifications_sweep().written == 0


def test_the_sweep_queues_again_a_notification_whose_message_was_lost(
    world: World, eager: None, django_capture_on_commit_callbacks
) -> None:
    wants(world.alice, email="alice@example.org")
    finish(run(world.alice), exit_code=1)
    with django_capture_on_commit_callbacks(execute=False):
        notifications_sweep()  # its delivery message is lost: never run
    row = Notification.objects.get()
    assert row.state == DeliveryState.QUEUED and not mail.outbox
    with django_capture_on_commit_callbacks(execute=True):
        assert notifications_sweep().requeued == 0  # a young queued row may just be waiting for a worker
    later = timezone.now() + LOST_AFTER + timedelta(minutes=1)
    with django_capture_on_commit_callbacks(execute=True):
        assert notifications_sweep(now=later).requeued == 1
    row.refresh_from_db()
    assert (row.state, row.attempts) == (DeliveryState.SENT, 1)
    assert len(mail.outbox) == 1
