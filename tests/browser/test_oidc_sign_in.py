"""Signing in with the site's identity provider in a real browser: the login page's button, the provider's redirect
and back, the top bar naming the person, sign-out; and consent denied at the provider ending on a readable page.
Ref: #18 (OIDC).

Debian's chromium driven by Playwright against pytest-django's live server and the tests' OpenID Connect provider
(tests/portal/accounts/provider.py, a real HTTP server on loopback); no worker or agent is needed, so this runs on
SQLite too. Skipped, with the reason, when chromium is missing.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest

from tests.browser.conftest import CHROMIUM, CHROMIUM_ARGS, TIMEOUT_MS, collect_errors
from tests.portal.accounts.provider import CLIENT_ID, CLIENT_SECRET, Provider, new_key, serve_provider

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True), pytest.mark.timeout(120)]


@pytest.fixture
def provider(live_server: Any, transactional_db: None, settings: Any) -> Iterator[Provider]:
    """The provider, a tenant its groups name, and the site set to use it; made before the browser starts (see
    ``page`` in conftest)."""
    from portal.accounts.provider import forget_discovery
    from tests.factories import TenantFactory

    TenantFactory(slug="lab")
    forget_discovery()
    person = {"sub": "sub-ada", "preferred_username": "ada", "email": "ada@example.org", "groups": ["corral-lab"]}
    callback = f"{live_server.url}/accounts/oidc/callback/"
    with serve_provider(Provider(key=new_key(), redirect_uris=[callback], person=person)) as running:
        settings.CORRAL_OIDC_ISSUER = running.issuer
        settings.CORRAL_OIDC_CLIENT_ID = CLIENT_ID
        settings.CORRAL_OIDC_CLIENT_SECRET = CLIENT_SECRET
        settings.CORRAL_OIDC_PROVIDER_NAME = "Test IdP"
        yield running
    forget_discovery()


@pytest.fixture
def page(live_server: Any, provider: Provider, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    if not CHROMIUM.exists():
        pytest.skip(f"{CHROMIUM} is missing: `make test` installs Debian's chromium (as root)")
    from playwright.sync_api import sync_playwright

    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")  # see ``page`` in conftest
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), headless=True, args=CHROMIUM_ARGS)
        try:
            context = browser.new_context(base_url=live_server.url, viewport={"width": 1366, "height": 900})
            context.set_default_timeout(TIMEOUT_MS)
            yield context.new_page()
        finally:
            browser.close()


def test_the_button_signs_in_through_the_provider_and_log_out_signs_out(page: Any, provider: Provider) -> None:
    from playwright.sync_api import expect

    errors = collect_errors(page)
    page.goto("/tenants/")
    expect(page).to_have_url(re.compile(r"/accounts/login/\?next=/tenants/$"))
    page.get_by_role("link", name="Sign in with Test IdP").click()
    expect(page).to_have_url(re.compile(r"/tenants/$"))  # to the provider and back, where we were going
    expect(page.locator(".whoami span")).to_have_text("ada")
    expect(page.locator("main")).to_contain_text("lab")  # the membership the group gave
    assert ("GET", "/authorize") in provider.seen  # the browser itself went to the provider

    page.get_by_role("button", name="Log out").click()
    expect(page).to_have_url(re.compile(r"/accounts/login/$"))
    expect(page.locator(".whoami")).to_have_count(0)
    assert errors == []


def test_consent_denied_at_the_provider_ends_on_a_readable_page(page: Any, provider: Provider) -> None:
    from playwright.sync_api import expect

    provider.deny = "access_denied"
    page.goto("/accounts/login/")
    page.get_by_role("link", name="Sign in with Test IdP").click()
    expect(page.get_by_role("heading", name="Not signed in")).to_be_visible()
    expect(page.get_by_role("alert")).to_have_text(re.compile("cancelled or not allowed at the identity provider"))
    page.get_by_role("link", name="Log in with a local account").click()
    expect(page).to_have_url(re.compile(r"/accounts/login/$"))
