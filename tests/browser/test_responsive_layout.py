"""The member's pages on a 390 px phone and on a 1366 px laptop, in a real browser: no page is wider than the
screen (wide tables scroll sideways inside themselves), the menu wraps and every link in it can be tapped, the
refusal and not-found pages are the site's own, and browsers that ask for /favicon.ico get the icon. At 1366 px the
layout is the desktop one: the menu on one row, tables as wide as their container. Ref: #18

Debian's chromium driven by Playwright, against the real worker, beat and agents of tests/e2e/harness.py; skipped,
with the reason, when chromium is missing or the e2e stack cannot run.
"""

from __future__ import annotations

import re
from typing import Any

import httpx
import pytest

from tests.browser.conftest import collect_errors
from tests.e2e.harness import NODES, PASSWORD, TENANT, USERNAME, Stack, wait_for

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True), pytest.mark.timeout(180)]

PHONE = {"width": 390, "height": 844}
LAPTOP = {"width": 1366, "height": 900}
LONG_NAME = "resnet50_imagenet_sweep_lr3e4_warmup10_cosine_bs2048_seed" + "0" * 30
NAV = ("Jobs", "Submit", "Nodes", "Tenants", "Dashboard", "API")
#: How far the page is wider than the window, in CSS pixels (0 when it fits).
OVERFLOW_JS = "document.documentElement.scrollWidth - window.innerWidth"
#: Whether an element is as wide as its parent's content box.
FILLS_JS = """e => {
  const style = getComputedStyle(e.parentElement);
  const inner = e.parentElement.clientWidth - parseFloat(style.paddingLeft) - parseFloat(style.paddingRight);
  return Math.abs(e.offsetWidth - inner) <= 1;
}"""


def busy_cluster(stack: Stack, api: httpx.Client) -> int:
    """Jobs with long names that offer no place to break a line, two running and one waiting (all 8 GPUs taken), so
    the job table has reasons and placements to show; the id of a running one."""
    ids = []
    for n in range(3):
        job = {"name": f"{LONG_NAME}_{n}", "command": "sleep 60", "gpus": 4, "tenant": TENANT}
        response = api.post("/api/v1/jobs/", json=job)
        assert response.status_code == 201, response.text
        ids.append(response.json()["id"])

    def running() -> int | None:
        states = {i: api.get(f"/api/v1/jobs/{i}/").json()["state"] for i in ids}
        return next((i for i, state in states.items() if state == "running"), None)

    job_id: int = wait_for(running, timeout=45, what="a job to start", stack=stack)
    return job_id


def log_in(page: Any) -> None:
    from playwright.sync_api import expect

    page.goto("/accounts/login/")
    page.fill("input[name=username]", USERNAME)
    page.fill("input[name=password]", PASSWORD)
    page.click("main form button[type=submit]")
    expect(page).to_have_url(re.compile(r"/jobs/$"))


def assert_fits(page: Any) -> None:
    overflow = page.evaluate(OVERFLOW_JS)
    assert overflow <= 0, f"{page.url} is {overflow}px wider than the {page.viewport_size['width']}px window"


def assert_menu_reachable(page: Any) -> None:
    """Every menu link and the log-out button are shown, within the window, and not covered by anything."""
    width = page.viewport_size["width"]
    targets = [page.locator("header nav").get_by_role("link", name=name, exact=True) for name in NAV]
    targets.append(page.locator("header").get_by_role("button", name="Log out"))
    for target in targets:
        box = target.bounding_box()
        assert box is not None and target.is_visible(), target
        assert box["x"] >= 0 and box["x"] + box["width"] <= width, (target, box)
        target.click(trial=True)  # actionable: visible, stable, receives the pointer (nothing covers it)


