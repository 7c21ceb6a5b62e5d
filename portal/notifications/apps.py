from django.apps import AppConfig


class NotificationsConfig(AppConfig):
    name = "portal.notifications"
    label = "notifications"
    verbose_name = "Notifications"
