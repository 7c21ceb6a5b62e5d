from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest

from portal.nodes.models import Gpu, Node
from portal.nodes.services import node_set_draining
from portal.nodes.sharing import gpus_set_shared


class GpuInline(admin.TabularInline):
    model = Gpu
    extra = 0
    fields = ["index", "uuid", "model", "memory_mb", "health", "health_detail", "present", "shared", "max_clients"]
    readonly_fields = ["index", "uuid", "model", "memory_mb", "present"]


@admin.register(Node)
class NodeAdmin(admin.ModelAdmin):
    list_display = ["name", "state", "state_reason", "last_heartbeat", "hostname", "rack", "pool", "lent", "returning"]
    list_filter = ["state", "rack", "pool", "lent"]
    search_fields = ["name", "hostname"]
    # Lent and returning change only through the pools API (lend, reclaim): a reclaim must see every loan.
    readonly_fields = ["last_heartbeat", "registered_at", "agent_version", "state", "lent", "returning"]
    inlines = [GpuInline]
    actions = ["drain", "undrain", "share_gpus", "unshare_gpus"]

    def get_readonly_fields(self, request: HttpRequest, obj: Node | None = None) -> list[str]:
        """The pool is the admin's to set (issue #19), except on a lent node: its pool must reclaim it first."""
        fields = list(self.readonly_fields)
        return [*fields, "pool"] if obj is not None and obj.lent else fields

    @admin.action(description="Drain (no new jobs; running jobs finish)")
    def drain(self, request: HttpRequest, queryset: QuerySet[Node]) -> None:
        for node in queryset:
            node_set_draining(node=node, draining=True, reason=f"drained by {request.user.get_username()}")
        messages.info(request, f"Drained {queryset.count()} node(s).")

    @admin.action(description="Undrain (accept new jobs)")
    def undrain(self, request: HttpRequest, queryset: QuerySet[Node]) -> None:
        for node in queryset:
            node_set_draining(node=node, draining=False)
        messages.info(request, f"Undrained {queryset.count()} node(s).")

    @admin.action(description="Share their GPUs (shares of a GPU under MPS only)")
    def share_gpus(self, request: HttpRequest, queryset: QuerySet[Node]) -> None:
        ids = list(Gpu.objects.filter(node__in=queryset).values_list("pk", flat=True))
        changed = gpus_set_shared(gpu_ids=ids, shared=True, by=request.user.get_username())
        messages.info(request, f"{changed} GPU(s) now take shares only.")

    @admin.action(description="Stop sharing their GPUs (whole-GPU jobs only)")
    def unshare_gpus(self, request: HttpRequest, queryset: QuerySet[Node]) -> None:
        ids = list(Gpu.objects.filter(node__in=queryset).values_list("pk", flat=True))
        changed = gpus_set_shared(gpu_ids=ids, shared=False, by=request.user.get_username())
        messages.info(request, f"{changed} GPU(s) now take whole-GPU jobs only.")


@admin.register(Gpu)
class GpuAdmin(admin.ModelAdmin):
    list_display = ["__str__", "uuid", "model", "health", "present", "shared", "max_clients"]
    list_filter = ["health", "present", "shared", "node"]
    search_fields = ["uuid", "node__name"]
    actions = ["share", "unshare"]

    @admin.action(description="Share (shares of a GPU under MPS only)")
    def share(self, request: HttpRequest, queryset: QuerySet[Gpu]) -> None:
        ids = list(queryset.values_list("pk", flat=True))
        changed = gpus_set_shared(gpu_ids=ids, shared=True, by=request.user.get_username())
        messages.info(request, f"{changed} GPU(s) now take shares only.")

    @admin.action(description="Stop sharing (whole-GPU jobs only)")
    def unshare(self, request: HttpRequest, queryset: QuerySet[Gpu]) -> None:
        ids = list(queryset.values_list("pk", flat=True))
        changed = gpus_set_shared(gpu_ids=ids, shared=False, by=request.user.get_username())
        messages.info(request, f"{changed} GPU(s) now take whole-GPU jobs only.")
