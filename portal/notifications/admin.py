"""Admin for notifications: users' settings, and the outbox to see what was sent and why a try failed. Outbox rows
are written by the sweep, never by hand; an admin may only look, or delete old ones."""

from __future__ import annotations

from django.contrib import admin
from django.http import HttpRequest

from portal.notifications.models import Notification, NotificationSettings


@admin.register(NotificationSettings)
class NotificationSettingsAdmin(admin.ModelAdmin):
    list_display = ["user", "email_enabled", "webhook_url", "on_succeeded", "on_failed", "on_long_wait", "long_wait"]
    list_filter = ["email_enabled", "on_succeeded", "on_failed", "on_cancelled", "on_requeued", "on_long_wait"]
    search_fields = ["user__username", "user__email"]
    list_select_related = ["user"]
    raw_id_fields = ["user"]


@admin.register(Notification)
class NotificationAdmin(admin.ModelAdmin):
    list_display = ["created_at", "user", "topic", "channel", "target_display", "state", "attempts", "last_error"]
    list_filter = ["state", "channel", "topic"]
    search_fields = ["user__username", "subject"]
    list_select_related = ["user"]
    date_hierarchy = "created_at"
    readonly_fields = [field.name for field in Notification._meta.get_fields() if field.concrete]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return False
