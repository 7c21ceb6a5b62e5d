"""``POST /api/v1/agent/logs/``: a task's output as the raw bytes of its log file, megabytes per request. Ref: #15

Heartbeats carried the output before, as JSON text (64 KiB per task and 256 KiB per beat, escaped, under Django's
2.5 MB body limit): about 260 KB/s per node, so a job's last 50 MB reached the portal minutes after it ended. Here
the body is the file's bytes as they are, up to :data:`MAX_LOG_BODY_BYTES`, read from the request stream (never
``request.body``, which Django caps at ``DATA_UPLOAD_MAX_MEMORY_SIZE``). Which task and where in its file the bytes
belong go in the query string. The offset rule is the heartbeat's (``portal.jobs.logs.task_log_receive``): the
bytes are stored only when they start where the portal's copy ends, and the answer is always the bytes held, so
a retry is harmless and an agent that is behind or ahead learns where to send from. Authenticated by node token.
"""

from __future__ import annotations

from typing import Any, cast

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import exceptions, serializers
from rest_framework.parsers import BaseParser
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from portal.api.serializers import BIGINT_MAX, INT_MAX, ErrorSerializer
from portal.errors import ServiceError
from portal.jobs.logs import task_log_post
from portal.nodes.auth import IsNodeAgent, NodeTokenAuthentication
from portal.nodes.models import Node

#: The most bytes of log one request may carry (the agent sends at most this; see docs/agent-protocol.md).
MAX_LOG_BODY_BYTES = 8 * 2**20
#: The body is read from the stream in pieces of this size.
READ_PIECE_BYTES = 2**20
OCTET_STREAM = "application/octet-stream"


class LogChunkParams(serializers.Serializer[dict[str, Any]]):
    """Where the body belongs: one task's log file, from byte ``offset``."""

    job = serializers.IntegerField(min_value=1, max_value=BIGINT_MAX)
    attempt = serializers.IntegerField(min_value=0, max_value=INT_MAX)
    rank = serializers.IntegerField(min_value=0, max_value=INT_MAX, required=False, default=0)
    offset = serializers.IntegerField(
        min_value=0, max_value=BIGINT_MAX, help_text="Byte offset in the task's log file where the body starts."
    )


class LogReceiptSerializer(serializers.Serializer[dict[str, Any]]):
    """The answer, for the schema only."""

    log_offset = serializers.IntegerField(
        help_text=(
            "Bytes of the task's log the portal holds. The body was stored if and only if this is offset + its "
            "length; otherwise nothing changed, and the agent sends from here."
        )
    )


class RawBytesParser(BaseParser):
    """Declares the one body this view takes (anything else is a 415). The view reads the stream itself."""

    media_type = OCTET_STREAM

    def parse(self, stream: Any, media_type: str | None = None, parser_context: Any = None) -> dict[str, Any]:
        return {}  # never called: the body is read by ``_read_body``, within the view's limit


class BodyTooLarge(ServiceError):
    status_code = 413
    code = "too_large"


class LogChunkView(APIView):
    """Take bytes of one task's log from the authenticated node's agent; answer the bytes the portal holds."""

    authentication_classes = [NodeTokenAuthentication]
    permission_classes = [IsNodeAgent]
    parser_classes = [RawBytesParser]
    #: This view's body limit, read by the body-limit middleware before the body is read and checked here again.
    max_body_bytes = MAX_LOG_BODY_BYTES

    @extend_schema(
        tags=["agent"],
        parameters=[LogChunkParams],
        request={OCTET_STREAM: OpenApiTypes.BINARY},
        responses={
            200: LogReceiptSerializer,
            404: OpenApiResponse(ErrorSerializer, description="This node runs no such task (`code`: `not_found`)."),
            409: OpenApiResponse(
                ErrorSerializer,
                description='`{"detail": "register again"}`: the node has never registered. Register, then send.',
            ),
            413: OpenApiResponse(
                ErrorSerializer,
                description=f"The body is larger than {MAX_LOG_BODY_BYTES} bytes (`code`: `too_large`).",
            ),
        },
    )
    def post(self, request: Request) -> Response:
        params = LogChunkParams(data=request.query_params)
        params.is_valid(raise_exception=True)
        if request.content_type.split(";")[0].strip().lower() != OCTET_STREAM:
            raise exceptions.UnsupportedMediaType(request.content_type)
        node = cast(Node, request.auth)
        if node.registered_at is None:
            return Response({"detail": "register again"}, status=409)
        data = _read_body(request, self.max_body_bytes)
        where = params.validated_data
        held = task_log_post(
            node_id=node.pk,
            job_id=where["job"],
            attempt=where["attempt"],
            rank=where["rank"],
            offset=where["offset"],
            data=data,
        )
        return Response({"log_offset": held})


def _read_body(request: Request, limit: int) -> bytes:
    """The body, read from the stream in pieces: at most ``limit`` bytes, and exactly its ``Content-Length``."""
    try:
        length = max(0, int(request.META.get("CONTENT_LENGTH") or 0))
    except ValueError:
        length = 0  # as Django reads it: no body
    if length > limit:
        raise BodyTooLarge(f"request body too large: at most {limit} bytes of log per request")
    stream = request.stream
    parts: list[bytes] = []
    left = length
    while left > 0 and stream is not None:
        piece = stream.read(min(left, READ_PIECE_BYTES))
        if not piece:
            break
        parts.append(piece)
        left -= len(piece)
    if left > 0:
        # Half a chunk may end inside a character; the agent resends the whole of it.
        raise exceptions.ParseError(f"the body ended {left} bytes before its Content-Length")
    return b"".join(parts)
