"""The dashboard on a young cluster: with no window asked for it shows the shortest window that holds every job the
reader can see (at most a week), "Jobs waiting" is charted for every window from the jobs' own state changes, and
the seven summary cards never leave one alone on a row. Ref: #18 (item 10)."""

from __future__ import annotations

import json
import re
from datetime import datetime, timedelta
from pathlib import Path

import pytest
from django.contrib.staticfiles import finders
from django.test import Client
from django.utils import timezone
from rest_framework.test import APIClient

from portal.dashboards.selectors import WINDOWS, dashboard_get, default_window, window_of
from portal.jobs.models import EventKind, Job, JobEvent
from tests.fixtures import World
from tests.portal.dashboards.rows import NOW, H, job

HTMX = {"HTTP_HX_REQUEST": "true"}
D = timedelta(days=1)
M = timedelta(minutes=1)


def _event(row: Job, at: datetime, kind: str, from_state: str, to_state: str) -> None:
    """A recorded state change at ``at`` (``at`` is set by the database on insert, so it is written after)."""
    event = JobEvent.objects.create(job=row, kind=kind, actor="test", from_state=from_state, to_state=to_state)
    JobEvent.objects.filter(pk=event.pk).update(at=at)


def _waited(world: World, *, submitted: datetime, started: datetime | None) -> Job:
    """A job of lab that entered the queue at ``submitted`` and left it at ``started`` (None: still waiting)."""
    state = "pending" if started is None else "running"
    row = job(world.tenant, world.alice, submitted=submitted, state=state, started=started)
    _event(row, submitted, EventKind.SUBMITTED, "", "pending")
    if started is not None:
        _event(row, started, EventKind.STARTED, "pending", "running")
    return row


# --- the default window --------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("age", "key"),
    [
        (timedelta(minutes=20), "1h"),
        (3 * H, "6h"),
        (10 * H, "24h"),
        (3 * D, "7d"),
        (40 * D, "7d"),  # clamped: a month of history still opens on the week
    ],
)
def test_the_default_window_is_the_shortest_that_holds_every_job(world: World, age: timedelta, key: str) -> None:
    job(world.tenant, world.alice, submitted=NOW - age, started=NOW - age, finished=NOW - age / 2)
    job(world.tenant, world.bob, submitted=NOW - age / 3, state="pending")
    assert default_window(user=world.alice, now=NOW) == key


def test_without_jobs_the_default_is_a_day(world: World) -> None:
    assert default_window(user=world.alice, now=NOW) == "24h"


def test_the_default_counts_only_the_jobs_the_reader_sees(world: World) -> None:
    job(world.other_tenant, world.eve, submitted=NOW - 5 * D, state="pending")  # not alice's tenant
    job(world.tenant, world.alice, submitted=NOW - 30 * M, state="pending")
    assert default_window(user=world.alice, now=NOW) == "1h"
    assert default_window(user=world.eve, now=NOW) == "7d"
    assert default_window(user=world.eve, tenant=world.other_tenant, now=NOW) == "7d"


def test_the_windows_offered_run_from_an_hour_to_a_month() -> None:
    assert list(WINDOWS) == ["1h", "6h", "24h", "7d", "30d"]
    assert window_of("1h", now=NOW).label == "last hour" and window_of("1h", now=NOW).period == 60


def test_a_fresh_cluster_opens_on_the_hour_it_has_run(world: World, client: Client) -> None:
    now = timezone.now()
    job(world.tenant, world.alice, submitted=now - 20 * M, started=now - 15 * M, finished=now - 5 * M)
    client.force_login(world.alice)
    html = client.get("/dashboard/").content.decode()
    assert 'hx-get="/dashboard/?window=1h"' in html and "last hour" in html
    assert re.search(r'<option value="1h" selected>', html)
    api = APIClient()
    api.force_authenticate(world.alice)
    assert api.get("/api/v1/usage/").json()["window"] == "1h"  # the API leaves it out the same way
    assert api.get("/api/v1/usage/", {"window": "7d"}).json()["window"] == "7d"  # and one asked for is kept


