"""The notification tasks. Thin: each takes ids, calls one service, and is safe to run twice. The sweep's cadence
is in ``portal/celery.py``; a delivery is queued by the sweep (or the test button) after its row commits."""

from __future__ import annotations

from dataclasses import asdict

from celery import shared_task
from django.db import OperationalError

from portal.notifications.channels import DeliveryError
from portal.notifications.services import DELIVERY_ATTEMPTS, notification_deliver, notifications_sweep
from portal.queue import DELIVER_NOTIFICATION, RETRY_ON_DB_ERROR, SWEEP_NOTIFICATIONS


@shared_task(name=SWEEP_NOTIFICATIONS, **RETRY_ON_DB_ERROR)
def sweep_notifications() -> dict[str, object]:
    """Write the outbox rows for the job news since the last sweep and queue their delivery (beat, every few s)."""
    return asdict(notifications_sweep())


# A failed try is retried 30 s, 1, 2, 4 and 8 minutes later (no jitter: the row's page can say when), then given
# up: the service marks the row failed on the last try. A database blip is retried the same way.
@shared_task(
    name=DELIVER_NOTIFICATION,
    autoretry_for=(DeliveryError, OperationalError),
    retry_backoff=30,
    retry_backoff_max=480,
    retry_jitter=False,
    max_retries=DELIVERY_ATTEMPTS - 1,
    ignore_result=True,
)
def deliver_notification(notification_id: int) -> bool:
    """Send outbox row ``notification_id`` by mail or webhook (see ``notification_deliver``)."""
    return notification_deliver(notification_id=notification_id)
