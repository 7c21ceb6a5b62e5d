"""The node pages: ``/nodes/`` (every node, its state and which job holds each GPU) and ``/nodes/<name>/`` (each
GPU's telemetry, health and predicted risk). They parse input, call a selector and render; htmx polls get only the
table or GPU panel partial."""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import render

from portal.jobs.selectors import cordon_rule
from portal.nodes.selectors import node_list
from portal.telemetry.selectors import node_page
from portal.web.htmx import is_htmx


@login_required
def node_list_view(request: HttpRequest) -> HttpResponse:
    nodes = node_list()
    context = {
        "rows": nodes.rows,
        "gpu_total": nodes.gpu_total,
        "gpu_busy": nodes.gpu_busy,
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
    context = {"page": page, "node": page.node, "cordon_rule": cordon_rule()}
    if is_htmx(request):
        return render(request, "nodes/partials/_gpu_panel.html", context)
    return render(request, "nodes/node_detail.html", context)
