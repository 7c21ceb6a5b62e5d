"""The tenants page: quotas, GPUs held and borrowed, and the fair-share standing in words, for members and staff;
what it says when the live policy has no quota layer or fair share is off."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.test import Client
from django.utils import timezone

from portal.tenants.models import Quota
from portal.tenants.views import half_life_words, ordinal
from tests.factories import UserFactory
from tests.fixtures import World
from tests.portal.tenants.history import held

DAY = timedelta(days=1)


@pytest.fixture
def contended(world: World, settings) -> None:  # noqa: ANN001
    """fifo+quota with a week's half-life; lab (2 guaranteed) ran 2 GPUs yesterday and runs 3 now, other (2
    guaranteed) used nothing: lab has all the usage with half the guarantees, so it used 2.0x its share."""
    settings.CORRAL_POLICY = "fifo+quota"
    settings.CORRAL_FAIR_SHARE_HALF_LIFE_HOURS = 168
    Quota.objects.filter(tenant=world.tenant).update(guaranteed_gpus=2)
    Quota.objects.filter(tenant=world.other_tenant).update(guaranteed_gpus=2)
    now = timezone.now()
    held(world.alice, 2, now - 2 * DAY, now - DAY)
    held(world.bob, 3, now - DAY / 2, None)


def page(client: Client, user) -> str:  # noqa: ANN001
    client.force_login(user)
    response = client.get("/tenants/")
    assert response.status_code == 200
    return response.content.decode()


def row(html: str, slug: str) -> str:
    """The table row of ``slug``."""
    start = html.index(f'<tr data-tenant="{slug}">')
    return html[start : html.index("</tr>", start)]


def test_the_page_needs_login(world: World, client: Client) -> None:
    response = client.get("/tenants/")
    assert response.status_code == 302 and response["Location"].startswith("/accounts/login/")


@pytest.mark.usefixtures("contended")
def test_a_member_sees_their_tenant_in_words(world: World, client: Client) -> None:
    html = page(client, world.alice)
    assert 'href="/tenants/"' in html  # the nav link
    assert 'data-tenant="other"' not in html
    lab = row(html, "lab")
    assert "3 GPUs: 2 within its guarantee, borrows 1" in lab
    assert "1 running, 0 pending" in lab
    assert "used 2.0× its share over the last week" in lab
    assert "borrows 2nd of 2" in lab
    assert "100 % of all tenants&#x27; usage; its share is 50 %" in lab
    assert "Live policy: <b>fifo+quota</b>" in html
    assert "half as much after a week" in html and "never preempts a running job" in html


@pytest.mark.usefixtures("contended")
def test_the_other_tenant_and_staff(world: World, client: Client) -> None:
    other = row(page(client, world.eve), "other")
    assert (
        "no GPUs" in other
        and "0 GPU-hours" in other
        and "used no GPUs over the last week" in other
        and "borrows 1st of 2" in other
    )
    staff = UserFactory(username="root", is_staff=True)
    html = page(Client(), staff)
    assert 'data-tenant="lab"' in html and 'data-tenant="other"' in html


@pytest.mark.usefixtures("contended")
def test_a_policy_without_the_quota_layer_says_so(world: World, client: Client, settings) -> None:  # noqa: ANN001
    settings.CORRAL_POLICY = "fifo"
    html = page(client, world.alice)
    assert "Guarantees and fair share are not in effect under the live policy, <b>fifo</b>" in html
    assert "<code>CORRAL_POLICY=fifo+quota</code> turns them on" in html
    assert "would borrow 2nd of 2" in row(html, "lab")


@pytest.mark.usefixtures("contended")
def test_fair_share_off_hides_usage(world: World, client: Client, settings) -> None:  # noqa: ANN001
    settings.CORRAL_FAIR_SHARE_HALF_LIFE_HOURS = 0
    html = page(client, world.alice)
    assert "Fair share is off" in html
    assert "Recent usage" not in html and "its share over" not in html and "borrows 2nd" not in html
    assert "3 GPUs: 2 within its guarantee, borrows 1" in row(html, "lab")


def test_tenants_without_guarantees_have_no_share(world: World, client: Client, settings) -> None:  # noqa: ANN001
    settings.CORRAL_POLICY = "fifo+quota"
    settings.CORRAL_FAIR_SHARE_HALF_LIFE_HOURS = 24
    held(world.eve, 1, timezone.now() - DAY, None)
    other = row(page(client, world.eve), "other")
    assert "1 GPU, all borrowed" in other
    assert "has no guaranteed GPUs, so no share" in other
    assert "after every tenant with guaranteed GPUs" in other


def test_a_user_without_tenants_gets_the_empty_state(world: World, client: Client) -> None:
    html = page(client, UserFactory(username="loner"))
    assert "You belong to no tenant yet" in html and "<tr data-tenant" not in html


def test_the_page_has_a_query_budget(world: World, client: Client, django_assert_max_num_queries) -> None:  # noqa: ANN001
    client.force_login(world.alice)
    with django_assert_max_num_queries(10):
        assert client.get("/tenants/").status_code == 200


@pytest.mark.parametrize(("n", "words"), [(1, "1st"), (2, "2nd"), (3, "3rd"), (4, "4th"), (11, "11th"), (22, "22nd")])
def test_ordinal(n: int, words: str) -> None:
    assert ordinal(n) == words


@pytest.mark.parametrize(
    ("hours", "words"),
    [
        (168, "a week"),
        (336, "2 weeks"),
        (24, "a day"),
        (72, "3 days"),
        (12, "12 hours"),
        (1, "an hour"),
        (1.5, "1.5 hours"),
    ],
)
def test_half_life_words(hours: float, words: str) -> None:
    assert half_life_words(hours) == words
