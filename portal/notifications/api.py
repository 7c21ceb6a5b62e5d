"""``/api/v1/account/notifications/``: your notification settings (``GET``, ``PUT``, ``PATCH``) with your latest
notifications, and ``POST …/test/`` to send yourself a test. Always the caller's own: there is no user in the
address, so nobody reads or changes anyone else's. The views only validate and call ``portal.notifications``'s
services and selectors, as the profile page does."""

from __future__ import annotations

from typing import Any, cast

from django.contrib.auth.models import User
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import permissions, status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from portal.api.serializers import ErrorSerializer
from portal.notifications.models import NotificationSettings
from portal.notifications.selectors import notification_settings_for, notifications_recent
from portal.notifications.serializers import NotificationSerializer, NotificationSettingsSerializer
from portal.notifications.services import notification_settings_save, notification_test

#: The settings' writable fields: what ``notification_settings_save`` takes.
WRITABLE = (
    "email_enabled",
    "webhook_url",
    "on_succeeded",
    "on_failed",
    "on_cancelled",
    "on_requeued",
    "on_long_wait",
    "long_wait_minutes",
)


def _values(prefs: NotificationSettings) -> dict[str, Any]:
    return {name: getattr(prefs, name) for name in WRITABLE}


def _answer(user: User) -> Response:
    prefs = notification_settings_for(user=user)
    data = {**_values(prefs), "email": user.email, "recent": notifications_recent(user=user)}
    return Response(NotificationSettingsSerializer(data).data)


class NotificationSettingsView(APIView):
    permission_classes = [permissions.IsAuthenticated]

    @extend_schema(
        operation_id="account_notifications_retrieve",
        summary="Your notification settings and latest notifications",
        responses={200: NotificationSettingsSerializer},
    )
    def get(self, request: Request) -> Response:
        """Your settings (the defaults, which send nothing, until you save some) and your latest 20 notifications
        with their state and last error."""
        return _answer(cast(User, request.user))

    @extend_schema(
        operation_id="account_notifications_update",
        summary="Replace your notification settings",
        request=NotificationSettingsSerializer,
        responses={200: NotificationSettingsSerializer},
    )
    def put(self, request: Request) -> Response:
        """Replace your settings; a field left out takes its default. 400 names a bad `webhook_url` (not an
        http(s) address) or `long_wait_minutes` (1 to 43200)."""
        return self._save(request, partial=False)

    @extend_schema(
        operation_id="account_notifications_partial_update",
        summary="Change some of your notification settings",
        request=NotificationSettingsSerializer,
        responses={200: NotificationSettingsSerializer},
    )
    def patch(self, request: Request) -> Response:
        """Change the fields given; the others keep their values."""
        return self._save(request, partial=True)

    def _save(self, request: Request, *, partial: bool) -> Response:
        user = cast(User, request.user)
        given = NotificationSettingsSerializer(data=request.data, partial=partial)
        given.is_valid(raise_exception=True)
        base = notification_settings_for(user=user) if partial else NotificationSettings(user=user)
        notification_settings_save(user=user, **{**_values(base), **given.validated_data})
        return _answer(user)


class NotificationTestView(APIView):
    permission_classes = [permissions.IsAuthenticated]

    @extend_schema(
        operation_id="account_notifications_test",
        summary="Send yourself a test notification",
        request=None,
        responses={
            202: NotificationSerializer(many=True),
            409: OpenApiResponse(
                ErrorSerializer,
                description="No channel to send on: email is off or your account has no address, and no webhook "
                "is set (`code`: `conflict`).",
            ),
        },
    )
    def post(self, request: Request) -> Response:
        """Queue a test notification on each channel of your saved settings; 202 with them (`state`: `queued`).
        Read `GET /api/v1/account/notifications/` a moment later to see whether they were sent."""
        rows = notification_test(user=cast(User, request.user))
        return Response(NotificationSerializer(rows, many=True).data, status=status.HTTP_202_ACCEPTED)
