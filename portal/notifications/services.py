"""Services that write notifications: save a user's settings, sweep the jobs' history into the outbox, deliver one
outbox row, send a test.

How news travels: job services record a ``JobEvent`` for every state change and know nothing of notifications.
Every ``CORRAL_NOTIFY_EVERY`` seconds :func:`notifications_sweep` reads the events after its cursor and the jobs
waiting past their owner's threshold, writes one ``Notification`` per piece of news and channel (the outbox's unique
constraints make a second one impossible), and queues :func:`notification_deliver` for each once it commits. A
delivery holds no transaction while it talks to a mail server or a webhook; a failed try is retried by its task with
backoff. So a state change never waits for, or rolls back because of, a notification, and a lost or failed one
never touches a job.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from django.conf import settings
from django.db import IntegrityError, transaction
from django.db.models import F, Max, Q
from django.utils import timezone

from portal.errors import Conflict, ValidationFailed
from portal.jobs.models import JobEvent
from portal.notifications.channels import DeliveryError, post_webhook, send_email
from portal.notifications.messages import Message, email_body, job_message, job_url, settings_url, test_message
from portal.notifications.models import (
    EVENT_TOPICS,
    Channel,
    DeliveryState,
    EventCursor,
    Notification,
    NotificationSettings,
    Topic,
)
from portal.notifications.rules import long_wait_problem, webhook_url_problem
from portal.notifications.selectors import (
    job_events_to_tell,
    jobs_waiting_too_long,
    notifications_lost,
)
from portal.queue import DELIVER_NOTIFICATION, enqueue_on_commit

if TYPE_CHECKING:
    from django.contrib.auth.models import User

    from portal.jobs.models import Job

logger = logging.getLogger(__name__)

#: Events read per sweep, and waiting jobs looked at: a backlog is worked off a batch per sweep.
EVENT_BATCH = 2000
LONG_WAIT_BATCH = 1000
#: Tries per notification: the first and the task's five retries, 30 s, 1, 2, 4 and 8 minutes apart (``tasks``).
DELIVERY_ATTEMPTS = 6
#: A try in flight holds its row this long, so a redelivered message does not send it a second time meanwhile;
#: longer than a try can last (the webhook's timeout, or the mail server's).
SENDING_LEASE = timedelta(minutes=2)
#: A queued row untouched this long has lost its message (the longest wait between tries is 8 minutes): the sweep
#: queues it again, this many at a time.
LOST_AFTER = timedelta(minutes=15)
LOST_BATCH = 200


def settle() -> timedelta:
    """How long after an event id is handed out its transaction may still commit: longer than any transaction that
    records job events lasts (a scheduling round holds its lease at most ``CORRAL_LEASE_SECONDS``)."""
    return timedelta(seconds=max(60.0, 2 * settings.CORRAL_LEASE_SECONDS))


# --- Settings -------------------------------------------------------------------------------------------------


@transaction.atomic
def notification_settings_save(
    *,
    user: User,
    email_enabled: bool,
    webhook_url: str,
    on_succeeded: bool,
    on_failed: bool,
    on_cancelled: bool,
    on_requeued: bool,
    on_long_wait: bool,
    long_wait_minutes: int,
) -> NotificationSettings:
    """Save ``user``'s notification settings (creating them the first time).

    Refuses (``ValidationFailed``, naming the field) a webhook address that is not an http(s) URL and a threshold
    out of range; the form and the serializer check the same rules first (``portal.notifications.rules``), so this
    is the last line. Email goes to the account's address: turning it on without one is allowed (the page says
    nothing will be mailed until there is one). No side effects.
    """
    webhook_url = webhook_url.strip()
    if webhook_url and (problem := webhook_url_problem(webhook_url)) is not None:
        raise ValidationFailed(problem, field="webhook_url")
    if (problem := long_wait_problem(long_wait_minutes)) is not None:
        raise ValidationFailed(problem, field="long_wait_minutes")
    saved, _ = NotificationSettings.objects.update_or_create(
        user=user,
        defaults={
            "email_enabled": email_enabled,
            "webhook_url": webhook_url,
            "on_succeeded": on_succeeded,
            "on_failed": on_failed,
            "on_cancelled": on_cancelled,
            "on_requeued": on_requeued,
            "on_long_wait": on_long_wait,
            "long_wait": timedelta(minutes=long_wait_minutes),
        },
    )
    return saved


def channels_for(user: User, prefs: NotificationSettings | None) -> list[tuple[Channel, str]]:
    """Where ``user``'s notifications go: ``(channel, address or URL)`` for each channel on and usable."""
    if prefs is None:
        return []
    found: list[tuple[Channel, str]] = []
    if prefs.email_enabled and user.email:
        found.append((Channel.EMAIL, user.email))
    if prefs.webhook_url:
        found.append((Channel.WEBHOOK, prefs.webhook_url))
    return found


