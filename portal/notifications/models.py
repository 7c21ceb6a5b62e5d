"""Who wants to hear about their jobs, and how (``NotificationSettings``); what has been or is to be sent
(``Notification``, an outbox); and how far the sweep has read the jobs' history (``EventCursor``).

Nothing here is written by the jobs app: a periodic sweep reads ``JobEvent`` rows and waiting jobs after the fact
(``portal.notifications.services``), so no state change ever waits for, or rolls back because of, a notification.
"""

from __future__ import annotations

from datetime import timedelta
from urllib.parse import urlsplit

from django.conf import settings
from django.db import models
from django.db.models import Q

from portal.jobs.models import EventKind
from portal.notifications.rules import (
    DEFAULT_LONG_WAIT_MINUTES,
    LONG_WAIT_MAX_MINUTES,
    LONG_WAIT_MIN_MINUTES,
    WEBHOOK_URL_MAX_LENGTH,
    validate_webhook_url,
)


class Topic(models.TextChoices):
    """What a notification is about."""

    SUCCEEDED = "succeeded", "Succeeded"
    FAILED = "failed", "Failed"
    CANCELLED = "cancelled", "Cancelled"
    REQUEUED = "requeued", "Preempted or requeued"
    LONG_WAIT = "long_wait", "Waiting long"
    TEST = "test", "Test"


#: The job events that are news to a job's owner, and the topic each is told as: a preemption and a requeue (a lost
#: node, a GPU fault: an eviction) are one topic, "your job is back in the queue".
EVENT_TOPICS: dict[str, Topic] = {
    EventKind.SUCCEEDED: Topic.SUCCEEDED,
    EventKind.FAILED: Topic.FAILED,
    EventKind.CANCELLED: Topic.CANCELLED,
    EventKind.PREEMPTED: Topic.REQUEUED,
    EventKind.REQUEUED: Topic.REQUEUED,
}


class Channel(models.TextChoices):
    EMAIL = "email", "Email"
    WEBHOOK = "webhook", "Webhook"


class DeliveryState(models.TextChoices):
    QUEUED = "queued", "Queued"  # not sent yet: waiting for a worker, or for its next try after a failure
    SENT = "sent", "Sent"
    FAILED = "failed", "Failed"  # given up: a refusal that retrying cannot fix, or every try failed


class NotificationSettings(models.Model):
    """One user's wishes: which channels (email to their account's address; a Slack- or Mattermost-compatible
    incoming webhook), and which news of *their own* jobs (finished, failed, cancelled, preempted or requeued,
    waiting longer than ``long_wait``). A user without a row hears nothing; a new row sends nothing until a channel
    is turned on."""

    user = models.OneToOneField(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="notification_settings"
    )
    email_enabled = models.BooleanField(default=False, help_text="Mail the account's email address.")
    webhook_url = models.CharField(
        max_length=WEBHOOK_URL_MAX_LENGTH,
        blank=True,
        validators=[validate_webhook_url],
        help_text="An incoming webhook (Slack, Mattermost or anything that takes JSON); empty: none.",
    )
    on_succeeded = models.BooleanField(default=True)
    on_failed = models.BooleanField(default=True)
    on_cancelled = models.BooleanField(default=True)
    on_requeued = models.BooleanField(default=True, help_text="Preempted, or requeued after a node or GPU failure.")
    on_long_wait = models.BooleanField(default=True)
    long_wait = models.DurationField(
        default=timedelta(minutes=DEFAULT_LONG_WAIT_MINUTES),
        help_text="How long a job may wait in the queue before its owner is told.",
    )
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        verbose_name_plural = "notification settings"
        constraints = [
            models.CheckConstraint(
                condition=Q(
                    long_wait__gte=timedelta(minutes=LONG_WAIT_MIN_MINUTES),
                    long_wait__lte=timedelta(minutes=LONG_WAIT_MAX_MINUTES),
                ),
                name="%(app_label)s_%(class)s_long_wait_in_range",
            ),
        ]

    def __str__(self) -> str:
        return f"notifications of {self.user}"

    @property
    def long_wait_minutes(self) -> int:
        return round(self.long_wait.total_seconds() / 60)

    def wants(self, topic: str) -> bool:
        """Whether this user asked to hear of ``topic`` (a test is always wanted)."""
        return topic == Topic.TEST or bool(getattr(self, f"on_{topic}", False))


