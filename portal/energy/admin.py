"""The power action log in the admin, read-only: it is the record node-hours saved are computed from."""

from __future__ import annotations

from django.contrib import admin
from django.http import HttpRequest

from portal.energy.models import PowerAction


@admin.register(PowerAction)
class PowerActionAdmin(admin.ModelAdmin):
    list_display = ("at", "node", "action", "ok", "by", "detail")
    list_filter = ("action", "ok", "by")
    search_fields = ("node__name", "detail")
    date_hierarchy = "at"

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: PowerAction | None = None) -> bool:
        return False
