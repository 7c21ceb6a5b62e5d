"""The site's own answers outside any app: the favicon browsers ask for by themselves, and a refused form (CSRF)
or page (403) in the site's layout with a reason, never Django's bare "Forbidden (403)". Ref: #18"""

from __future__ import annotations

import pytest
from django.test import Client

pytestmark = pytest.mark.usefixtures("world")

#: What Django's own 403 pages say (the CSRF one, and the fallback without a 403.html) and ours must not.
BARE_403 = (b"Forbidden <span>(403)</span>", b"CSRF verification failed. Request aborted.", b"<h1>403 Forbidden</h1>")


def _styled_refusal(content: bytes) -> None:
    assert b"Not allowed" in content, content[:500]
    assert b"corral.css" in content  # the site's layout
    assert b'href="/"' in content  # a way back
    for bare in BARE_403:
        assert bare not in content, bare


def test_favicon_ico_redirects_to_the_static_icon_which_is_served() -> None:
    client = Client()  # no login: a browser asks before anyone signs in
    response = client.get("/favicon.ico")
    assert response.status_code == 301
    assert response["Location"] == "/static/favicon.ico"
    icon = client.get(response["Location"])  # WhiteNoise, as in the demo (debug off)
    assert icon.status_code == 200
    body = b"".join(icon.streaming_content) if icon.streaming else icon.content
    assert body[:4] == b"\x00\x00\x01\x00"  # an ICO file's header
    assert client.head("/favicon.ico").status_code == 301
    assert client.post("/favicon.ico").status_code == 405


def test_every_page_links_its_icons(client: Client) -> None:
    for page in (client.get("/accounts/login/"), client.get("/no/such/page/")):
        assert b'<link rel="icon" href="/static/favicon.ico"' in page.content
        assert b'<link rel="icon" href="/static/favicon.svg" type="image/svg+xml">' in page.content
    svg = client.get("/static/favicon.svg")
    assert svg.status_code == 200 and svg["Content-Type"].startswith("image/svg+xml")


def test_a_form_refused_by_its_csrf_check_is_the_sites_403() -> None:
    browser = Client(enforce_csrf_checks=True)
    response = browser.post("/accounts/login/", {"username": "alice", "password": "pw"})  # no token, no cookie
    assert response.status_code == 403
    _styled_refusal(response.content)
    assert b"security check failed" in response.content and b"Nothing was changed" in response.content
    assert b'href="/accounts/login/">Sign in</a>' in response.content


def test_a_signed_in_form_with_a_stale_token_is_the_sites_403_too() -> None:
    browser = Client(enforce_csrf_checks=True)
    assert browser.login(username="alice", password="pw")
    browser.get("/jobs/")  # the CSRF cookie is set
    response = browser.post("/accounts/logout/", {"csrfmiddlewaretoken": "x" * 64})
    assert response.status_code == 403
    _styled_refusal(response.content)
    assert b"security check failed" in response.content
    assert b"Log out" in response.content  # rendered with the request: the signed-in top bar


def test_whatif_refuses_a_member_with_the_reason_and_a_way_back(client: Client) -> None:
    assert client.login(username="alice", password="pw")
    response = client.get("/whatif/")
    assert response.status_code == 403
    _styled_refusal(response.content)
    assert b"What-if replays are for admins" in response.content
    assert b"Log out" in response.content  # the usual top bar: the member can go on from here


def test_releasing_fenced_gpus_as_a_member_is_the_sites_403(client: Client) -> None:
    assert client.login(username="alice", password="pw")
    response = client.post("/nodes/n1/release-fenced/")
    assert response.status_code == 403
    _styled_refusal(response.content)
    assert b"Only an administrator can release" in response.content
