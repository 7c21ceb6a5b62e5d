"""``POST /api/v1/auth/token/``: how a script gets its API token."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema, inline_serializer
from rest_framework import parsers, serializers
from rest_framework.authtoken.views import ObtainAuthToken
from rest_framework.request import Request
from rest_framework.response import Response

from portal.api.parsers import JSONParser


class TokenView(ObtainAuthToken):
    """Exchange a username and password for an API token (the same token on every call)."""

    # ObtainAuthToken names DRF's own JSONParser; ours refuses bodies nested too deep to parse (a 400, not a 500).
    parser_classes = (parsers.FormParser, parsers.MultiPartParser, JSONParser)

    @extend_schema(
        auth=[],  # it takes none: it is how a client gets its first credentials
        request=inline_serializer(
            "TokenRequest", {"username": serializers.CharField(), "password": serializers.CharField()}
        ),
        responses={200: inline_serializer("TokenResponse", {"token": serializers.CharField()})},
    )
    def post(self, request: Request, *args: object, **kwargs: object) -> Response:
        return super().post(request, *args, **kwargs)
