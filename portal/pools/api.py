"""``/api/v1/pools/``: loanable pools for the serving side's scripts (issue #19; docs/elastic.md).

Staff only: lending and reclaiming move capacity between a serving system and training. ``GET`` lists the pools;
``POST .../lend/`` lends nodes; ``POST .../reclaim/`` answers 202 with the nodes Corral will give back (the nodes
are handed back as they empty, every beat), and ``GET .../reclaims/{id}/`` says how far it got. The views only
validate and call ``portal.pools``'s services and selectors.
"""

from __future__ import annotations

from typing import cast

from django.contrib.auth.models import User
from django.utils import timezone
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import exceptions, permissions, status
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from portal.api.parsers import JSONParser
from portal.pools.selectors import pool_list, reclaim_get
from portal.pools.serializers import (
    LendReplySerializer,
    LendSerializer,
    PoolSerializer,
    ReclaimRequestSerializer,
    ReclaimSerializer,
)
from portal.pools.services import pool_lend, pool_reclaim

POOL = OpenApiParameter("pool", OpenApiTypes.STR, OpenApiParameter.PATH, description="The pool's slug.")


class PoolListView(APIView):
    permission_classes = [permissions.IsAdminUser]

    @extend_schema(operation_id="pools_list", responses={200: PoolSerializer(many=True)})
    def get(self, request: Request) -> Response:
        """Every loanable pool: its nodes, those lent now, those being given back, its open reclaims."""
        return Response(PoolSerializer(pool_list(), many=True).data)


class PoolLendView(APIView):
    permission_classes = [permissions.IsAdminUser]
    parser_classes = [JSONParser]  # scripts send JSON; a form body is refused (415) before it is read

    @extend_schema(
        operation_id="pools_lend", parameters=[POOL], request=LendSerializer, responses={200: LendReplySerializer}
    )
    def post(self, request: Request, pool: str) -> Response:
        """Lend nodes of the pool to training: rounds may place work on them from now on. 400 for a node of
        another pool (``training`` included) or none; 404 for a pool no node belongs to."""
        body = LendSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        result = pool_lend(pool=pool, nodes=body.validated_data["nodes"], by=cast(User, request.user))
        return Response(LendReplySerializer(result).data)


class PoolReclaimView(APIView):
    permission_classes = [permissions.IsAdminUser]
    parser_classes = [JSONParser]  # scripts send JSON; a form body is refused (415) before it is read

    @extend_schema(
        operation_id="pools_reclaim",
        parameters=[POOL],
        request=ReclaimRequestSerializer,
        responses={202: ReclaimSerializer},
    )
    def post(self, request: Request, pool: str) -> Response:
        """Take `count` lent nodes back within `deadline_seconds`. 202 with the reclaim: the nodes Corral gives back
        (least server preemption cost), the elastic jobs shrunk and the jobs preempted to empty them, the cost in
        GPU-seconds and the deadline. Follow it with `GET .../reclaims/{id}/`. 400 on `count`
        for more nodes than are lent; 404 for an unknown pool."""
        body = ReclaimRequestSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        reclaim = pool_reclaim(
            pool=pool,
            count=body.validated_data["count"],
            deadline_seconds=body.validated_data["deadline_seconds"],
            by=cast(User, request.user),
            now=timezone.now(),
        )
        return Response(ReclaimSerializer(reclaim).data, status=status.HTTP_202_ACCEPTED)


class ReclaimDetailView(APIView):
    permission_classes = [permissions.IsAdminUser]

    @extend_schema(
        operation_id="pools_reclaim_retrieve",
        parameters=[
            POOL,
            OpenApiParameter("reclaim_id", OpenApiTypes.INT, OpenApiParameter.PATH, description="The reclaim's id."),
        ],
        responses={200: ReclaimSerializer},
    )
    def get(self, request: Request, pool: str, reclaim_id: int) -> Response:
        """One reclaim: which nodes are back and when, which were handed back at the deadline with work on them
        (`forced`, then `late` is true), and `finished` once all are back."""
        reclaim = reclaim_get(pool=pool, reclaim_id=reclaim_id)
        if reclaim is None:
            raise exceptions.NotFound("No such reclaim in this pool.")
        return Response(ReclaimSerializer(reclaim).data)