def test_a_bad_window_falls_back_to_the_default_and_says_so(world: World, client: Client) -> None:
    now = timezone.now()
    job(world.tenant, world.alice, submitted=now - 3 * H, started=now - 2 * H, finished=now - H)
    client.force_login(world.alice)
    html = client.get("/dashboard/?window=1y").content.decode()
    assert "There is no window “1y”: choose 1h, 6h, 24h, 7d, 30d." in html and "last 6 hours" in html


# --- jobs waiting --------------------------------------------------------------------------------------------------
def test_jobs_waiting_are_charted_for_a_week_from_the_jobs_state_changes(world: World) -> None:
    _waited(world, submitted=NOW - 3 * D, started=NOW - 2 * D)  # waited a day, three days ago
    _waited(world, submitted=NOW - 50 * H - 30 * M, started=None)  # waiting since, still
    _waited(world, submitted=NOW - 10 * D, started=NOW - 6 * D - 12 * H)  # waited before the window too
    week = dashboard_get(user=world.alice, window=window_of("7d", now=NOW)).cluster.pending_series
    assert week is not None and len(week.x) == 7 * 24 + 1 and week.x[0] == NOW - 7 * D and week.x[-1] == NOW
    levels = dict(zip(week.x, week.y, strict=True))
    assert levels[NOW - 7 * D] == 1 and levels[NOW - 6 * D] == 0  # the third job, until it started
    assert levels[NOW - 3 * D] == 0 and levels[NOW - 3 * D + H] == 1  # the first, from the bucket after it came
    # The second came in the bucket from 51 h to 50 h ago; the first left in the one starting 2 days ago.
    assert levels[NOW - 51 * H] == 1 and levels[NOW - 50 * H] == 2 and levels[NOW - 2 * D] == 2
    assert levels[NOW - 2 * D + H] == 1 and levels[NOW] == 1  # the second waits on


def test_the_waiting_chart_is_drawn_for_every_window(world: World, client: Client) -> None:
    now = timezone.now()
    _waited(world, submitted=now - 2 * D, started=now - D)
    client.force_login(world.alice)
    for key in ("7d", "30d"):
        html = client.get(f"/dashboard/?window={key}", **HTMX).content.decode()
        found = re.search(r'<script id="dashboard-figures" type="application/json">(.*?)</script>', html, re.S)
        assert found and "pending" in json.loads(found.group(1)), key
        assert "scheduling rounds are kept for a day" not in html


def test_a_day_without_waiting_says_so(world: World) -> None:
    from portal.dashboards.charts import pending_chart

    board = dashboard_get(user=world.alice, window=window_of("24h", now=NOW))
    chart = pending_chart(board.cluster)
    assert chart.figure is None and chart.empty == "No job waited in this window."


# --- the summary cards ---------------------------------------------------------------------------------------------
def test_the_seven_cards_sit_in_a_grid_of_three_then_four(world: World, client: Client) -> None:
    now = timezone.now()
    job(world.tenant, world.alice, submitted=now - 3 * H, started=now - 2 * H, finished=now - H)
    client.force_login(world.alice)
    html = client.get("/dashboard/").content.decode()
    assert 'href="/static/dashboard.css"' in html
    cards = html[html.index('data-testid="dashboard-cards"') :]
    cards = cards[: cards.index("</section>")]
    assert re.search(r'<div class="stat-cards" data-testid="dashboard-cards">', html)
    assert cards.count('class="card stat"') == 7
    found = finders.find("dashboard.css")
    assert found is not None
    css = Path(found).read_text()
    # Jobs (three cards) above GPUs (four): 12 columns, spans of 4 then 3, so no card is left alone on a row.
    assert "repeat(12, 1fr)" in css
    assert re.search(r"\.stat-cards > \.card:nth-child\(-n \+ 3\)\s*\{\s*grid-column: span 4;", css)
    assert re.search(r"\.stat-cards > \.card\s*\{[^}]*grid-column: span 3;", css)
