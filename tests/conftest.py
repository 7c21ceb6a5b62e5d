"""Suite-wide settings: tests hash passwords with a fast hasher (the default spends ~100 ms per login)."""

from __future__ import annotations

import pytest

pytest_plugins = ["tests.fixtures"]


@pytest.fixture(autouse=True)
def _fast_password_hasher(settings) -> None:  # noqa: ANN001
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
