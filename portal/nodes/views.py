"""The node pages: ``/nodes/`` (every node, its state and which job holds each GPU) and ``/nodes/<name>/`` (each
GPU's telemetry, health and predicted risk). They parse input, call a selector and render; htmx polls get only the
table or GPU panel partial."""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_POST

from portal.jobs.selectors import cordon_rule
from portal.jobs.share_selectors import node_shared_gpus
from portal.nodes.models import Node
from portal.nodes.selectors import fenced_gpu_counts, node_list
from portal.nodes.services import node_release_fenced
from portal.telemetry.selectors import node_page
from portal.web.auth import AuthenticatedHttpRequest
from portal.web.htmx import is_htmx


@login_required
def node_list_view(request: HttpRequest) -> HttpResponse:
    nodes = node_list()
    context = {
        "rows": nodes.rows,
        "gpu_total": nodes.gpu_total,
        "gpu_busy": nodes.gpu_busy,
        "gpu_shared_busy": nodes.gpu_shared_busy,
        "cordon_rule": cordon_rule(),
    }
    if is_htmx(request):
        return render(request, "nodes/partials/_node_table.html", context)
    return render(request, "nodes/node_list.html", context)


@login_required
def node_detail_view(request: HttpRequest, name: str) -> HttpResponse:
    page = node_page(name=name)
    if page is None:
        raise Http404("No such node.")
    context = {
        "page": page,
        "node": page.node,
        "cordon_rule": cordon_rule(),
        "fenced": fenced_gpu_counts(node=page.node)[page.node.pk],
        "shared_gpus": node_shared_gpus(node_id=page.node.pk),  # issue #17: each shared GPU's shares
    }
    if is_htmx(request):
        return render(request, "nodes/partials/_gpu_panel.html", context)
    return render(request, "nodes/node_detail.html", context)


@login_required
@require_POST
def node_release_fenced_view(request: AuthenticatedHttpRequest, name: str) -> HttpResponse:
    """An admin's word that the processes of a node's lost tasks are gone (the machine was powered off or
    reinstalled): free the GPUs they held. Staff only; everyone else gets a 403."""
    if not request.user.is_staff:
        raise PermissionDenied("Only an administrator can release a node's fenced GPUs.")
    node = get_object_or_404(Node, name=name)
    freed = node_release_fenced(node=node, by=request.user.get_username())
    messages.info(request, f"Released {freed} fenced GPU{'s' if freed != 1 else ''} of {node.name}.")
    return redirect("node-detail", name=node.name)
