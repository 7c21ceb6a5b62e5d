"""The API's shapes for notification settings and notifications. Checks come from ``portal.notifications.rules``,
so a bad webhook address or threshold gets the same words as on the profile page, under the field's name."""

from __future__ import annotations

from typing import Any

from rest_framework import serializers

from portal.notifications.models import Notification
from portal.notifications.rules import (
    DEFAULT_LONG_WAIT_MINUTES,
    LONG_WAIT_MAX_MINUTES,
    LONG_WAIT_MIN_MINUTES,
    LONG_WAIT_RULE,
    WEBHOOK_URL_MAX_LENGTH,
    validate_webhook_url,
)


class NotificationSerializer(serializers.ModelSerializer[Notification]):
    """One notification sent, being sent or given up."""

    target = serializers.CharField(
        source="target_display", read_only=True, help_text="The email address, or the webhook's host."
    )

    class Meta:
        model = Notification
        fields = [
            "id",
            "created_at",
            "topic",
            "channel",
            "target",
            "job",
            "text",
            "state",
            "attempts",
            "last_error",
            "sent_at",
        ]
        read_only_fields = fields
        extra_kwargs = {
            "topic": {"help_text": "succeeded, failed, cancelled, requeued (preempted too), long_wait or test."},
            "job": {"help_text": "The job's id; null for a test."},
            "state": {"help_text": "queued (waiting for a worker or its next try), sent, or failed (given up)."},
            "attempts": {"help_text": "Tries so far."},
            "last_error": {"help_text": "Why the last failed try failed; empty if none did."},
        }


class NotificationSettingsSerializer(serializers.Serializer[dict[str, Any]]):
    """The settings. ``PUT`` replaces them (a field left out takes its default), ``PATCH`` changes the fields given.
    ``email`` (the account's address, where mail goes) and ``recent`` are only answered."""

    email_enabled = serializers.BooleanField(required=False, help_text="Mail the account's email address.")
    email = serializers.CharField(
        read_only=True, help_text="The account's email address; empty: none, so no mail is sent even if enabled."
    )
    webhook_url = serializers.CharField(
        required=False,
        allow_blank=True,
        max_length=WEBHOOK_URL_MAX_LENGTH,
        validators=[validate_webhook_url],
        help_text="An http(s) incoming webhook (Slack, Mattermost, or any JSON receiver); empty: none.",
    )
    on_succeeded = serializers.BooleanField(required=False)
    on_failed = serializers.BooleanField(required=False)
    on_cancelled = serializers.BooleanField(required=False)
    on_requeued = serializers.BooleanField(required=False, help_text="Preempted, or requeued after a failure.")
    on_long_wait = serializers.BooleanField(required=False)
    long_wait_minutes = serializers.IntegerField(
        required=False,
        min_value=LONG_WAIT_MIN_MINUTES,
        max_value=LONG_WAIT_MAX_MINUTES,
        error_messages={"invalid": LONG_WAIT_RULE, "min_value": LONG_WAIT_RULE, "max_value": LONG_WAIT_RULE},
        help_text=f"Minutes a job waits in the queue before you are told (once per queueing); default "
        f"{DEFAULT_LONG_WAIT_MINUTES}.",
    )
    recent = NotificationSerializer(many=True, read_only=True, help_text="Your latest 20 notifications, newest first.")
