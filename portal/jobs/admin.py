from django.contrib import admin
from django.http import HttpRequest

from portal.jobs.models import Allocation, Job, JobArray, JobEvent, JobTask


class JobEventInline(admin.TabularInline):
    model = JobEvent
    extra = 0
    can_delete = False
    readonly_fields = ["at", "kind", "from_state", "to_state", "actor", "reason"]


@admin.register(Job)
class JobAdmin(admin.ModelAdmin):
    """Read-mostly: state changes go through services (the portal's cancel button, the API), never raw edits."""

    list_display = ["id", "name", "tenant", "user", "state", "gpus", "array", "array_index", "submitted_at"]
    list_select_related = ["tenant", "user", "array"]
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


@admin.register(JobArray)
class JobArrayAdmin(admin.ModelAdmin):
    """Read-only: an array is created by ``job_array_submit`` and changes through its tasks (cancel them on its page
    or with the API); its tasks are listed under Jobs (filter by array)."""

    list_display = ["id", "name", "tenant", "user", "spec", "task_count", "limit", "submitted_at"]
    list_filter = ["tenant"]
    search_fields = ["name", "user__username", "command", "spec"]
    readonly_fields = [f.name for f in JobArray._meta.fields]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False
