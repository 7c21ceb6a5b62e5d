"""A staff admin with an API token, and a loanable pool of three 4-GPU nodes (``tests.portal.pools.helpers``)."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import AbstractBaseUser
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from tests.factories import UserFactory
from tests.fixtures import World
from tests.portal.pools.helpers import make_pool


@pytest.fixture
def root(world: World) -> AbstractBaseUser:
    return UserFactory(username="root", is_staff=True)


@pytest.fixture
def staff(root: AbstractBaseUser) -> APIClient:
    """An API client of a staff admin, through a real token."""
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {Token.objects.get_or_create(user=root)[0].key}")
    return client


@pytest.fixture
def pool(world: World) -> World:
    """Pool ``inference``: s1, s2, s3, four GPUs each, none lent; the training nodes n1 and n2 drained."""
    make_pool(world)
    return world
