"""Sign-in through a real OpenID Connect provider (``provider.py``), end to end: users, memberships and staff from
its groups, and every way a sign-in can fail ending on a readable page. Ref: #18"""

from __future__ import annotations

import time
from typing import Any

import httpx
import pytest
from django.contrib.auth import get_user_model
from django.test import Client

from portal.accounts.models import ManagedMembership, OidcIdentity
from portal.tenants.models import Membership, Role
from tests.factories import MembershipFactory, TenantFactory, UserFactory
from tests.portal.accounts.conftest import at_provider, person, sign_in, start
from tests.portal.accounts.provider import Provider, new_key, replace_payload

pytestmark = pytest.mark.django_db


def roles(username: str) -> dict[str, str]:
    return dict(Membership.objects.filter(user__username=username).values_list("tenant__slug", "role"))


def signed_in_as(client: Client) -> str | None:
    user = client.get("/jobs/").wsgi_request.user
    return user.username if user.is_authenticated else None


def refused(response: Any, status: int, words: str) -> None:
    assert response.status_code == status
    text = response.content.decode()
    assert "Not signed in" in text and words in text, text


@pytest.fixture
def tenants() -> None:
    for slug in ("lab", "vision", "nlp"):
        TenantFactory(slug=slug)


def test_first_sign_in_creates_the_user_with_memberships_from_groups(
    provider: Provider, tenants: None, caplog: pytest.LogCaptureFixture
) -> None:
    provider.person = person("ada", groups=["corral-lab", "corral-vision-admin", "corral-ghost", "unrelated"])
    client = Client()
    response = sign_in(client, next_url="/nodes/")
    assert response.status_code == 302 and response["Location"] == "/nodes/"
    assert signed_in_as(client) == "ada"
    ada = get_user_model().objects.get(username="ada")
    assert (ada.email, ada.first_name, ada.is_staff, ada.has_usable_password()) == (
        "ada@example.org",
        "Ada",
        False,
        False,
    )
    assert roles("ada") == {"lab": Role.MEMBER, "vision": Role.ADMIN}  # no tenant "ghost": ignored, and said so
    assert "OIDC groups of ada name tenant 'ghost', which does not exist: ignored" in caplog.text
    assert ManagedMembership.objects.filter(membership__user=ada).count() == 2
    identity = OidcIdentity.objects.get(user=ada)
    assert (identity.issuer, identity.subject) == (provider.issuer, "sub-ada")
    # The real flow ran over HTTP: discovery, authorize (the browser), token, JWKS (the signature), userinfo.
    assert [path for _, path in provider.seen] == [
        "/.well-known/openid-configuration",
        "/authorize",
        "/token",
        "/jwks",
        "/userinfo",
    ]


def test_a_later_sign_in_follows_changed_groups_and_keeps_hand_made_memberships(
    provider: Provider, tenants: None
) -> None:
    provider.person = person("ada", groups=["corral-lab", "corral-vision"])
    sign_in(Client())
    ada = get_user_model().objects.get(username="ada")
    MembershipFactory(user=ada, tenant=TenantFactory(slug="nlp"), role=Role.ADMIN)  # an admin's grant, by hand

    provider.person = person("ada", groups=["corral-lab-admin", "corral-lab"], email="ada@lab.example.org")
    response = sign_in(Client())
    assert response.status_code == 302
    assert roles("ada") == {"lab": Role.ADMIN, "nlp": Role.ADMIN}  # vision removed, lab raised, nlp untouched
    assert get_user_model().objects.get(pk=ada.pk).email == "ada@lab.example.org"

    provider.person = person("ada", groups=[])
    sign_in(Client())
    assert roles("ada") == {"nlp": Role.ADMIN}
    assert get_user_model().objects.filter(username="ada").count() == 1


def test_the_staff_group_makes_staff_and_leaving_it_unmakes(provider: Provider) -> None:
    provider.person = person("root", groups=["corral-staff"])
    client = Client()
    sign_in(client)
    assert get_user_model().objects.get(username="root").is_staff
    assert client.get("/whatif/").status_code == 200  # a staff-only page

    provider.person = person("root", groups=[])
    sign_in(Client())
    assert not get_user_model().objects.get(username="root").is_staff


def test_the_user_is_found_by_subject_so_a_renamed_account_stays_one_account(provider: Provider) -> None:
    provider.person = person("ada")
    sign_in(Client())
    provider.person = person("ada", preferred_username="ada.lovelace")
    client = Client()
    sign_in(client)
    assert signed_in_as(client) == "ada.lovelace"
    assert get_user_model().objects.filter(username__startswith="ada").count() == 1


def test_a_local_account_with_the_same_name_is_not_taken_over(provider: Provider) -> None:
    UserFactory(username="ada", email="ada@example.org")
    client = Client()
    refused(sign_in(client), 403, "already exists here and is not linked")
    assert signed_in_as(client) is None
    assert not OidcIdentity.objects.exists()