# --- The sweep ------------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class SweepResult:
    events: int = 0  # job events read: news not told yet
    written: int = 0  # notifications written about events
    long_waits: int = 0  # notifications written about long waits
    requeued: int = 0  # queued notifications whose message was lost, queued again
    skipped: bool = False  # another sweep held the cursor


@transaction.atomic
def notifications_sweep(*, now: datetime | None = None) -> SweepResult:
    """Write the outbox rows for the news since the last sweep, and queue their delivery after commit.

    Reads (a fixed number of queries per batch, whatever it holds): the job events after the cursor that their
    job's owner asked to hear of and was not told of yet (``EVENT_BATCH`` at most), and the pending jobs that
    waited past their owner's threshold and were not told of yet for this queueing (``LONG_WAIT_BATCH``). Writes
    a row per piece of news and channel in one ``bulk_create``, moves the cursor (see ``EventCursor``), and queues
    again the queued rows whose message was lost. Holds the cursor's row lock, so two sweeps never write at once;
    one that finds it taken returns at once (``skipped``).

    Side effects, after commit: one ``notifications.deliver`` task per row written or found lost.
    """
    now = now or timezone.now()
    cursor = _take_cursor(now)
    if cursor is None:
        return SweepResult(skipped=True)
    events = job_events_to_tell(after_id=cursor.event_id, limit=EVENT_BATCH)
    event_rows = _event_rows(events)
    wait_rows = _long_wait_rows(jobs_waiting_too_long(now=now, limit=LONG_WAIT_BATCH), now)
    written = Notification.objects.bulk_create([*event_rows, *wait_rows])
    for row in written:
        enqueue_on_commit(DELIVER_NOTIFICATION, row.pk)
    _advance(cursor, last_read=events[-1].pk if len(events) == EVENT_BATCH else None, now=now)
    requeued = _requeue_lost(now)
    return SweepResult(events=len(events), written=len(event_rows), long_waits=len(wait_rows), requeued=requeued)


def _take_cursor(now: datetime) -> EventCursor | None:
    """The cursor, row-locked; None when another sweep holds it. The first sweep of a site starts it at the events
    of the last settle time, so turning notifications on for an old site does not send its whole history."""
    cursor = EventCursor.objects.select_for_update(skip_locked=True).filter(pk=1).first()
    if cursor is not None:
        return cursor
    if EventCursor.objects.filter(pk=1).exists():
        return None  # locked by a sweep running now
    start = JobEvent.objects.filter(at__lt=now - settle()).aggregate(last=Max("id"))["last"] or 0
    try:
        with transaction.atomic():
            return EventCursor.objects.create(pk=1, event_id=start)
    except IntegrityError:  # two first sweeps at once: the other one has it
        return None


def _advance(cursor: EventCursor, *, last_read: int | None, now: datetime) -> None:
    """Move the cursor to the id seen a settle time ago (no smaller id can still appear), or to ``last_read`` when
    the batch was full and stopped before it; then note the largest id now as the next candidate."""
    if cursor.seen_id is not None and cursor.seen_at is not None and now - cursor.seen_at >= settle():
        target = cursor.seen_id if last_read is None else min(cursor.seen_id, last_read)
        cursor.event_id = max(cursor.event_id, target)
        if cursor.event_id >= cursor.seen_id:
            cursor.seen_id = cursor.seen_at = None
    if cursor.seen_id is None:
        cursor.seen_id = JobEvent.objects.aggregate(last=Max("id"))["last"] or cursor.event_id
        cursor.seen_at = now
    cursor.save()


def _row(user: User, channel: Channel, target: str, message: Message, **about: Any) -> Notification:
    return Notification(user=user, channel=channel, target=target, subject=message.subject, text=message.text, **about)


def _event_rows(events: list[JobEvent]) -> list[Notification]:
    """One row per event (none told yet: the selector skips those) and channel of its job's owner."""
    rows: list[Notification] = []
    for event in events:
        job = event.job
        owner = job.user
        topic = EVENT_TOPICS[event.kind]
        message = job_message(topic=topic, job_id=job.pk, job_name=job.name, reason=event.reason)
        for channel, target in channels_for(owner, owner.notification_settings):
            rows.append(_row(owner, channel, target, message, job=job, event=event, topic=topic))
    return rows


def _long_wait_rows(jobs: list[Job], now: datetime) -> list[Notification]:
    rows: list[Notification] = []
    for job in jobs:
        assert job.queued_at is not None  # the selector reads only queued jobs
        message = job_message(
            topic=Topic.LONG_WAIT,
            job_id=job.pk,
            job_name=job.name,
            reason=job.reason,
            waited_seconds=(now - job.queued_at).total_seconds(),
        )
        for channel, target in channels_for(job.user, job.user.notification_settings):
            rows.append(
                _row(job.user, channel, target, message, job=job, queued_at=job.queued_at, topic=Topic.LONG_WAIT)
            )
    return rows


