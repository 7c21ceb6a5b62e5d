"""The profile page's form: channels, which news, and the long-wait threshold in minutes. It checks shapes and the
rules of ``portal.notifications.rules``, in words next to the input; its cleaned data is
``notification_settings_save``'s keyword arguments, as they are."""

from __future__ import annotations

from django import forms

from portal.notifications.models import NotificationSettings
from portal.notifications.rules import (
    LONG_WAIT_MAX_MINUTES,
    LONG_WAIT_MIN_MINUTES,
    LONG_WAIT_RULE,
    WEBHOOK_URL_MAX_LENGTH,
    validate_webhook_url,
)

#: The news a user can ask for: the settings' boolean fields, with the words the page shows.
EVENT_FIELDS = {
    "on_succeeded": "It succeeded",
    "on_failed": "It failed",
    "on_cancelled": "It was cancelled",
    "on_requeued": "It was preempted or requeued (a node or GPU failed)",
    "on_long_wait": "It waits long to start",
}


class NotificationSettingsForm(forms.Form):
    email_enabled = forms.BooleanField(required=False, label="Email me")
    webhook_url = forms.CharField(
        required=False,
        max_length=WEBHOOK_URL_MAX_LENGTH,
        validators=[validate_webhook_url],
        label="Webhook URL",
        help_text="A Slack or Mattermost incoming webhook, or anything that takes a JSON POST; leave empty for none.",
        widget=forms.URLInput(attrs={"placeholder": "https://hooks.slack.com/services/…", "autocomplete": "off"}),
    )
    on_succeeded = forms.BooleanField(required=False, label=EVENT_FIELDS["on_succeeded"])
    on_failed = forms.BooleanField(required=False, label=EVENT_FIELDS["on_failed"])
    on_cancelled = forms.BooleanField(required=False, label=EVENT_FIELDS["on_cancelled"])
    on_requeued = forms.BooleanField(required=False, label=EVENT_FIELDS["on_requeued"])
    on_long_wait = forms.BooleanField(required=False, label=EVENT_FIELDS["on_long_wait"])
    long_wait_minutes = forms.IntegerField(
        label="Long wait: minutes in the queue",
        min_value=LONG_WAIT_MIN_MINUTES,
        max_value=LONG_WAIT_MAX_MINUTES,
        error_messages={
            "invalid": LONG_WAIT_RULE,
            "min_value": LONG_WAIT_RULE,
            "max_value": LONG_WAIT_RULE,
            "required": LONG_WAIT_RULE,
        },
        help_text="Told once each time the job enters the queue, when it has waited this long.",
    )

    @classmethod
    def initial_from(cls, prefs: NotificationSettings) -> dict[str, object]:
        """The form's starting values: the saved settings, or the defaults."""
        initial: dict[str, object] = {name: getattr(prefs, name) for name in ("email_enabled", "webhook_url")}
        initial.update({name: getattr(prefs, name) for name in EVENT_FIELDS})
        initial["long_wait_minutes"] = prefs.long_wait_minutes
        return initial

    @property
    def event_fields(self) -> list[forms.BoundField]:
        return [self[name] for name in EVENT_FIELDS]