def test_a_local_account_linked_by_an_admin_signs_in_as_itself(provider: Provider) -> None:
    ada = UserFactory(username="ada")
    OidcIdentity.objects.create(user=ada, issuer=provider.issuer, subject="sub-ada")
    client = Client()
    sign_in(client)
    assert signed_in_as(client) == "ada"
    assert get_user_model().objects.get(pk=ada.pk).check_password("pw")  # the local password still works


def test_sign_out_after_signing_in(provider: Provider) -> None:
    client = Client()
    sign_in(client)
    assert signed_in_as(client) == "ada"
    response = client.post("/accounts/logout/")
    assert response.status_code == 302
    assert signed_in_as(client) is None


def test_a_disabled_account_is_not_signed_in(provider: Provider) -> None:
    sign_in(Client())
    get_user_model().objects.filter(username="ada").update(is_active=False)
    client = Client()
    refused(sign_in(client), 403, "disabled")
    assert signed_in_as(client) is None


# --- Tokens that must not be accepted ---------------------------------------------------------------------------


def test_an_id_token_signed_with_another_key_is_refused(provider: Provider) -> None:
    provider.sign_with = new_key(kid=provider.key.kid)  # same key id, not the published key
    client = Client()
    refused(sign_in(client), 403, "could not be verified")
    assert signed_in_as(client) is None
    assert not get_user_model().objects.filter(username="ada").exists()


def test_an_id_token_altered_after_signing_is_refused(provider: Provider) -> None:
    provider.after_signing = lambda token: replace_payload(token, sub="sub-root", preferred_username="root")
    client = Client()
    refused(sign_in(client), 403, "could not be verified")
    assert signed_in_as(client) is None


def test_an_expired_id_token_is_refused(provider: Provider) -> None:
    now = int(time.time())
    provider.id_token_changes = {"iat": now - 900, "exp": now - 600}
    client = Client()
    refused(sign_in(client), 403, "could not be verified")
    assert signed_in_as(client) is None


@pytest.mark.parametrize(
    "changes",
    [{"nonce": "someone-elses-nonce"}, {"aud": "another-app"}, {"iss": "http://127.0.0.1:1/elsewhere"}],
    ids=["wrong-nonce", "wrong-audience", "wrong-issuer"],
)
def test_an_id_token_for_another_sign_in_or_client_is_refused(provider: Provider, changes: dict[str, str]) -> None:
    provider.id_token_changes = changes
    client = Client()
    refused(sign_in(client), 403, "could not be verified")
    assert signed_in_as(client) is None


def test_a_callback_with_a_state_this_browser_did_not_start_is_refused(provider: Provider) -> None:
    client = Client()
    callback = at_provider(start(client))
    forged = callback.replace("state=", "state=forged")
    refused(client.get(forged), 400, "stale or was not started from this browser")
    # Another browser (no sign-in started in its session) presenting the genuine callback.
    refused(Client().get(callback), 400, "did not complete")
    assert signed_in_as(client) is None


def test_a_callback_used_twice_signs_in_once(provider: Provider) -> None:
    client = Client()
    callback = at_provider(start(client))
    assert client.get(callback).status_code == 302
    refused(client.get(callback), 400, "stale")  # its state was used up
    assert [path for _, path in provider.seen].count("/token") == 1


def test_denied_consent_shows_why(provider: Provider) -> None:
    provider.deny = "access_denied"
    client = Client()
    refused(sign_in(client), 403, "cancelled or not allowed at the identity provider")
    assert signed_in_as(client) is None


# --- The provider down ------------------------------------------------------------------------------------------


def test_an_unreachable_provider_gives_a_readable_page_and_local_login_still_works(
    provider: Provider, settings: Any
) -> None:
    settings.CORRAL_OIDC_ISSUER = "http://127.0.0.1:9"  # discard port: nothing listens
    client = Client()
    refused(client.get("/accounts/oidc/start/"), 503, "could not be reached")
    login = client.get("/accounts/login/")
    assert "Sign in with Test IdP" in login.content.decode()  # the page itself never calls the provider
    UserFactory(username="local")
    assert client.post("/accounts/login/", {"username": "local", "password": "pw"}).status_code == 302
    assert signed_in_as(client) == "local"


def test_a_provider_that_goes_down_during_sign_in_gives_a_readable_page(provider: Provider, settings: Any) -> None:
    client = Client()
    callback = at_provider(start(client))
    settings.CORRAL_OIDC_TOKEN_ENDPOINT = "http://127.0.0.1:9/token"  # the token endpoint stops answering
    refused(client.get(callback), 503, "could not be reached")
    assert signed_in_as(client) is None


def test_a_refused_code_gives_a_readable_page(provider: Provider) -> None:
    client = Client()
    callback = at_provider(start(client))
    provider.codes.clear()  # the provider no longer knows the code (expired)
    refused(client.get(callback), 403, "refused to complete the sign-in")


def test_the_provider_answers_real_http(provider: Provider) -> None:
    """The provider the tests use is a real server: its discovery document names its own endpoints."""
    document = httpx.get(f"{provider.issuer}/.well-known/openid-configuration", timeout=5).json()
    assert document["jwks_uri"] == f"{provider.issuer}/jwks"
    assert httpx.get(document["jwks_uri"], timeout=5).json()["keys"][0]["kid"] == provider.key.kid