def test_member_pages_fit_a_390px_phone(page: Any, corral_stack: Stack, live_api: httpx.Client) -> None:
    from playwright.sync_api import expect

    job_id = busy_cluster(corral_stack, live_api)
    errors = collect_errors(page)
    page.set_viewport_size(PHONE)
    log_in(page)

    # The job list: the menu wraps below the brand, the table scrolls inside itself.
    expect(page.locator("[data-testid=job-table]")).to_contain_text(LONG_NAME[:30])  # the list may shorten it
    assert_fits(page)
    assert_menu_reachable(page)
    table = page.locator("[data-testid=job-table]")
    assert table.evaluate("t => t.scrollWidth > t.clientWidth"), "the job table fits 390px: nothing proves it scrolls"
    assert table.evaluate("t => getComputedStyle(t).overflowX") == "auto"
    # Inside the scrolling table "Where / why" keeps a readable width: squeezed, it folded a wait reason into a
    # word a line and each waiting job's row was 400 px tall.
    assert min(table.locator("td.why").evaluate_all("cells => cells.map(c => c.offsetWidth)")) >= 200

    # Each page reached through the menu and links, as a thumb would.
    page.locator("[data-testid=job-table]").get_by_role("link", name=str(job_id), exact=True).click()
    expect(page).to_have_url(re.compile(rf"/jobs/{job_id}/$"))
    expect(page.locator("[data-testid=job-state]")).to_have_text("running")
    expect(page.locator("main h1")).to_contain_text(LONG_NAME)  # broken across lines, not past the window's edge
    assert_fits(page)
    assert_menu_reachable(page)
    for name, path, ready in (
        ("Dashboard", "/dashboard/", "[data-testid=tenant-table]"),
        ("Nodes", "/nodes/", f"text={NODES[0]}"),
        ("Tenants", "/tenants/", "[data-testid=tenant-table]"),
    ):
        page.locator("header nav").get_by_role("link", name=name, exact=True).click()
        expect(page).to_have_url(re.compile(f"{path}$"))
        expect(page.locator(ready).first).to_be_visible()
        if name == "Dashboard":
            expect(page.locator("#dashboard .js-plotly-plot").first).to_be_visible()  # charts drawn at their width
        assert_fits(page)
        assert_menu_reachable(page)
    page.goto(f"/nodes/{NODES[0]}/")
    expect(page.locator("table.gpus")).to_be_visible()
    assert_fits(page)
    page.goto("/jobs/new/")
    assert_fits(page)

    assert not errors, "\n".join(errors)

    # The refusal and the missing page: the site's own, readable, with a way back, and they fit too. (Chromium logs
    # each as a resource that failed to load: expected here, so they are dropped from the errors below.)
    response = page.goto("/whatif/")
    assert response is not None and response.status == 403
    expect(page.locator("main h1")).to_have_text("Not allowed")
    expect(page.locator("main")).to_contain_text("What-if replays are for admins")
    assert_fits(page)
    assert_menu_reachable(page)
    page.locator("main").get_by_role("link", name="Go to the jobs").click()
    expect(page).to_have_url(re.compile(r"/jobs/$"))
    response = page.goto("/no/such/page/")
    assert response is not None and response.status == 404
    expect(page.locator("main h1")).to_have_text("Page not found")
    expect(page.locator("body")).not_to_contain_text("URLconf")
    assert_fits(page)

    # The icon: linked from every page, and /favicon.ico (which browsers ask for by themselves) leads to it.
    assert page.locator("head link[rel=icon]").count() == 2
    status, redirected, kind = page.evaluate(
        "fetch('/favicon.ico').then(r => [r.status, r.redirected, r.headers.get('content-type')])"
    )
    assert (status, redirected) == (200, True) and kind.startswith("image/"), (status, redirected, kind)
    expected = re.compile(r"status of (403|404) .*/(whatif|no/such/page)/\)$")
    assert not [e for e in errors if not expected.search(e)], "\n".join(errors)


def test_member_pages_keep_the_desktop_layout_at_1366px(page: Any, corral_stack: Stack, live_api: httpx.Client) -> None:
    from playwright.sync_api import expect

    job_id = busy_cluster(corral_stack, live_api)
    errors = collect_errors(page)
    page.set_viewport_size(LAPTOP)
    log_in(page)
    for path, ready in (
        ("/jobs/", "[data-testid=job-table]"),
        (f"/jobs/{job_id}/", "[data-testid=job-state]"),
        ("/dashboard/", "[data-testid=tenant-table]"),
        ("/nodes/", "table.nodes"),
        (f"/nodes/{NODES[0]}/", "table.gpus"),
        ("/tenants/", "[data-testid=tenant-table]"),
    ):
        page.goto(path)
        expect(page.locator(ready).first).to_be_visible()
        assert_fits(page)
        assert_menu_reachable(page)
        # One row: the brand, every menu link and the log-out button share a line.
        tops = page.evaluate(
            "[...document.querySelectorAll('header .brand, header nav a, header .whoami button')]"
            ".map(e => Math.round(e.getBoundingClientRect().top + e.getBoundingClientRect().height / 2))"
        )
        assert max(tops) - min(tops) <= 4, (path, tops)
        # Tables are plain tables, not scrolling blocks, and the page's own table is as wide as its container.
        for table in page.locator("main table").all():
            assert table.evaluate("t => getComputedStyle(t).display") == "table", path
        if page.locator(ready).first.evaluate("e => e.tagName") == "TABLE":
            assert page.locator(ready).first.evaluate(FILLS_JS), path
    assert not errors, "\n".join(errors)
