"""The profile page for notifications: choose channels and news, send yourself a test, see the latest 20 with their
state. Always the signed-in user's own. The views only validate and call ``portal.notifications``."""

from __future__ import annotations

from typing import TYPE_CHECKING

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_POST

from portal.errors import ServiceError
from portal.notifications.forms import NotificationSettingsForm
from portal.notifications.models import DeliveryState
from portal.notifications.selectors import notification_settings_for, notifications_recent
from portal.notifications.services import notification_settings_save, notification_test
from portal.web.htmx import is_htmx

if TYPE_CHECKING:
    from portal.web.auth import AuthenticatedHttpRequest


@login_required
def notification_settings_view(request: AuthenticatedHttpRequest) -> HttpResponse:
    """The settings form and the latest notifications; htmx polls for the list alone while one is still queued."""
    recent = list(notifications_recent(user=request.user))
    context: dict[str, object] = {
        "recent": recent,
        "any_queued": any(row.state == DeliveryState.QUEUED for row in recent),
    }
    if is_htmx(request) and request.method == "GET":
        return render(request, "notifications/partials/_recent.html", context)
    prefs = notification_settings_for(user=request.user)
    form = NotificationSettingsForm(
        request.POST if request.method == "POST" else None, initial=NotificationSettingsForm.initial_from(prefs)
    )
    if request.method == "POST" and form.is_valid():
        try:
            notification_settings_save(user=request.user, **form.cleaned_data)
        except ServiceError as exc:
            form.add_error(exc.field, exc.message)
        else:
            messages.success(request, "Notification settings saved.")
            return redirect("notification-settings")
    context.update({"form": form, "saved": prefs.pk is not None, "email": request.user.email})
    return render(request, "notifications/settings.html", context)


@login_required
@require_POST
def notification_test_view(request: AuthenticatedHttpRequest) -> HttpResponse:
    """Queue a test on each saved channel and come back to the page, which shows how it went."""
    try:
        rows = notification_test(user=request.user)
    except ServiceError as exc:
        messages.error(request, exc.message)
    else:
        where = " and ".join(row.target_display for row in rows)
        messages.success(request, f"Test notification queued for {where}; it shows below once sent.")
    return redirect("notification-settings")
