"""Who may scrape ``/metrics``: its labels name every tenant, job and node, so production needs a token or an
allowed network, and says how to configure one when neither is set. Ref: #15"""

from __future__ import annotations

import pytest
from django.test import Client

pytestmark = pytest.mark.django_db


def _get(headers: dict[str, str] | None = None, address: str = "127.0.0.1") -> tuple[int, str]:
    response = Client(REMOTE_ADDR=address).get("/metrics", headers=headers or {})
    return response.status_code, response.content.decode()


def test_outside_production_it_stays_open_unless_a_token_is_set(settings) -> None:  # noqa: ANN001
    settings.PRODUCTION, settings.CORRAL_METRICS_TOKEN, settings.CORRAL_METRICS_ALLOW_FROM = False, "", []
    status, body = _get()
    assert status == 200 and "corral_jobs" in body


def test_production_without_a_token_or_networks_refuses_and_says_how_to_configure(settings) -> None:  # noqa: ANN001
    settings.PRODUCTION, settings.CORRAL_METRICS_TOKEN, settings.CORRAL_METRICS_ALLOW_FROM = True, "", []
    status, body = _get({"Authorization": "Bearer anything"})
    assert status == 403 and "corral_jobs" not in body
    assert "CORRAL_METRICS_TOKEN" in body and "CORRAL_METRICS_ALLOW_FROM" in body


def test_production_with_a_token_needs_it(settings) -> None:  # noqa: ANN001
    settings.PRODUCTION, settings.CORRAL_METRICS_TOKEN, settings.CORRAL_METRICS_ALLOW_FROM = True, "s3cret", []
    assert _get()[0] == 401
    assert _get({"Authorization": "Bearer nope"})[0] == 401
    assert _get({"Authorization": "Bearer s3cret"})[0] == 200


def test_production_with_networks_lets_in_only_their_addresses(settings) -> None:  # noqa: ANN001
    settings.PRODUCTION, settings.CORRAL_METRICS_TOKEN = True, ""
    settings.CORRAL_METRICS_ALLOW_FROM = ["10.0.0.0/8", "fd00::/8"]
    assert _get(address="10.1.2.3")[0] == 200
    assert _get(address="fd00::7")[0] == 200
    status, body = _get(address="192.0.2.1", headers={"X-Forwarded-For": "10.1.2.3"})  # a header is no address
    assert status == 403 and "CORRAL_METRICS_ALLOW_FROM" in body


def test_a_token_or_an_allowed_network_either_suffices(settings) -> None:  # noqa: ANN001
    settings.PRODUCTION, settings.CORRAL_METRICS_TOKEN = True, "s3cret"
    settings.CORRAL_METRICS_ALLOW_FROM = ["10.0.0.0/8"]
    assert _get(address="10.1.2.3")[0] == 200
    assert _get({"Authorization": "Bearer s3cret"}, address="192.0.2.1")[0] == 200
    assert _get(address="192.0.2.1")[0] == 401