class Notification(models.Model):
    """One message to one channel: an outbox row, written by the sweep (or the "send a test" button) and delivered
    by a Celery task once it commits.

    About a job event (``event``), a long wait (``job`` and the ``queued_at`` of the queueing that lasted), or a
    test (neither). The unique constraints make a second row for the same news and channel impossible, so a sweep
    that runs twice, or reads an event again, sends nothing twice. ``target`` is where it goes (an address or a
    URL) and ``text`` what it says, both fixed when it is written. ``queued`` until sent; each failed try adds to
    ``attempts`` and sets ``last_error``; ``failed`` once it is given up. ``sending_until`` marks a try in flight,
    so two workers never send the same row at once.
    """

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="notifications")
    job = models.ForeignKey("jobs.Job", on_delete=models.CASCADE, null=True, blank=True, related_name="+")
    event = models.ForeignKey("jobs.JobEvent", on_delete=models.CASCADE, null=True, blank=True, related_name="+")
    queued_at = models.DateTimeField(null=True, blank=True, help_text="Long waits: when the job entered the queue.")
    topic = models.CharField(max_length=16, choices=Topic.choices)
    channel = models.CharField(max_length=16, choices=Channel.choices)
    target = models.CharField(max_length=WEBHOOK_URL_MAX_LENGTH, help_text="The email address or webhook URL.")
    subject = models.CharField(max_length=255)
    text = models.TextField()
    state = models.CharField(max_length=16, choices=DeliveryState.choices, default=DeliveryState.QUEUED)
    attempts = models.PositiveIntegerField(default=0)
    last_error = models.CharField(max_length=500, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)
    sending_until = models.DateTimeField(null=True, blank=True)
    sent_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [
            # The profile page's "last 20", and the sweep's look for queued rows whose message was lost.
            models.Index(fields=["user", "-created_at", "-id"], name="notif_user_created"),
            models.Index(fields=["updated_at"], name="notif_queued_updated", condition=Q(state="queued")),
        ]
        constraints = [
            models.UniqueConstraint(
                fields=["event", "channel"],
                condition=Q(event__isnull=False),
                name="%(app_label)s_%(class)s_once_per_event",
            ),
            models.UniqueConstraint(
                fields=["job", "queued_at", "channel"],
                condition=Q(topic=Topic.LONG_WAIT),
                name="%(app_label)s_%(class)s_long_wait_once_per_queueing",
            ),
            models.CheckConstraint(condition=Q(topic__in=Topic.values), name="%(app_label)s_%(class)s_topic_valid"),
            models.CheckConstraint(
                condition=Q(channel__in=Channel.values), name="%(app_label)s_%(class)s_channel_valid"
            ),
            models.CheckConstraint(
                condition=Q(state__in=DeliveryState.values), name="%(app_label)s_%(class)s_state_valid"
            ),
            models.CheckConstraint(
                condition=~Q(topic=Topic.LONG_WAIT) | Q(job__isnull=False, queued_at__isnull=False),
                name="%(app_label)s_%(class)s_long_wait_has_queueing",
            ),
            models.CheckConstraint(
                condition=Q(topic__in=[Topic.LONG_WAIT, Topic.TEST]) | Q(event__isnull=False, job__isnull=False),
                name="%(app_label)s_%(class)s_event_topic_has_event",
            ),
            models.CheckConstraint(
                condition=~Q(state=DeliveryState.SENT) | Q(sent_at__isnull=False),
                name="%(app_label)s_%(class)s_sent_has_time",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.channel} to {self.user}: {self.subject}"

    @property
    def target_display(self) -> str:
        """Where it went, for lists: the address, or only the webhook's host (a webhook's path is its secret)."""
        if self.channel == Channel.WEBHOOK:
            return f"webhook at {urlsplit(self.target).hostname or '?'}"
        return self.target


class EventCursor(models.Model):
    """How far the sweep has read the jobs' history: every ``JobEvent`` with an id up to ``event_id`` has been
    considered. One row.

    Ids are handed out when an event is inserted, not when its transaction commits, so a larger id can become
    visible before a smaller one. The sweep therefore reads everything after ``event_id`` each time, and moves
    ``event_id`` only to ``seen_id``, the largest id it saw at ``seen_at``, once ``seen_at`` is longer ago than any
    transaction that writes events lasts (``services.settle``). Reading again costs little: events already told
    are skipped by the read, and the outbox's unique constraints would refuse a second row anyway.
    """

    event_id = models.PositiveBigIntegerField(default=0)
    seen_id = models.PositiveBigIntegerField(null=True, blank=True)
    seen_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [models.CheckConstraint(condition=Q(id=1), name="%(app_label)s_%(class)s_one_row")]

    def __str__(self) -> str:
        return f"notifications read job events up to {self.event_id}"
