"""A staff admin and a small finished history, for the what-if service and page tests."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import AbstractBaseUser

from portal.jobs.models import Job
from tests.factories import UserFactory
from tests.fixtures import World
from tests.history import small_history


@pytest.fixture
def root(world: World) -> AbstractBaseUser:
    return UserFactory(username="root", is_staff=True)


@pytest.fixture
def history(world: World) -> dict[str, Job]:
    users = {"alice": world.alice, "bob": world.bob, "eve": world.eve}
    return small_history(world.tenant, world.other_tenant, users)
