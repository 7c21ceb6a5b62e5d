"""End-to-end fixtures: real Celery worker, beat and node agents around pytest-django's live server.

They are defined in ``tests/e2e/harness.py`` (shared with the browser tests) and imported here so pytest sees them.
"""

from tests.e2e.harness import corral_stack, e2e_user, live_api, pytest_runtest_makereport  # noqa: F401
