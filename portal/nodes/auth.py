"""Authentication of node agents: ``Authorization: Node <token>``, a per-node token of which only a hash is kept.

An agent is not a user: it gets a :class:`NodePrincipal`, and agent views accept nothing else, so a user token
cannot impersonate a node and a node token cannot read jobs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from drf_spectacular.extensions import OpenApiAuthenticationExtension
from drf_spectacular.openapi import AutoSchema
from rest_framework import authentication, exceptions, permissions
from rest_framework.request import Request
from rest_framework.views import APIView

from portal.nodes.models import Node
from portal.nodes.services import node_for_token


@dataclass(frozen=True)
class NodePrincipal:
    node: Node
    is_authenticated: bool = True
    is_staff: bool = False
    is_superuser: bool = False

    def get_username(self) -> str:
        return f"agent:{self.node.name}"


class NodeTokenAuthentication(authentication.BaseAuthentication):
    keyword = "Node"

    def authenticate(self, request: Request) -> tuple[NodePrincipal, Node] | None:
        header = authentication.get_authorization_header(request).split()
        if not header or header[0].decode(errors="replace") != self.keyword:
            return None
        if len(header) != 2:
            raise exceptions.AuthenticationFailed("Invalid node token header.")
        node = node_for_token(header[1].decode(errors="replace"))
        if node is None:
            raise exceptions.AuthenticationFailed("Unknown node token.")
        return (NodePrincipal(node), node)

    def authenticate_header(self, request: Request) -> str:
        return self.keyword


class IsNodeAgent(permissions.BasePermission):
    """Agent views admit node agents only. It refuses only callers who are not authenticated as a node: the API
    schema documents a 401 for it, never a 403 (``portal.api.schema``)."""

    authentication_only = True

    def has_permission(self, request: Request, view: APIView) -> bool:
        return isinstance(request.user, NodePrincipal)


# Extensions register themselves in drf-spectacular's __init_subclass__, which is not annotated; hence the ignore.
class NodeTokenScheme(OpenApiAuthenticationExtension):  # type: ignore[no-untyped-call]
    target_class = NodeTokenAuthentication
    name = "nodeTokenAuth"

    def get_security_definition(self, auto_schema: AutoSchema) -> dict[str, Any]:
        return {
            "type": "apiKey",
            "in": "header",
            "name": "Authorization",
            "description": "A node agent's token, as `Node <token>` (`manage.py node_token NODE` prints one).",
        }
