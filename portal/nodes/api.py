"""``GET /api/v1/nodes/``: nodes with their GPUs and which job holds each; ``POST .../release-fenced/`` (admins):
free the GPUs a node's lost tasks still hold. Parses, calls a selector or service, renders."""

from __future__ import annotations

from typing import Any

from django.db.models import Prefetch
from drf_spectacular.utils import extend_schema
from rest_framework import permissions, viewsets
from rest_framework.decorators import action
from rest_framework.request import Request
from rest_framework.response import Response

from portal.nodes.models import Gpu, Node
from portal.nodes.selectors import fenced_gpu_counts, gpu_holders, share_client_counts, stopping_gpu_ids
from portal.nodes.serializers import NodeSerializer, ReleaseFencedReplySerializer
from portal.nodes.services import node_release_fenced


class NodeViewSet(viewsets.ReadOnlyModelViewSet[Node]):
    """Nodes and their GPUs, with which job holds each GPU. Visible to every signed-in user."""

    serializer_class = NodeSerializer
    lookup_field = "name"
    queryset = Node.objects.prefetch_related(Prefetch("gpus", queryset=Gpu.objects.order_by("index")))

    def get_serializer_context(self) -> dict[str, Any]:
        context = dict(super().get_serializer_context())
        context["busy"] = gpu_holders()
        context["stopping"] = stopping_gpu_ids()
        context["fenced"] = fenced_gpu_counts()
        context["clients"] = share_client_counts()
        return context

    @extend_schema(request=None, responses={200: ReleaseFencedReplySerializer})
    @action(detail=True, methods=["post"], url_path="release-fenced", permission_classes=[permissions.IsAdminUser])
    def release_fenced(self, request: Request, name: str | None = None) -> Response:
        """Declare that no process of this node's lost tasks lives any more (the machine is off or reinstalled) and
        free the GPUs they hold. Only for admins: a wrong word lets two jobs share a GPU."""
        node = self.get_object()
        freed = node_release_fenced(node=node, by=request.user.get_username())
        return Response({"node": node.name, "released": freed})
