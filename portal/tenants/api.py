"""``GET /api/v1/tenants/``: each tenant's quota, holdings and fair-share standing, as the ``/tenants/`` page shows
them (same selector, same visibility: a member gets their tenants' rows, staff every tenant's; the borrowing order
is over all tenants either way)."""

from __future__ import annotations

from django.utils import timezone
from drf_spectacular.utils import extend_schema
from rest_framework import permissions
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from portal.tenants.overview import tenant_overview
from portal.tenants.serializers import TenantOverviewSerializer


class TenantListView(APIView):
    permission_classes = [permissions.IsAuthenticated]

    @extend_schema(
        summary="Tenants' quotas, GPUs held and borrowed, and fair-share standing (what /tenants/ shows)",
        responses={200: TenantOverviewSerializer},  # 401 is added by portal/api/schema.py
    )
    def get(self, request: Request) -> Response:
        overview = tenant_overview(user=request.user, now=timezone.now())
        return Response(TenantOverviewSerializer(overview).data)
