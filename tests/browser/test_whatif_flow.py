"""An admin replays the cluster's own history in the browser: a few jobs run for real, then What-if from the menu,
a readable error for a bad window, a valid replay under three policies, the run's page polling itself to "Done"
without a reload, the results table (live row, what really happened) and the plotly charts drawn. A member who is
not staff sees no What-if link and gets 403. Ref: #3.

Debian's chromium driven by Playwright, against the real worker, beat and agents of tests/e2e/harness.py; skipped,
with the reason, when chromium is missing or the e2e stack cannot run.
"""

from __future__ import annotations

import json
import os
import re
import signal
from datetime import timedelta
from typing import Any

import httpx
import pytest

from tests.browser.conftest import collect_errors
from tests.e2e.harness import PASSWORD, USERNAME, Stack, wait_for

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True), pytest.mark.timeout(180)]

ADMIN, ADMIN_PASSWORD = "ops-admin", "ops-admin-pw"
# Short jobs of a few sizes on the stack's 2 x 4 GPUs; one fails, as histories do.
JOBS = [("short", "sleep 1", 1), ("pair", "sleep 2", 2), ("broken", "exit 3", 1)]
OTHERS = ["sjf", "tiresias-gittins"]  # replayed beside the live policy: an oracle and a non-clairvoyant one


@pytest.fixture(autouse=True)
def admin(transactional_db: None) -> Any:
    """A staff login, made before the browser starts (autouse runs it before ``page``; see its docstring)."""
    from django.contrib.auth import get_user_model

    return get_user_model().objects.create_user(ADMIN, password=ADMIN_PASSWORD, is_staff=True)


def run_jobs(stack: Stack, api: httpx.Client) -> None:
    """Submit JOBS as the demo user through the API and wait until each has finished."""
    ids = []
    for name, command, gpus in JOBS:
        response = api.post("/api/v1/jobs/", json={"name": name, "command": command, "gpus": gpus, "tenant": "demo"})
        assert response.status_code == 201, response.text
        ids.append(response.json()["id"])

    def all_done() -> bool:
        return all(api.get(f"/api/v1/jobs/{i}/").json()["state"] in {"succeeded", "failed"} for i in ids)

    wait_for(all_done, timeout=45, what="the jobs to finish", stack=stack)


def log_in(page: Any, username: str, password: str) -> None:
    page.goto("/accounts/login/")
    page.fill("input[name=username]", username)
    page.fill("input[name=password]", password)
    page.click("main form button[type=submit]")


def pause_worker(stack: Stack, paused: bool) -> None:
    """SIGSTOP (or SIGCONT) the Celery worker's process group, its pool included: the run then stays queued until
    the page has loaded, so it can only learn of "Done" by polling."""
    popen = stack.procs["worker"].popen
    assert popen is not None
    os.killpg(popen.pid, signal.SIGSTOP if paused else signal.SIGCONT)


