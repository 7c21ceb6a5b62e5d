"""Browser tests run against the same real processes as the end-to-end tests (``tests/e2e/harness.py``)."""

from tests.e2e.harness import api, corral_stack, e2e_user, pytest_runtest_makereport  # noqa: F401
