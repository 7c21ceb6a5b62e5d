from django.contrib import admin
from django.http import HttpRequest

from portal.jobs.models import Allocation, Job, JobEvent, JobTask


class JobEventInline(admin.TabularInline):
    model = JobEvent
    extra = 0
    can_delete = False
    readonly_fields = ["at", "kind", "from_state", "to_state", "actor", "reason"]


@admin.register(Job)
class JobAdmin(admin.ModelAdmin):
    """Read-mostly: state changes go through services (the portal's cancel button, the API), never raw edits."""

    list_display = ["id", "name", "tenant", "user", "state", "gpus", "submitted_at"]
    list_filter = ["state", "tenant"]
    search_fields = ["name", "user__username", "command"]
    readonly_fields = [f.name for f in Job._meta.fields]
    inlines = [JobEventInline]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False


@admin.register(Allocation)
class AllocationAdmin(admin.ModelAdmin):
    list_display = ["job", "attempt", "node", "gpu", "rank", "created_at", "released_at"]
    list_filter = ["node"]
    readonly_fields = [f.name for f in Allocation._meta.fields]


@admin.register(JobTask)
class JobTaskAdmin(admin.ModelAdmin):
    list_display = ["job", "attempt", "rank", "node", "state", "exit_code", "pid"]
    list_filter = ["state", "node"]
    readonly_fields = [f.name for f in JobTask._meta.fields]
