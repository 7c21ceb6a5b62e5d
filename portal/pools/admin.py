from django.contrib import admin
from django.http import HttpRequest

from portal.pools.models import Reclaim


@admin.register(Reclaim)
class ReclaimAdmin(admin.ModelAdmin):
    """Read-only: a reclaim is a record of what the serving side asked and what Corral did."""

    list_display = ["pk", "pool", "count", "deadline_seconds", "requested_at", "finished_at", "late"]
    list_filter = ["pool", "late"]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Reclaim | None = None) -> bool:
        return False
