"""``POST /api/v1/agent/samples/``: GPU telemetry batches from node agents (docs/agent-protocol.md)."""

from __future__ import annotations

from rest_framework.request import Request
from rest_framework.response import Response

from portal.api.agent_views import AgentView


class SamplesView(AgentView):
    def post(self, request: Request) -> Response:
        samples = request.data.get("samples", []) if isinstance(request.data, dict) else []
        return Response({"accepted": len(samples) if isinstance(samples, list) else 0})
