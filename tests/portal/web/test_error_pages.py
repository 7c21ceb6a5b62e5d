"""The site's own error pages: friendly 400, 403, 404, 413 and 500 pages in the site's layout, never Django's
technical pages, which list every URL pattern and setting. API errors stay JSON. Ref: #15"""

from __future__ import annotations

import pytest
from django.core.exceptions import BadRequest
from django.test import Client, RequestFactory, override_settings
from django.views.defaults import bad_request, server_error

pytestmark = pytest.mark.usefixtures("world")

#: What Django's technical pages show and ours must not.
TECHNICAL = (b"URLconf", b"portal.urls", b"Django tried these URL patterns", b"DEBUG = True", b"Traceback")


def _friendly(content: bytes, heading: bytes) -> None:
    assert heading in content, content[:500]
    assert b'href="/"' in content  # a way home
    for leak in TECHNICAL:
        assert leak not in content, leak


def _login(client: Client, username: str) -> Client:
    assert client.login(username=username, password="pw")
    return client


@override_settings(DEBUG=False)
def test_a_missing_page_is_the_sites_404(client: Client) -> None:
    for who in (client, _login(Client(), "alice")):
        response = who.get("/no/such/page/")
        assert response.status_code == 404
        _friendly(response.content, b"Page not found")
        assert b"corral.css" in response.content  # the site's layout
    assert b"Log out" in _login(client, "alice").get("/nodes/nope/").content  # signed in: the usual top bar


@override_settings(DEBUG=False)
def test_a_refused_page_is_the_sites_403_with_its_reason(client: Client) -> None:
    response = _login(client, "alice").get("/whatif/")  # staff only
    assert response.status_code == 403
    _friendly(response.content, b"Not allowed")
    assert b"What-if replays are for admins" in response.content


def test_the_500_page_renders_with_no_request_context_at_all() -> None:
    # Django renders it with an empty context when something broke; it must not depend on what might have broken.
    response = server_error(RequestFactory().get("/"))
    assert response.status_code == 500
    _friendly(response.content, b"Something went wrong")


def test_the_400_page_renders_without_a_request_too() -> None:
    response = bad_request(RequestFactory().get("/"), exception=BadRequest("unreadable"))
    assert response.status_code == 400
    _friendly(response.content, b"Bad request")


def test_api_errors_stay_json(client: Client) -> None:
    response = _login(client, "alice").get("/api/v1/jobs/999999/")
    assert response.status_code == 404 and response["Content-Type"] == "application/json"


def test_nul_in_a_page_url_is_a_readable_page(client: Client) -> None:
    _login(client, "alice")
    missing = client.get("/nodes/n1%00/")
    assert missing.status_code == 404
    _friendly(missing.content, b"Page not found")
    refused = client.get("/jobs/?name=%00")
    assert refused.status_code == 400
    _friendly(refused.content, b"Bad request")
    assert b"query string holds a NUL character" in refused.content


def test_a_body_too_large_for_a_page_is_a_readable_413(client: Client) -> None:
    # Django's own check answered this with its 400 page (RequestDataTooBig).
    response = client.post("/accounts/login/", {"username": "alice", "password": "x" * 3_000_000})
    assert response.status_code == 413
    _friendly(response.content, b"Too much data")
    assert b"at most 2.5 MiB" in response.content
