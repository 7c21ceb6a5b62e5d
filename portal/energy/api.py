"""``POST /api/v1/nodes/{name}/power/`` (staff): power a node down or wake it by hand, through the site's commands
and the planner's rules. Parses, calls one service, renders. A refusal (energy saving off, a node with work, the
floor) is 409 with the reason; a command that failed is 502 with what it said, and the node stays as it was."""

from __future__ import annotations

from django.shortcuts import get_object_or_404
from django.utils import timezone
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import permissions
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from portal.api.serializers import ErrorSerializer
from portal.energy.serializers import PowerReplySerializer, PowerRequestSerializer
from portal.energy.services import node_power_set
from portal.nodes.models import Node


class NodePowerView(APIView):
    permission_classes = [permissions.IsAdminUser]

    @extend_schema(
        request=PowerRequestSerializer,
        responses={
            200: PowerReplySerializer,
            409: OpenApiResponse(
                ErrorSerializer,
                description="Refused: energy saving is off, the node has work, is not up, is a serving pool's, is "
                "not powered down (to wake it), or powering it down would go below CORRAL_POWER_MIN_NODES_ON.",
            ),
            502: OpenApiResponse(
                PowerReplySerializer, description="The power command failed; the node stays as it was."
            ),
        },
    )
    def post(self, request: Request, name: str) -> Response:
        node = get_object_or_404(Node, name=name)
        serializer = PowerRequestSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        on = serializer.validated_data["action"] == "on"
        outcome = node_power_set(node=node, on=on, by=f"admin:{request.user.get_username()}", now=timezone.now())
        node.refresh_from_db(fields=["power"])
        body = {"node": node.name, "action": outcome.action, "ok": outcome.ok, "detail": outcome.detail}
        return Response({**body, "power": node.power}, status=200 if outcome.ok else 502)
