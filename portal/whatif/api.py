"""``/api/v1/whatif/``: what-if replays for admins' scripts, as the browser's ``/whatif/`` offers them.

Staff only, like the history export: a replay reads every tenant's jobs. ``POST`` queues a run (``whatif_create``)
and answers 201 at once; a worker replays it, and the script polls ``GET /api/v1/whatif/{id}/`` until its ``state``
is ``done`` (with ``results``) or ``failed`` (with ``error``). The views only validate and call
``portal.whatif``'s services and selectors.
"""

from __future__ import annotations

from typing import cast

from django.conf import settings
from django.contrib.auth.models import User
from django.db.models import QuerySet
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import exceptions, permissions, status, viewsets
from rest_framework.request import Request
from rest_framework.response import Response

from portal.tenants.selectors import tenant_limits
from portal.whatif.models import WhatIfRun
from portal.whatif.selectors import whatif_get, whatif_list, whatif_live_cluster
from portal.whatif.serializers import (
    WhatIfDetailQuery,
    WhatIfRequestSerializer,
    WhatIfRunSerializer,
)
from portal.whatif.services import whatif_create

#: How far back the list goes, newest first, a page at a time (the selector answers the latest N). An older run
#: stays readable by its id.
LISTED = 1000


class WhatIfViewSet(viewsets.GenericViewSet[WhatIfRun]):
    """What-if runs: ask for one, list the latest, read one with its results."""

    permission_classes = [permissions.IsAdminUser]
    serializer_class = WhatIfRunSerializer
    filter_backends: list[type] = []
    lookup_value_regex = "[0-9]+"

    def get_queryset(self) -> QuerySet[WhatIfRun]:
        return whatif_list(limit=LISTED)

    @extend_schema(
        operation_id="whatif_create",
        request=WhatIfRequestSerializer,
        responses={201: WhatIfRunSerializer},
    )
    def create(self, request: Request) -> Response:
        """Queue a replay of the finished jobs submitted in the window under each policy; 201 with the queued run
        (its `url` also in `Location`). Left out, the policies, placement and cluster are the live ones (a copy of
        the live nodes), with the tenants' quotas of now; `nodes` or `gpus_per_node` alone ask for a uniform
        cluster, as before `cluster` existed. `quota_changes` tries other quotas for named tenants in this run
        only."""
        params = WhatIfRequestSerializer(
            data=request.data,
            context={
                "live_policy": settings.CORRAL_POLICY,
                "live_placement": settings.CORRAL_PLACEMENT,
                "cluster": whatif_live_cluster(),
                "quotas": tenant_limits(),
                "half_life_hours": settings.CORRAL_FAIR_SHARE_HALF_LIFE_HOURS,
            },
        )
        params.is_valid(raise_exception=True)
        run = whatif_create(user=cast(User, request.user), **params.validated_data)
        data = WhatIfRunSerializer(run, context={"request": request}).data
        return Response(data, status=status.HTTP_201_CREATED, headers={"Location": data["url"]})

    @extend_schema(operation_id="whatif_list", responses={200: WhatIfRunSerializer(many=True)})
    def list(self, request: Request) -> Response:
        """The latest runs, newest first, with who asked for each (no results: read a run for those)."""
        page = self.paginate_queryset(self.get_queryset())
        context = {"request": request, "results": False}
        return self.get_paginated_response(WhatIfRunSerializer(page, many=True, context=context).data)

    @extend_schema(
        operation_id="whatif_retrieve",
        parameters=[
            OpenApiParameter("id", OpenApiTypes.INT, OpenApiParameter.PATH, description="The run's id."),
            OpenApiParameter(
                "figures",
                OpenApiTypes.BOOL,
                description="Include the page's plotly figures in `results.figures` (large; default false).",
            ),
        ],
        responses={200: WhatIfRunSerializer},
    )
    def retrieve(self, request: Request, pk: str) -> Response:
        """One run: `queued`, `running`, `done` with its `results` (per policy, numbers and the page's formatted
        row; what really happened; jobs left out), or `failed` with its `error`."""
        query = WhatIfDetailQuery(data=request.query_params)
        query.is_valid(raise_exception=True)
        run = whatif_get(run_id=int(pk))
        if run is None:
            raise exceptions.NotFound("No such what-if run.")
        context = {"request": request, "figures": query.validated_data["figures"]}
        return Response(WhatIfRunSerializer(run, context=context).data)
