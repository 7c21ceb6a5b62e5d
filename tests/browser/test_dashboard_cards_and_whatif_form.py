"""Two layouts of #18 seen in a real browser: the dashboard's seven summary cards never leave one alone on a row
(at 1366 px, at a narrower 800 px, and one per row on a 390 px phone), and the what-if form hides the settings only
``+quota`` policies read until one is ticked. Ref: #18 (items 9 and 10).

Debian's chromium driven by Playwright against pytest-django's live server; no worker or agent is needed, so this
runs on SQLite too. Skipped, with the reason, when chromium is missing.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest

from tests.browser.conftest import CHROMIUM, CHROMIUM_ARGS, TIMEOUT_MS, collect_errors

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True), pytest.mark.timeout(120)]

USERNAME, PASSWORD = "ops", "ops-password"


@pytest.fixture(autouse=True)
def rows(transactional_db: None, settings: Any) -> None:
    """A staff login, two tenants and a finished job, made before the browser starts (see ``page`` in conftest)."""
    from django.contrib.auth import get_user_model
    from django.utils import timezone

    from tests.factories import QuotaFactory, TenantFactory
    from tests.portal.dashboards.rows import job

    settings.CORRAL_POLICY = "fifo"
    user = get_user_model().objects.create_user(USERNAME, password=PASSWORD, is_staff=True)
    lab = TenantFactory(slug="lab")
    QuotaFactory(tenant=lab, gpu_limit=6, guaranteed_gpus=2)
    TenantFactory(slug="other")
    now = timezone.now()
    job(
        lab,
        user,
        submitted=now - timedelta(hours=3),
        started=now - timedelta(hours=2),
        finished=now - timedelta(hours=1),
    )


@pytest.fixture
def page(live_server: Any, rows: None, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """A headless chromium page on the live server, signed in as the staff user."""
    if not CHROMIUM.exists():
        pytest.skip(f"{CHROMIUM} is missing: `make test` installs Debian's chromium (as root)")
    from playwright.sync_api import sync_playwright

    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")  # see ``page`` in conftest
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), headless=True, args=CHROMIUM_ARGS)
        try:
            context = browser.new_context(base_url=live_server.url, viewport={"width": 1366, "height": 900})
            context.set_default_timeout(TIMEOUT_MS)
            tab = context.new_page()
            tab.goto("/accounts/login/")
            tab.fill("input[name=username]", USERNAME)
            tab.fill("input[name=password]", PASSWORD)
            tab.click("main form button[type=submit]")
            tab.wait_for_url(re.compile(r"/jobs/$"))
            yield tab
        finally:
            browser.close()


def card_rows(page: Any) -> list[int]:
    """How many summary cards sit on each row of the grid, top to bottom."""
    tops = page.eval_on_selector_all(
        "[data-testid=dashboard-cards] > .card", "cards => cards.map(c => Math.round(c.getBoundingClientRect().top))"
    )
    return [tops.count(top) for top in sorted(set(tops))]


@pytest.mark.parametrize(("width", "layout"), [(1366, [3, 4]), (800, [3, 2, 2]), (390, [1] * 7)])
def test_no_summary_card_is_left_alone_on_a_row(page: Any, width: int, layout: list[int]) -> None:
    errors = collect_errors(page)
    page.set_viewport_size({"width": width, "height": 900})
    page.goto("/dashboard/?window=24h")
    page.locator("[data-testid=dashboard-cards]").wait_for()
    assert card_rows(page) == layout
    assert not errors, "\n".join(errors)


def test_the_settings_of_quota_policies_show_once_one_is_ticked(page: Any) -> None:
    from playwright.sync_api import expect

    errors = collect_errors(page)
    page.goto("/whatif/")
    fair_share = page.locator("input[name=fair_share_half_life_hours]")
    guarantee = page.locator("input[name=quota_lab_guaranteed_gpus]")
    hint = page.locator("[data-quota-hidden-note]")
    # fifo runs live and is ticked: no +quota policy, so nothing that only +quota reads is offered, and a line says
    # how to get it; the caps, which every policy reads, stay.
    expect(page.locator("input[name=policies][value=fifo]")).to_be_checked()
    expect(fair_share).to_be_hidden()
    expect(guarantee).to_be_hidden()
    expect(hint).to_be_visible()
    expect(page.locator("input[name=quota_lab_gpu_cap]")).to_be_visible()

    page.get_by_label("fifo+quota", exact=True).check()
    expect(fair_share).to_be_visible()
    expect(guarantee).to_be_visible()
    expect(guarantee).to_have_value("2")
    expect(hint).to_be_hidden()

    page.get_by_label("fifo+quota", exact=True).uncheck()
    expect(fair_share).to_be_hidden()
    assert not errors, "\n".join(errors)