def _requeue_lost(now: datetime) -> int:
    """Queue again the rows whose message was lost; fail those that used every try (a worker died mid-try)."""
    lost = notifications_lost(older_than=now - LOST_AFTER, now=now, limit=LOST_BATCH)
    if not lost:
        return 0
    spent = Q(pk__in=lost, attempts__gte=DELIVERY_ATTEMPTS)
    Notification.objects.filter(spent).update(
        state=DeliveryState.FAILED, last_error=f"gave up after {DELIVERY_ATTEMPTS} tries", updated_at=now
    )
    again = list(Notification.objects.filter(pk__in=lost, state=DeliveryState.QUEUED).values_list("pk", flat=True))
    Notification.objects.filter(pk__in=again).update(updated_at=now)
    for pk in again:
        enqueue_on_commit(DELIVER_NOTIFICATION, pk)
    return len(again)


# --- Delivery -------------------------------------------------------------------------------------------------


def webhook_payload(notification: Notification) -> dict[str, Any]:
    """The JSON a webhook gets: ``text`` (what Slack and Mattermost incoming webhooks show), and the same news as
    fields for programs: ``job`` (its id, null for a test), ``event`` (the topic), ``url`` (the job's page)."""
    job_id = notification.job_id
    return {
        "text": notification.text,
        "job": job_id,
        "event": notification.topic,
        "url": job_url(job_id) if job_id is not None else settings_url(),
    }


def notification_deliver(*, notification_id: int) -> bool:
    """Try to send one queued notification; True when this try sent it.

    Claims the row first (one ``UPDATE``: still queued, no try in flight; counts the try), so a message delivered
    twice sends once; sends with no transaction open; then records the outcome. A failure that retrying cannot
    fix, or the last of ``DELIVERY_ATTEMPTS`` tries, marks the row ``failed`` and returns False; any other failure
    keeps it ``queued`` with its ``last_error`` and raises ``DeliveryError``, for the task to retry with backoff.
    Jobs are never touched. Returns False at once for a row that is gone, sent, failed or being sent.
    """
    now = timezone.now()
    free = Q(sending_until__isnull=True) | Q(sending_until__lt=now)
    claimed = Notification.objects.filter(free, pk=notification_id, state=DeliveryState.QUEUED).update(
        sending_until=now + SENDING_LEASE, attempts=F("attempts") + 1, updated_at=now
    )
    if not claimed:
        return False
    notification = Notification.objects.get(pk=notification_id)
    try:
        _send(notification)
    except DeliveryError as exc:
        give_up = exc.permanent or notification.attempts >= DELIVERY_ATTEMPTS
        Notification.objects.filter(pk=notification_id).update(
            state=DeliveryState.FAILED if give_up else DeliveryState.QUEUED,
            last_error=exc.message,
            sending_until=None,
            updated_at=timezone.now(),
        )
        logger.info(
            "notification %s (%s) try %s failed%s: %s",
            notification_id,
            notification.channel,
            notification.attempts,
            ", giving up" if give_up else "",
            exc.message,
        )
        if give_up:
            return False
        raise
    sent = timezone.now()
    Notification.objects.filter(pk=notification_id).update(
        state=DeliveryState.SENT, sent_at=sent, sending_until=None, updated_at=sent
    )
    return True


def _send(notification: Notification) -> None:
    if notification.channel == Channel.EMAIL:
        send_email(
            to=notification.target, subject=f"[Corral] {notification.subject}", body=email_body(notification.text)
        )
    else:
        post_webhook(url=notification.target, payload=webhook_payload(notification))


# --- A test ---------------------------------------------------------------------------------------------------


@transaction.atomic
def notification_test(*, user: User) -> list[Notification]:
    """Send ``user`` a test notification on each channel of their saved settings, so they can see where news will
    arrive. Refuses (``Conflict``) when no channel is usable. Side effects: one ``notifications.deliver`` task per
    channel, after commit; the result shows among their recent notifications."""
    prefs = NotificationSettings.objects.filter(user=user).first()
    targets = channels_for(user, prefs)
    if not targets:
        missing_address = prefs is not None and prefs.email_enabled and not user.email
        raise Conflict(
            "Nothing to send a test to: "
            + (
                "your account has no email address, and no webhook is set."
                if missing_address
                else "turn on email or give a webhook URL, and save first."
            )
        )
    message = test_message(username=user.get_username())
    rows = Notification.objects.bulk_create([_row(user, c, t, message, topic=Topic.TEST) for c, t in targets])
    for row in rows:
        enqueue_on_commit(DELIVER_NOTIFICATION, row.pk)
    return rows
