"""Shared fixtures for database tests: a small registered cluster and members of two tenants.

Loaded for the whole suite by ``tests/conftest.py``.
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from django.contrib.auth.models import AbstractBaseUser
from rest_framework.test import APIClient

from portal.nodes.models import Node
from portal.nodes.services import GpuReport, node_register, node_token_issue
from portal.tenants.models import Role, Tenant
from tests.factories import MembershipFactory, QuotaFactory, TenantFactory, UserFactory


@dataclass
class World:
    tenant: Tenant
    other_tenant: Tenant
    alice: AbstractBaseUser  # member of tenant
    bob: AbstractBaseUser  # member of tenant
    admin: AbstractBaseUser  # tenant admin of tenant
    eve: AbstractBaseUser  # member of other_tenant only
    nodes: list[Node]
    tokens: dict[str, str]


def register_node(name: str, gpus: int = 4) -> tuple[Node, str]:
    node, token = node_token_issue(name=name)
    node = node_register(
        node=node,
        hostname=name,
        address="127.0.0.1",
        agent_version="test",
        gpus=[GpuReport(index=i, uuid=f"GPU-{name}-{i}", model="Fake", memory_mb=1000) for i in range(gpus)],
    )
    return node, token


@pytest.fixture
def world(db) -> World:  # noqa: ANN001
    tenant = TenantFactory(slug="lab")
    other = TenantFactory(slug="other")
    QuotaFactory(tenant=tenant, gpu_limit=6)
    QuotaFactory(tenant=other, gpu_limit=None)
    alice, bob, admin, eve = (UserFactory(username=n) for n in ("alice", "bob", "labadmin", "eve"))
    MembershipFactory(user=alice, tenant=tenant)
    MembershipFactory(user=bob, tenant=tenant)
    MembershipFactory(user=admin, tenant=tenant, role=Role.ADMIN)
    MembershipFactory(user=eve, tenant=other)
    nodes, tokens = [], {}
    for name in ("n1", "n2"):
        node, token = register_node(name)
        nodes.append(node)
        tokens[name] = token
    return World(tenant, other, alice, bob, admin, eve, nodes, tokens)


@pytest.fixture
def api(world: World) -> APIClient:
    """An API client logged in as alice through a real token."""
    client = APIClient()
    response = client.post("/api/v1/auth/token/", {"username": "alice", "password": "pw"}, format="json")
    client.credentials(HTTP_AUTHORIZATION=f"Token {response.json()['token']}")
    return client


def agent_client(token: str) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Node {token}")
    return client
