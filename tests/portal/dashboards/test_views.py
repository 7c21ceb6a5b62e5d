"""The dashboard page: login, the nav link, the live fragment htmx polls, the charts' JSON, the empty state, and
readable answers (never a 500) to a bad window or a tenant the user cannot see."""

from __future__ import annotations

import json
import re
from datetime import timedelta

import pytest
from django.contrib.auth.models import AbstractBaseUser
from django.test import Client
from django.utils import timezone

from portal.telemetry.models import RollupPeriod
from tests.factories import UserFactory
from tests.fixtures import World
from tests.portal.dashboards.rows import H, allocate, gpu, job, rollups

HTMX = {"HTTP_HX_REQUEST": "true"}
PLOTLY = "/static/vendor/plotly/plotly.min.js"


@pytest.fixture
def history(world: World) -> None:
    """A job of each tenant that ran an hour on a GPU at 50 % (1-minute and 1-hour rollups both)."""
    now = timezone.now()
    start = now.replace(minute=0, second=0, microsecond=0) - 2 * H
    for tenant, user, uuid in ((world.tenant, world.alice, "GPU-n1-0"), (world.other_tenant, world.eve, "GPU-n2-0")):
        j = job(tenant, user, submitted=start - H, started=start, finished=start + H, name=f"job-of-{user}")
        allocate(j, gpu(uuid), start=start, end=start + H)
        rollups(gpu(uuid), start, [50.0])
        rollups(gpu(uuid), start, [50.0] * 60, period=RollupPeriod.MINUTE)


def _login(client: Client, user: AbstractBaseUser) -> Client:
    client.force_login(user)
    return client


def _figures(content: bytes) -> dict[str, dict[str, object]]:
    found = re.search(rb'<script id="dashboard-figures" type="application/json">(.*?)</script>', content, re.S)
    assert found, "no charts JSON in the page"
    figures: dict[str, dict[str, object]] = json.loads(found.group(1))
    return figures


def test_a_visitor_is_sent_to_log_in(db: None, client: Client) -> None:
    response = client.get("/dashboard/")
    assert response.status_code == 302 and response["Location"].startswith("/accounts/login/")


def test_the_page_polls_its_fragment_and_embeds_the_charts(world: World, history: None, client: Client) -> None:
    page = _login(client, world.alice).get("/dashboard/")
    html = page.content.decode()
    assert page.status_code == 200 and "<html" in html
    assert 'href="/dashboard/"' in html  # in the nav
    # No window asked for: the shortest that holds the jobs, submitted 3 to 4 hours ago (#18).
    assert 'hx-get="/dashboard/?window=6h"' in html and 'hx-trigger="every 30s"' in html
    assert f'src="{PLOTLY}"' in html and 'src="/static/dashboard.js"' in html and "cdn" not in html.lower()
    assert 'data-testid="tenant-table"' in html and ">lab</a>" in html and "alice" in html
    figures = _figures(page.content)
    assert set(figures) == {"utilization", "usage", "queue"}
    assert all(f["data"] for f in figures.values())
    assert 'data-chart="utilization"' in html and "No job waited in this window." in html


def test_the_htmx_fragment_is_the_stats_alone(
    world: World,
    history: None,
    client: Client,
    django_assert_max_num_queries,  # noqa: ANN001
) -> None:
    _login(client, world.alice)
    with django_assert_max_num_queries(19):  # 18, and one to learn whether the reader may see the idle-GPU panel
        fragment = client.get("/dashboard/?window=24h", **HTMX)
    html = fragment.content.decode()
    assert fragment.status_code == 200 and "<html" not in html and "<nav" not in html
    assert 'data-testid="dashboard-cards"' in html and 'data-testid="user-table"' in html
    assert "last 24 hours" in html and set(_figures(fragment.content)) == {"utilization", "usage", "queue"}
    assert "No job waited in this window." in html


def test_a_member_never_sees_another_tenant(world: World, history: None, client: Client) -> None:
    html = _login(client, world.alice).get("/dashboard/?window=30d").content.decode()
    assert ">eve<" not in html and ">other</a>" not in html
    assert '<option value="other"' not in html
    usage = _figures(_login(client, world.alice).get("/dashboard/").content)["usage"]
    assert usage["data"][0]["x"] == ["lab"]  # type: ignore[index]


def test_staff_see_every_tenant_and_can_pick_one(world: World, history: None, client: Client) -> None:
    root = UserFactory(username="root", is_staff=True)
    _login(client, root)
    html = client.get("/dashboard/").content.decode()
    assert ">lab</a>" in html and ">other</a>" in html and ">eve<" in html
    one = client.get("/dashboard/?tenant=other&window=24h")
    assert one.status_code == 200
    text = one.content.decode()
    assert ">other</a>" in text and ">lab</a>" not in text and "alice" not in text
    assert 'hx-get="/dashboard/?window=24h&amp;tenant=other"' in text


def test_a_bad_window_is_said_and_the_default_shown(world: World, history: None, client: Client) -> None:
    _login(client, world.alice)
    for response in (client.get("/dashboard/?window=1y"), client.get("/dashboard/?window=1y", **HTMX)):
        assert response.status_code == 200
    page = client.get("/dashboard/?window=%3Cscript%3E")
    html = page.content.decode()
    assert page.status_code == 200 and "There is no window “&lt;script&gt;”" in html and "<script>" not in html
    assert "choose 1h, 6h, 24h, 7d, 30d" in html and "last 6 hours" in html and 'data-testid="tenant-table"' in html


def test_a_tenant_the_user_cannot_see_gives_a_message_and_no_data(world: World, history: None, client: Client) -> None:
    _login(client, world.alice)
    for slug in ("other", "no-such-tenant"):
        for response in (client.get(f"/dashboard/?tenant={slug}"), client.get(f"/dashboard/?tenant={slug}", **HTMX)):
            html = response.content.decode()
            assert response.status_code == 400
            assert f"You have no tenant “{slug}”" in html
            assert "dashboard-figures" not in html and "tenant-table" not in html and ">eve<" not in html
    assert client.get("/dashboard/?tenant=lab").status_code == 200


def test_an_empty_window_says_there_is_no_data_yet(world: World, client: Client) -> None:
    html = _login(client, world.alice).get("/dashboard/").content.decode()
    assert "No data yet for the last 24 hours." in html and "dashboard-figures" not in html  # no job: a day
    assert 'hx-trigger="every 30s"' in html  # and it keeps looking


def test_hours_without_telemetry_are_reported(world: World, client: Client) -> None:
    start = timezone.now().replace(minute=0, second=0, microsecond=0) - 3 * H
    j = job(world.tenant, world.alice, submitted=start, started=start, finished=start + 2 * H)
    allocate(j, gpu("GPU-n1-1"), start=start, end=start + 2 * H)
    html = _login(client, world.alice).get("/dashboard/").content.decode()
    assert "no telemetry for 2.00 GPU-hours" in html
    assert re.search(r'data-testid="stat-efficiency">–<', html)  # nothing measured: no efficiency, not 0 %


def test_durations_print_as_people_write_them(world: World, client: Client) -> None:
    start = timezone.now() - timedelta(hours=5)
    job(world.tenant, world.alice, submitted=start, started=start, finished=start + timedelta(hours=1, minutes=30))
    html = _login(client, world.alice).get("/dashboard/").content.decode()
    assert ">1h 30m<" in html
