"""Suite-wide settings: tests hash passwords with a fast hasher (the default spends ~100 ms per login)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

pytest_plugins = ["tests.fixtures"]


@pytest.fixture(autouse=True)
def _fast_password_hasher(settings) -> None:  # noqa: ANN001
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


@pytest.fixture(autouse=True)
def _fresh_scheduler_state() -> Iterator[None]:
    """Each test starts as a fresh site: no round-request flags or forecast stamp in the shared cache (one left by
    a test must not hold back another's rounds), and no job views kept from another test's rows (SQLite reuses
    ids after a rollback). Only Corral's keys: clearing the whole cache would flush the Redis that e2e tests'
    workers use as their broker."""
    from portal.rounds import forget_round_flags
    from portal.scheduler.job_views import forget_job_views

    forget_round_flags()
    forget_job_views()
    yield
    forget_round_flags()
    forget_job_views()
