"""Browser tests run against the same real processes as the end-to-end tests (``tests/e2e/harness.py``), in
Debian's chromium driven by Playwright."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.harness import Stack, corral_stack, e2e_user, live_api, pytest_runtest_makereport  # noqa: F401

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--no-sandbox",  # CI runs as root, where chromium's sandbox refuses to start
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
TIMEOUT_MS = 30_000


@pytest.fixture
def page(corral_stack: Stack, e2e_user: Any, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:  # noqa: F811
    """A fresh headless chromium page (a new temporary profile each time) with the stack and demo user ready.

    Make any other database rows in fixtures that run before this one: ORM calls under Playwright's sync API run
    in its greenlet, where Django opens a second connection that nobody closes, and the test database then cannot
    be dropped.
    """
    if not CHROMIUM.exists():
        pytest.skip(f"{CHROMIUM} is missing: `make test` installs Debian's chromium (as root)")
    from playwright.sync_api import sync_playwright

    # Playwright's sync API runs an event loop in this thread; Django would refuse ORM calls made while it is
    # alive (teardown flushes the database). The browser only talks HTTP to the live server, in its own thread.
    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), headless=True, args=CHROMIUM_ARGS)
        try:
            context = browser.new_context(base_url=corral_stack.url)
            context.set_default_timeout(TIMEOUT_MS)
            yield context.new_page()
        finally:
            browser.close()


def collect_errors(page: Any) -> list[str]:
    """A list that fills with every error the browser reports from now on (uncaught exceptions and console errors)."""
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(f"page error: {exc}"))
    page.on(
        "console",
        lambda msg: errors.append(f"console: {msg.text} ({msg.location.get('url')})") if msg.type == "error" else None,
    )
    return errors