def test_admin_replays_history_in_the_browser(
    page: Any, corral_stack: Stack, live_api: httpx.Client, settings: Any
) -> None:
    from django.utils import timezone
    from playwright.sync_api import expect

    run_jobs(corral_stack, live_api)
    live = settings.CORRAL_POLICY
    policies = [live, *(p for p in OTHERS if p != live)]

    # A member who is not staff: no link in the menu, and 403 at the URL.
    log_in(page, USERNAME, PASSWORD)
    expect(page).to_have_url(re.compile(r"/jobs/$"))
    nav = page.locator("header nav")
    expect(nav.get_by_role("link", name="Jobs")).to_be_visible()
    expect(nav.get_by_role("link", name="What-if")).to_have_count(0)
    response = page.goto("/whatif/")
    assert response is not None and response.status == 403
    page.goto("/jobs/")
    page.click("header form.whoami button[type=submit]")  # log out
    expect(page).to_have_url(re.compile(r"/accounts/login/"))

    # From here on, the browser must report no error but the missing favicon.
    errors = collect_errors(page)

    log_in(page, ADMIN, ADMIN_PASSWORD)
    expect(page).to_have_url(re.compile(r"/jobs/$"))
    page.locator("header nav").get_by_role("link", name="What-if").click()
    expect(page).to_have_url(re.compile(r"/whatif/$"))
    expect(page.locator("[data-testid=whatif-runs]")).to_contain_text("No replays yet.")
    form = page.locator("[data-testid=whatif-form]")
    # Filled in from the live cluster (2 nodes of 4 GPUs) and settings: the live policy ticked, marked (live).
    expect(form.locator("input[name=nodes]")).to_have_value("2")
    expect(form.locator("input[name=gpus_per_node]")).to_have_value("4")
    expect(form.locator("input[name=cluster][value=live]")).to_be_checked()  # a copy of the live nodes, by default
    expect(form.locator(f"input[name=policies][value='{live}']")).to_be_checked()
    expect(form.locator(f"label:has(input[name=policies][value='{live}'])")).to_contain_text("(live)")

    # A window that ends before it starts, and no policy: both said next to their field, nothing stored.
    today = timezone.localdate()
    since, until = today - timedelta(days=1), today + timedelta(days=1)  # around now, even across midnight
    form.locator("input[name=since]").fill(since.isoformat())
    form.locator("input[name=until]").fill((since - timedelta(days=1)).isoformat())
    form.locator(f"input[name=policies][value='{live}']").uncheck()
    form.get_by_role("button", name="Replay").click()
    expect(page).to_have_url(re.compile(r"/whatif/$"))
    expect(form.locator("label:has(input[name=until]) .error")).to_have_text(
        "Must be a later day than the start of the window."
    )
    expect(form.locator("fieldset.choices .error")).to_have_text("Choose at least one policy.")
    expect(form.locator("input[name=since]")).to_have_value(since.isoformat())  # what was typed is kept
    expect(page.locator("[data-testid=whatif-runs]")).to_contain_text("No replays yet.")

    # A valid replay under three policies; the worker is held so the page first shows the run waiting.
    form.locator("input[name=until]").fill(until.isoformat())
    for name in policies:
        form.locator(f"input[name=policies][value='{name}']").check()
    pause_worker(corral_stack, True)
    try:
        form.get_by_role("button", name="Replay").click()
        expect(page).to_have_url(re.compile(r"/whatif/\d+/$"))
        page.evaluate("window.__corralNoReload = true")  # gone if anything reloads the page
        state = page.locator("[data-testid=whatif-state]")
        expect(state).to_have_text("Queued")
        expect(page.locator("[data-testid=whatif-results]")).to_have_count(0)
    finally:
        pause_worker(corral_stack, False)
    expect(state).to_have_text("Done", timeout=45_000)
    assert page.evaluate("window.__corralNoReload === true"), "the run's page reloaded instead of polling"

    # The table: one row per policy, the live one marked and at 1.00x, then what really happened.
    table = page.locator("[data-testid=whatif-results]")
    expect(table.locator("tbody tr")).to_have_count(len(policies) + 1)
    shown = table.locator("tbody tr:not(.observed) td:first-child b").all_inner_texts()
    assert sorted(shown) == sorted(policies), shown
    live_row = table.locator("[data-testid=live-row]")
    expect(live_row).to_have_count(1)
    expect(live_row.locator("td b")).to_have_text(live)
    expect(live_row.locator(".tag")).to_have_text("live")
    expect(live_row.locator("td").nth(2)).to_have_text("1.00x")
    observed = table.locator("[data-testid=observed-row]")
    expect(observed).to_contain_text("what really happened")
    # Seconds-long jobs, in the unit of their column with three significant digits ("4.33 s"). Ref: #18
    expect(observed.locator("td").nth(1)).to_have_text(re.compile(r"^\d+(\.\d+)? s$"))
    expect(page.locator("dl.facts dt:text-is('Jobs replayed') + dd")).to_have_text(str(len(JOBS)))
    setup = page.locator("[data-testid=whatif-setup]")
    expect(setup.get_by_role("heading", name="Replayed on")).to_be_visible()
    expect(setup).to_contain_text("Live nodes: 2 nodes, 8 GPUs (2 × 4)")

    # The charts: every stored figure drawn by plotly (its SVG is there), the live policy named in the legends.
    figures = json.loads(page.locator("#whatif-figures").text_content() or "[]")
    assert len(figures) >= 1
    charts = page.locator("[data-whatif-charts] .chart")
    expect(charts).to_have_count(len(figures))
    expect(page.locator("[data-whatif-charts] .chart:not(:has(.main-svg))")).to_have_count(0)
    expect(page.locator("[data-whatif-charts] .legendtext", has_text=f"{live} (live)").first).to_be_visible()

    # Back on the list, the run is there: done, its policies, who asked.
    run_url = page.url
    page.locator("main").get_by_role("link", name="What-if").click()
    expect(page).to_have_url(re.compile(r"/whatif/$"))
    first = page.locator("[data-testid=whatif-runs] tbody tr").first
    expect(first).to_contain_text("Done")
    for name in [*policies, ADMIN]:
        expect(first).to_contain_text(name)
    assert run_url.rstrip("/").endswith("/" + first.locator("td a").inner_text())

    assert not errors, "\n".join(errors)
