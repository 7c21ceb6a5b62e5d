"""The login page with single sign-on off (the demo) and on; the settings check. Ref: #18"""

from __future__ import annotations

from typing import Any

import pytest
from django.core.management import call_command
from django.core.management.base import SystemCheckError
from django.test import Client

from tests.factories import UserFactory
from tests.portal.accounts.provider import Provider

pytestmark = pytest.mark.django_db


def test_without_single_sign_on_the_page_is_the_password_form(client: Client) -> None:
    page = client.get("/accounts/login/?next=/nodes/").content.decode()
    assert "Sign in with" not in page and 'name="password"' in page
    UserFactory(username="local")
    response = client.post("/accounts/login/", {"username": "local", "password": "pw", "next": "/nodes/"})
    assert response.status_code == 302 and response["Location"] == "/nodes/"


@pytest.mark.parametrize("path", ["/accounts/oidc/start/", "/accounts/oidc/callback/?code=x&state=y"])
def test_without_single_sign_on_its_addresses_say_so(client: Client, path: str) -> None:
    response = client.get(path)
    assert response.status_code == 404
    assert "Single sign-on is not set up on this site." in response.content.decode()


def test_with_single_sign_on_the_page_offers_the_provider_and_keeps_passwords(provider: Provider) -> None:
    page = Client().get("/accounts/login/?next=/nodes/").content.decode()
    assert "Sign in with Test IdP" in page
    assert 'href="/accounts/oidc/start/?next=/nodes/"' in page
    assert 'name="password"' in page
    assert provider.seen == []  # showing the page costs the provider nothing


def test_a_password_form_posted_with_a_code_in_its_url_never_reaches_the_provider(provider: Provider) -> None:
    UserFactory(username="local")
    response = Client().post("/accounts/login/?code=stolen&state=x", {"username": "local", "password": "wrong"})
    assert response.status_code == 200 and "Your username and password didn't match" in response.content.decode()
    assert provider.seen == []


def test_the_api_token_still_works_with_single_sign_on_on(provider: Provider) -> None:
    UserFactory(username="local")
    answer = Client().post("/api/v1/auth/token/", {"username": "local", "password": "pw"})
    assert answer.status_code == 200, answer.content
    token = answer.json()["token"]
    assert Client().get("/api/v1/jobs/", HTTP_AUTHORIZATION=f"Token {token}").status_code == 200


def test_a_group_mapping_that_cannot_be_read_fails_the_checks(settings: Any) -> None:
    settings.CORRAL_OIDC_TENANT_GROUPS = "corral-{tenant}=owner"
    with pytest.raises(SystemCheckError, match="CORRAL_OIDC_TENANT_GROUPS"):
        call_command("check")
