"""``GET /api/v1/nodes/``: nodes with their GPUs and which job holds each. Parses, calls a selector, renders."""

from __future__ import annotations

from typing import Any

from django.db.models import Prefetch
from rest_framework import viewsets

from portal.nodes.models import Gpu, Node
from portal.nodes.selectors import gpu_holders
from portal.nodes.serializers import NodeSerializer


class NodeViewSet(viewsets.ReadOnlyModelViewSet[Node]):
    """Nodes and their GPUs, with which job holds each GPU. Visible to every signed-in user."""

    serializer_class = NodeSerializer
    lookup_field = "name"
    queryset = Node.objects.prefetch_related(Prefetch("gpus", queryset=Gpu.objects.order_by("index")))

    def get_serializer_context(self) -> dict[str, Any]:
        context = dict(super().get_serializer_context())
        context["busy"] = gpu_holders()
        return context
