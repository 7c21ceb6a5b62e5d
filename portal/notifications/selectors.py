"""Reads for notifications: a user's settings and recent notifications, and what the sweep has to tell (job events
after the cursor, jobs waiting past their owner's threshold). Each is one query, whatever it returns."""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING

from django.db.models import DateTimeField, Exists, ExpressionWrapper, F, OuterRef, Q, QuerySet

from portal.jobs.models import Job, JobEvent
from portal.notifications.models import (
    EVENT_TOPICS,
    DeliveryState,
    Notification,
    NotificationSettings,
    Topic,
)
from scheduling.core.states import JobState

if TYPE_CHECKING:
    from django.contrib.auth.models import User

#: The profile page and the API list this many of a user's latest notifications.
RECENT = 20


def notification_settings_for(*, user: User) -> NotificationSettings:
    """``user``'s saved settings, or the defaults unsaved (a user without a row hears nothing: no channel is on)."""
    found = NotificationSettings.objects.filter(user=user).first()
    return found if found is not None else NotificationSettings(user=user)


def notifications_recent(*, user: User, limit: int = RECENT) -> QuerySet[Notification]:
    """``user``'s latest notifications, newest first, with their jobs (one query)."""
    return Notification.objects.filter(user=user).select_related("job").order_by("-created_at", "-id")[:limit]


def _settings(user: str) -> str:
    """The lookup path from a query's rows to the settings of the user at ``user`` (``"user"``, ``"job__user"``)."""
    return f"{user}__notification_settings"


def _reachable(user: str) -> Q:
    """Rows whose user (at ``user``) has a channel to send on: a webhook, or email on and an address to mail."""
    settings = _settings(user)
    return ~Q(**{f"{settings}__webhook_url": ""}) | (
        Q(**{f"{settings}__email_enabled": True}) & ~Q(**{f"{user}__email": ""})
    )


def job_events_to_tell(*, after_id: int, limit: int) -> list[JobEvent]:
    """The job events after ``after_id`` (in id order, at most ``limit``) that the job's own owner asked to hear
    of and has a channel for, and that no notification was written about yet, with the job, its owner and the
    owner's settings (one query). Events read before are skipped in the query, so reading the same range again
    (the sweep does, see ``EventCursor``) costs an index probe per event, and a batch holds only news.

    Only the owner's settings are joined (``job.user``), so nobody hears of anyone else's job. Tasks of job arrays
    are left out: an array of thousands would send thousands of messages.
    """
    settings = _settings("job__user")
    wanted = Q()
    for kind, topic in EVENT_TOPICS.items():
        wanted |= Q(kind=kind, **{f"{settings}__on_{topic}": True})
    told = Notification.objects.filter(event=OuterRef("pk"))
    return list(
        JobEvent.objects.filter(wanted, _reachable("job__user"), id__gt=after_id, job__array__isnull=True)
        .exclude(Exists(told))
        .select_related("job", "job__user", settings)
        .order_by("id")[:limit]
    )


def jobs_waiting_too_long(*, now: datetime, limit: int) -> list[Job]:
    """Pending jobs that have waited since they last entered the queue longer than their owner's threshold, whose
    owner asked to hear of long waits and has a channel, and who has not been told of this queueing yet (one
    query, at most ``limit``, oldest queueing first)."""
    told = Notification.objects.filter(job=OuterRef("pk"), topic=Topic.LONG_WAIT, queued_at=OuterRef("queued_at"))
    settings = _settings("user")
    due = ExpressionWrapper(F("queued_at") + F(f"{settings}__long_wait"), output_field=DateTimeField())
    return list(
        Job.objects.filter(
            _reachable("user"),
            state=JobState.PENDING.value,
            array__isnull=True,
            queued_at__isnull=False,
            **{f"{settings}__on_long_wait": True},
        )
        .alias(due=due)
        .filter(due__lte=now)
        .exclude(Exists(told))
        .select_related("user", settings)
        .order_by("queued_at", "id")[:limit]
    )


def notifications_lost(*, older_than: datetime, now: datetime, limit: int) -> list[int]:
    """Ids of queued notifications nobody has touched since ``older_than`` and that no worker is sending: their
    message was lost (a broker restart), so the sweep queues them again."""
    rows = Notification.objects.filter(state=DeliveryState.QUEUED, updated_at__lt=older_than).filter(
        Q(sending_until__isnull=True) | Q(sending_until__lt=now)
    )
    return list(rows.order_by("updated_at").values_list("id", flat=True)[:limit])
