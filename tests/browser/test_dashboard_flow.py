"""The demo user's dashboard in a real browser, after a job has really run: the Dashboard link in the menu, the
tenant's row in the per-tenant table, plotly charts drawn from the embedded figures, the live fragment swapped in
and its charts drawn again, the Tenants page, and no error in the console.

Debian's chromium driven by Playwright, against the real worker, beat and agents of tests/e2e/harness.py; skipped,
with the reason, when chromium is missing or the e2e stack cannot run.
"""

from __future__ import annotations

import re
from typing import Any

import httpx
import pytest

from tests.browser.conftest import collect_errors
from tests.e2e.harness import PASSWORD, TENANT, USERNAME, Stack, wait_for

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True), pytest.mark.timeout(150)]


def run_a_job(stack: Stack, api: httpx.Client) -> None:
    response = api.post("/api/v1/jobs/", json={"name": "dash", "command": "sleep 1", "gpus": 2, "tenant": TENANT})
    assert response.status_code == 201, response.text
    job_id = response.json()["id"]
    wait_for(
        lambda: api.get(f"/api/v1/jobs/{job_id}/").json()["state"] == "succeeded",
        timeout=45,
        what="the job to succeed",
        stack=stack,
    )


def test_member_reads_the_dashboard_after_a_job_ran(page: Any, corral_stack: Stack, live_api: httpx.Client) -> None:
    from playwright.sync_api import expect

    run_a_job(corral_stack, live_api)
    errors = collect_errors(page)

    page.goto("/accounts/login/")
    page.fill("input[name=username]", USERNAME)
    page.fill("input[name=password]", PASSWORD)
    page.click("main form button[type=submit]")
    expect(page).to_have_url(re.compile(r"/jobs/$"))
    page.locator("header nav").get_by_role("link", name="Dashboard").click()
    expect(page).to_have_url(re.compile(r"/dashboard/$"))

    expect(page.locator("[data-testid=tenant-table] tbody")).to_contain_text(TENANT)
    expect(page.locator("[data-testid=user-table] tbody")).to_contain_text(USERNAME)
    expect(page.locator("[data-testid=stat-finished]")).to_have_text("1")
    drawn = page.locator("#dashboard .js-plotly-plot")
    expect(drawn.first).to_be_visible()
    expect(page.locator("#dashboard .js-plotly-plot .main-svg").first).to_be_attached()
    charts = page.locator("#dashboard [data-chart]").count()
    assert charts >= 2 and drawn.count() == charts  # the utilization and usage charts at least, all drawn

    # The live update, without waiting 30 s: the same request the poll makes, swapped in the same way.
    page.evaluate("window.__corralNoReload = true")
    page.evaluate("htmx.ajax('GET', '/dashboard/?window=24h', {target: '#dashboard', swap: 'innerHTML'})")
    expect(page.locator("[data-testid=dashboard-scope]")).to_contain_text("last 24 hours")
    expect(drawn.first).to_be_visible()
    assert page.evaluate("window.__corralNoReload === true"), "the page reloaded instead of swapping its fragment"
    assert page.locator("#dashboard .js-plotly-plot").count() == page.locator("#dashboard [data-chart]").count()

    # The Tenants page: the member's tenant, what it holds now (the job is over), and its recent usage.
    page.locator("header nav").get_by_role("link", name="Tenants").click()
    expect(page).to_have_url(re.compile(r"/tenants/$"))
    row = page.locator(f"[data-testid=tenant-table] tr[data-tenant={TENANT}]")
    expect(row.locator("[data-testid=tenant-held]")).to_have_text("no GPUs")
    expect(row).to_contain_text("GPU-hours")

    assert not errors, "\n".join(errors)
