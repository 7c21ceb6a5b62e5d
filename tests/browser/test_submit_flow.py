"""The demo user's first five minutes, in a real browser: log in, submit a job in the form, watch its page reach
"succeeded" through htmx polling, without reloading.

Debian's chromium (`make test` installs it) driven by Playwright; the portal, worker, beat and agents are real
processes (tests/e2e/harness.py). Skipped, with the reason, when chromium is missing or the e2e stack cannot run.
"""

from __future__ import annotations

import re
from typing import Any

import pytest

from tests.e2e.harness import PASSWORD, USERNAME, Stack

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True), pytest.mark.timeout(120)]


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
