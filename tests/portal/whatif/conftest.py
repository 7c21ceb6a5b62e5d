"""A staff admin (and an API client of theirs), a small finished history, and replays run in the test: for the
what-if service, API and page tests."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import AbstractBaseUser
from rest_framework.test import APIClient

from portal import celery_app
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


@pytest.fixture
def staff(root: AbstractBaseUser) -> APIClient:
    """An API client of a staff admin, through a real token."""
    client = APIClient()
    token = client.post("/api/v1/auth/token/", {"username": "root", "password": "pw"}, format="json").json()["token"]
    client.credentials(HTTP_AUTHORIZATION=f"Token {token}")
    return client


@pytest.fixture
def eager(monkeypatch: pytest.MonkeyPatch) -> None:
    """The replay a create queues runs in the test, for real, instead of needing a broker and a worker."""
    monkeypatch.setitem(celery_app.conf, "task_always_eager", True)
