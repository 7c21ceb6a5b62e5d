"""The demo user's first five minutes, in a real browser: log in, submit a job in the form, watch its page reach
"succeeded" through htmx polling, without reloading.

Debian's chromium (`make test` installs it) driven by Playwright; the portal, worker, beat and agents are real
processes (tests/e2e/harness.py). Skipped, with the reason, when chromium is missing or the e2e stack cannot run.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.harness import PASSWORD, USERNAME, Stack

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True), pytest.mark.timeout(120)]

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
def page(corral_stack: Stack, e2e_user: Any, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """A fresh headless chromium page (a new temporary profile each time) with the stack and demo user ready."""
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


def test_demo_user_submits_a_job_and_sees_it_succeed(page: Any, corral_stack: Stack) -> None:
    from playwright.sync_api import expect

    page.goto("/jobs/new/")
    expect(page).to_have_url(re.compile(r"/accounts/login/"))  # not logged in yet
    page.fill("input[name=username]", USERNAME)
    page.fill("input[name=password]", PASSWORD)
    page.click("main form button[type=submit]")
    expect(page).to_have_url(re.compile(r"/jobs/new/$"))  # back where we were going

    page.fill("[name=name]", "browser-hello")
    page.fill("[name=command]", "echo hello-from-the-browser; sleep 1")
    page.fill("[name=gpus]", "2")
    page.click("main form button[type=submit]")
    expect(page).to_have_url(re.compile(r"/jobs/\d+/$"))

    # Mark this document: if anything reloaded the page, the marker would be gone.
    page.evaluate("window.__corralNoReload = true")
    state = page.locator("[data-testid=job-state]")
    expect(state).to_have_text(re.compile(r"pending|running|succeeded"))
    expect(state).to_have_text("succeeded", timeout=45_000)
    assert page.evaluate("window.__corralNoReload === true"), "the job page reloaded instead of polling"
    expect(page.locator("[data-testid=job-exit-code]")).to_have_text("0")
    expect(page.locator("[data-testid=job-log]")).to_contain_text("hello-from-the-browser")
