"""Suite-wide settings: tests hash passwords with a fast hasher (the default spends ~100 ms per login)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

pytest_plugins = ["tests.fixtures"]


@pytest.fixture(autouse=True)
def _fast_password_hasher(settings) -> None:  # noqa: ANN001
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


@pytest.fixture(autouse=True)
def _own_cache(settings) -> None:  # noqa: ANN001
    """Without Redis (plain `pytest` on SQLite), each test process keeps its cache in memory: the embedded default's
    file cache would be shared by two test runs on one checkout, and one run's flags would steer the other's rounds.
    With Redis (`make test`) keys already carry the test database's name, and e2e workers must share them."""
    if not settings.REDIS_URL:
        local = "django.core.cache.backends.locmem.LocMemCache"
        settings.CACHES = {"default": {"BACKEND": local, "KEY_FUNCTION": "portal.db.cache_key"}}


@pytest.fixture(autouse=True)
def _fresh_scheduler_state(_own_cache: None) -> Iterator[None]:
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
