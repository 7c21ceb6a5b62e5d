"""``/api/v1/account/notifications/``: read, replace and change your settings, 400 with field messages for bad
input, send yourself a test; always your own. Ref: #18 (notifications)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from rest_framework.test import APIClient

from portal.notifications.models import DeliveryState, Notification, NotificationSettings
from portal.notifications.services import notifications_sweep
from tests.fixtures import World
from tests.portal.notifications.conftest import finish, run, wants
from tests.portal.notifications.webhook import Receiver

pytestmark = pytest.mark.django_db

URL = "/api/v1/account/notifications/"
DEFAULTS = {
    "email_enabled": False,
    "email": "",
    "webhook_url": "",
    "on_succeeded": True,
    "on_failed": True,
    "on_cancelled": True,
    "on_requeued": True,
    "on_long_wait": True,
    "long_wait_minutes": 60,
    "recent": [],
}


def test_without_settings_you_read_the_defaults_which_send_nothing(api: APIClient) -> None:
    response = api.get(URL)
    assert response.status_code == 200
    assert response.json() == DEFAULTS


def test_put_replaces_and_patch_changes(api: APIClient, world: World, receiver: Receiver) -> None:
    response = api.put(
        URL, {"webhook_url": receiver.url, "on_cancelled": False, "long_wait_minutes": 15}, format="json"
    )
    assert response.status_code == 200
    assert response.json() == {
        **DEFAULTS,
        "webhook_url": receiver.url,
        "on_cancelled": False,
        "long_wait_minutes": 15,
    }
    saved = NotificationSettings.objects.get(user=world.alice)
    assert saved.long_wait == timedelta(minutes=15)
    response = api.patch(URL, {"email_enabled": True}, format="json")
    assert response.json()["email_enabled"] is True
    assert response.json()["long_wait_minutes"] == 15  # kept
    assert response.json()["webhook_url"] == receiver.url
    response = api.put(URL, {"on_failed": False}, format="json")  # PUT: what is left out takes its default
    assert response.json() == {**DEFAULTS, "on_failed": False}


@pytest.mark.parametrize(
    ("body", "field", "message"),
    [
        ({"webhook_url": "javascript:alert(1)"}, "webhook_url", "Enter an http:// or https:// address"),
        ({"webhook_url": "http://"}, "webhook_url", "The address names no host"),
        ({"webhook_url": "https://x.org/" + "a" * 500}, "webhook_url", "to 500 characters"),
        ({"webhook_url": 12}, "webhook_url", "Enter an http:// or https:// address"),
        ({"webhook_url": "http://169.254.169.254/latest/meta-data/"}, "webhook_url", "sends no webhooks to 169.254"),
        ({"webhook_url": "http://[fe80::1]/hook"}, "webhook_url", "sends no webhooks to fe80::1"),
        ({"long_wait_minutes": 0}, "long_wait_minutes", "Enter a whole number of minutes from 1 to 43,200"),
        ({"long_wait_minutes": 43_201}, "long_wait_minutes", "Enter a whole number of minutes from 1 to 43,200"),
        ({"long_wait_minutes": "an hour"}, "long_wait_minutes", "Enter a whole number of minutes from 1 to 43,200"),
        ({"on_failed": "perhaps"}, "on_failed", "Must be a valid boolean."),
    ],
)
def test_bad_input_is_a_400_naming_the_field(
    api: APIClient, world: World, body: dict[str, object], field: str, message: str
) -> None:
    for method in (api.put, api.patch):
        response = method(URL, body, format="json")
        assert response.status_code == 400, response.content
        assert list(response.json()) == [field]
        assert message in response.json()[field][0]
    assert not NotificationSettings.objects.exists()


def test_the_answer_lists_your_latest_notifications(api: APIClient, world: World, receiver: Receiver) -> None:
    wants(world.alice, webhook=receiver.url)
    wants(world.bob, webhook=receiver.url)
    job = finish(run(world.alice), exit_code=1)
    finish(run(world.bob, name="bobs"), exit_code=1)
    notifications_sweep()
    recent = api.get(URL).json()["recent"]
    assert len(recent) == 1  # bob's is not yours
    assert recent[0] | {"id": 0, "created_at": ""} == {
        "id": 0,
        "created_at": "",
        "topic": "failed",
        "channel": "webhook",
        "target": "webhook at 127.0.0.1",
        "job": job.pk,
        "text": f"Job {job.pk} (train-resnet) failed: rank 0: exit code 1 — http://127.0.0.1:8000/jobs/{job.pk}/",
        "state": "queued",
        "attempts": 0,
        "last_error": "",
        "sent_at": None,
    }


def test_post_test_sends_one_and_answers_202(
    api: APIClient, world: World, receiver: Receiver, eager: None, django_capture_on_commit_callbacks
) -> None:
    api.put(URL, {"webhook_url": receiver.url}, format="json")
    with django_capture_on_commit_callbacks(execute=True):
        response = api.post(f"{URL}test/")
    assert response.status_code == 202
    assert [(n["topic"], n["channel"], n["state"]) for n in response.json()] == [("test", "webhook", "queued")]
    assert receiver.bodies[0]["event"] == "test"
    assert Notification.objects.get().state == DeliveryState.SENT


def test_post_test_without_a_channel_is_a_409(api: APIClient) -> None:
    response = api.post(f"{URL}test/")
    assert response.status_code == 409
    assert response.json() == {
        "detail": "Nothing to send a test to: turn on email or give a webhook URL, and save first.",
        "code": "conflict",
    }


def test_no_credentials_no_settings(world: World) -> None:
    client = APIClient()
    assert client.get(URL).status_code in (401, 403)
    assert client.put(URL, {"email_enabled": True}, format="json").status_code in (401, 403)
    assert client.post(f"{URL}test/").status_code in (401, 403)


def test_the_schema_documents_the_endpoints(api: APIClient) -> None:
    paths = api.get("/api/v1/schema/", HTTP_ACCEPT="application/vnd.oai.openapi+json").json()["paths"]
    assert set(paths[URL]) >= {"get", "put", "patch"}
    assert {"202", "409"} <= set(paths[f"{URL}test/"]["post"]["responses"])
    assert "400" in paths[URL]["put"]["responses"]
