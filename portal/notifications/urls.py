from django.urls import path

from portal.notifications import views

urlpatterns = [
    path("account/notifications/", views.notification_settings_view, name="notification-settings"),
    path("account/notifications/test/", views.notification_test_view, name="notification-test"),
]
