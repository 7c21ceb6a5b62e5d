"""Browser tests run against the same real processes as the end-to-end tests (``tests/e2e/harness.py``)."""

from tests.e2e.harness import corral_stack, e2e_user, live_api, pytest_runtest_makereport  # noqa: F401
