"""The profile page: the form, its readable errors, what it says without an email address, the test button, the
latest notifications (and their htmx refresh), and the link from the user menu. Ref: #18 (notifications)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.core import mail
from django.test import Client

from portal.notifications.models import DeliveryState, Notification, NotificationSettings
from portal.notifications.services import notifications_sweep
from tests.fixtures import World
from tests.portal.notifications.conftest import finish, run, wants
from tests.portal.notifications.webhook import Receiver

pytestmark = pytest.mark.django_db

PAGE = "/account/notifications/"
HTMX = {"HTTP_HX_REQUEST": "true"}
FORM = {
    "email_enabled": "on",
    "webhook_url": "",
    "on_succeeded": "on",
    "on_failed": "on",
    "on_requeued": "on",
    "on_long_wait": "on",
    "long_wait_minutes": "45",
}


@pytest.fixture
def alice(world: World, client: Client) -> Client:
    world.alice.email = "alice@example.org"
    world.alice.save()
    client.force_login(world.alice)
    return client


def test_the_page_needs_a_login(client: Client, world: World) -> None:
    response = client.get(PAGE)
    assert response.status_code == 302 and response["Location"].startswith("/accounts/login/")
    assert client.post(f"{PAGE}test/").status_code == 302


def test_every_page_links_to_it_from_the_user_menu(alice: Client) -> None:
    html = alice.get("/jobs/").content.decode()
    assert f'href="{PAGE}">Notifications</a>' in html


def test_a_new_user_sees_that_nothing_is_sent_yet(alice: Client) -> None:
    html = alice.get(PAGE).content.decode()
    assert "You have no notification settings yet, so nothing is sent." in html
    assert "Mail goes to alice@example.org" in html
    assert 'name="long_wait_minutes" value="60"' in html


def test_saving_the_form_stores_the_settings(alice: Client, world: World) -> None:
    response = alice.post(PAGE, FORM, follow=True)
    assert "Notification settings saved." in response.content.decode()
    saved = NotificationSettings.objects.get(user=world.alice)
    assert saved.email_enabled and saved.on_failed and not saved.on_cancelled
    assert saved.long_wait == timedelta(minutes=45)
    html = alice.get(PAGE).content.decode()
    assert 'name="long_wait_minutes" value="45"' in html
    assert "nothing is sent" not in html


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("webhook_url", "ftp://hooks.example.org/x", "Enter an http:// or https:// address"),
        ("webhook_url", "hooks.slack.com/services/x", "Enter an http:// or https:// address"),
        ("webhook_url", "https://", "The address names no host"),
        ("webhook_url", "https://hooks.example.org:99999/x", "Enter a whole http:// or https:// address"),
        ("long_wait_minutes", "0", "Enter a whole number of minutes from 1 to 43,200 (30 days)"),
        ("long_wait_minutes", "soon", "Enter a whole number of minutes from 1 to 43,200 (30 days)"),
        ("long_wait_minutes", "", "Enter a whole number of minutes from 1 to 43,200 (30 days)"),
    ],
)
def test_bad_input_gets_a_readable_error_next_to_it(
    alice: Client, world: World, field: str, value: str, message: str
) -> None:
    response = alice.post(PAGE, {**FORM, field: value})
    assert response.status_code == 200
    html = response.content.decode()
    assert f'id="id_{field}_error">{message}' in html
    assert not NotificationSettings.objects.filter(user=world.alice).exists()


def test_a_user_without_an_email_address_is_told_plainly(client: Client, world: World) -> None:
    client.force_login(world.bob)
    client.post(PAGE, FORM)
    html = client.get(PAGE).content.decode()
    assert "Your account has no email address, so no mail can be sent even with email on." in html
    response = client.post(f"{PAGE}test/", follow=True)
    assert "Nothing to send a test to: your account has no email address, and no webhook is set." in (
        response.content.decode()
    )
    assert not Notification.objects.exists()


def test_the_test_button_sends_to_every_saved_channel(
    alice: Client, world: World, receiver: Receiver, eager: None, django_capture_on_commit_callbacks
) -> None:
    alice.post(PAGE, {**FORM, "webhook_url": receiver.url})
    with django_capture_on_commit_callbacks(execute=True):
        response = alice.post(f"{PAGE}test/", follow=True)
    html = response.content.decode()
    assert "Test notification queued for alice@example.org and webhook at 127.0.0.1" in html
    assert mail.outbox[0].subject == "[Corral] Test notification for alice"
    assert receiver.bodies == [
        {
            "text": "Test notification for alice: job news will arrive here. — http://127.0.0.1:8000/account/notifications/",
            "job": None,
            "event": "test",
            "url": "http://127.0.0.1:8000/account/notifications/",
        }
    ]
    listed = html[html.index('data-testid="notify-recent"') :]
    assert "webhook at 127.0.0.1" in listed
    assert "/hooks/T000" not in listed  # a webhook's path is its secret: the list shows its host only
    assert set(Notification.objects.values_list("state", flat=True)) == {DeliveryState.SENT}


def test_the_test_button_refuses_a_get(alice: Client) -> None:
    assert alice.get(f"{PAGE}test/").status_code == 405


def test_the_latest_notifications_show_their_state_and_error(alice: Client, world: World, receiver: Receiver) -> None:
    wants(world.alice, webhook=receiver.url)
    job = finish(run(world.alice), exit_code=1)
    notifications_sweep()
    Notification.objects.update(attempts=2, last_error="the webhook answered 503 Service Unavailable")
    html = alice.get(PAGE).content.decode()
    assert f'<a href="/jobs/{job.pk}/">job {job.pk}</a> · Failed' in html
    assert "will try again; last try: the webhook answered 503 Service Unavailable" in html
    assert 'hx-trigger="every 3s"' in html  # one is still queued: the list refreshes itself
    partial = alice.get(PAGE, **HTMX)
    assert partial.templates[0].name == "notifications/partials/_recent.html"
    assert "<html" not in partial.content.decode()
    Notification.objects.update(state=DeliveryState.FAILED)
    html = alice.get(PAGE).content.decode()
    assert 'hx-trigger="every 3s"' not in html


def test_a_user_sees_only_their_own_notifications(client: Client, world: World, receiver: Receiver) -> None:
    wants(world.alice, webhook=receiver.url)
    finish(run(world.alice), exit_code=1)
    notifications_sweep()
    client.force_login(world.bob)
    html = client.get(PAGE).content.decode()
    assert "No notifications yet." in html
