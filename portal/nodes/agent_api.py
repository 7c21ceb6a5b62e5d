"""The node agents' side of the API, all of it (docs/agent-protocol.md): register, heartbeat and telemetry
batches. Authenticated by node token only."""

from __future__ import annotations

from typing import cast

from django.conf import settings
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from portal.api.parsers import JSONParser
from portal.api.serializers import ErrorSerializer, ValidationErrorSerializer
from portal.nodes.auth import IsNodeAgent, NodeTokenAuthentication
from portal.nodes.models import Node
from portal.nodes.serializers import (
    HeartbeatReplySerializer,
    HeartbeatSerializer,
    RegisterReplySerializer,
    RegisterSerializer,
)
from portal.nodes.services import (
    GpuReport,
    NodeFenced,
    TaskReport,
    node_heartbeat,
    node_lease_seconds,
    node_register,
)
from portal.telemetry.batch import parse_batch
from portal.telemetry.serializers import IngestResultSerializer, TelemetryBatchSerializer
from portal.telemetry.services.ingest import telemetry_ingest


class AgentView(APIView):
    # request.auth is the calling Node (NodeTokenAuthentication); DRF's stubs know only Token, hence the casts.
    authentication_classes = [NodeTokenAuthentication]
    permission_classes = [IsNodeAgent]
    # Agents speak JSON. A form-encoded body cannot carry the nested task list: DRF would read it as "no tasks" and
    # the heartbeat would requeue every job the node runs. Anything but JSON is a 415.
    parser_classes = [JSONParser]


@extend_schema(tags=["agent"])
class RegisterView(AgentView):
    @extend_schema(
        request=RegisterSerializer,
        responses={
            200: RegisterReplySerializer,
            409: OpenApiResponse(
                ValidationErrorSerializer,
                description=(
                    'A GPU it reports is present on another node that is up or draining: `{"gpus": ["GPU … is '
                    'registered on node …"], "code": "conflict"}`. Nothing changes.'
                ),
            ),
        },
    )
    def post(self, request: Request) -> Response:
        body = RegisterSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        data = body.validated_data
        node = node_register(
            node=cast(Node, request.auth),
            hostname=data["hostname"],
            address=data["address"] or request.META.get("REMOTE_ADDR", ""),
            agent_version=data["agent_version"],
            gpus=[GpuReport(**g) for g in data["gpus"]],
            clean=data["clean"],
        )
        return Response(
            {
                "node": node.name,
                "heartbeat_interval": settings.CORRAL_HEARTBEAT_INTERVAL,
                "sample_interval": settings.CORRAL_SAMPLE_INTERVAL,
                "lease_seconds": node_lease_seconds(),
            }
        )


@extend_schema(tags=["agent"])
class HeartbeatView(AgentView):
    @extend_schema(
        request=HeartbeatSerializer,
        responses={
            200: HeartbeatReplySerializer,
            409: OpenApiResponse(
                ErrorSerializer,
                description=(
                    '`{"detail": "register again"}`: the node has never registered, or the portal has marked it down '
                    "(its tasks were requeued, its GPUs fenced). Kill every task at once, register, then heartbeat."
                ),
            ),
        },
    )
    def post(self, request: Request) -> Response:
        body = HeartbeatSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        node = cast(Node, request.auth)
        if node.registered_at is None:
            return Response({"detail": "register again"}, status=409)
        try:
            reply = node_heartbeat(node=node, reports=[TaskReport(**t) for t in body.validated_data["tasks"]])
        except NodeFenced:
            return Response({"detail": "register again"}, status=409)
        return Response(
            {
                "start": reply.start,
                "kill": reply.kill,
                "forget": reply.forget,
                "signal": reply.signal,
                "log_offsets": reply.log_offsets,
                "heartbeat_interval": settings.CORRAL_HEARTBEAT_INTERVAL,
            }
        )


class SamplesView(AgentView):
    """Take one batch from the authenticated node's agent; answers what became of each sample."""

    @extend_schema(tags=["agent"], request=TelemetryBatchSerializer, responses={200: IngestResultSerializer})
    def post(self, request: Request) -> Response:
        batch = parse_batch(request.data)
        result = telemetry_ingest(
            node=cast(Node, request.auth), samples=batch.samples, xid_events=batch.xid_events, dropped=batch.dropped
        )
        return Response(result.as_dict())
