"""The what-if pages: staff only, the form and its readable errors, the polling fragment, and a finished run's table
and charts. Ref: #3 (replay the cluster's own history under another policy before switching)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from django.contrib.auth.models import AbstractBaseUser
from django.contrib.staticfiles import finders
from django.test import Client

from portal.jobs.models import Job
from scheduling.core.policies import POLICIES
from scheduling.whatif.models import WhatIfRun
from scheduling.whatif.services import whatif_create, whatif_execute
from tests.factories import UserFactory
from tests.fixtures import World
from tests.history import small_history

HTMX = {"HTTP_HX_REQUEST": "true"}
PLOTLY = "/static/vendor/plotly/plotly.min.js"


@pytest.fixture
def root(world: World) -> AbstractBaseUser:
    return UserFactory(username="root", is_staff=True)


@pytest.fixture
def history(world: World) -> dict[str, Job]:
    return small_history(world.tenant, world.other_tenant, {"alice": world.alice, "bob": world.bob, "eve": world.eve})


@pytest.fixture
def admin_client(client: Client, root: AbstractBaseUser) -> Client:
    client.force_login(root)
    return client


def _form(**overrides: object) -> dict[str, object]:
    data: dict[str, object] = {
        "since": "",
        "until": "",
        "policies": ["fifo", "srsf"],
        "placement": "count",
        "preemption_overhead": "0",
        "nodes": "2",
        "gpus_per_node": "4",
        "racks": "1",
    }
    return data | overrides


def _done_run(root: AbstractBaseUser, policies: list[str]) -> WhatIfRun:
    run = whatif_create(
        user=root, policies=policies, placement="count", preemption_overhead="helios", nodes=2, gpus_per_node=4
    )
    finished = whatif_execute(run.pk)
    assert finished is not None and finished.state == "done", finished and finished.error
    return finished


def test_only_staff_may_use_the_pages(world: World, client: Client, root: AbstractBaseUser) -> None:
    run = WhatIfRun.objects.create(
        requested_by=root, policies=["fifo"], live_policy="fifo", placement="count", nodes=1, gpus_per_node=1
    )
    for url in ("/whatif/", f"/whatif/{run.pk}/"):
        response = client.get(url)
        assert response.status_code == 302 and response["Location"].startswith("/accounts/login/")
    client.force_login(world.admin)  # a tenant admin is not staff
    assert client.get("/whatif/").status_code == 403
    assert client.get(f"/whatif/{run.pk}/").status_code == 403
    assert client.get(f"/whatif/{run.pk}/", **HTMX).status_code == 403
    assert client.post("/whatif/", _form()).status_code == 403
    assert WhatIfRun.objects.count() == 1
    assert 'href="/whatif/"' not in client.get("/jobs/").content.decode()
    client.force_login(root)
    assert 'href="/whatif/"' in client.get("/jobs/").content.decode()  # the nav link, for staff


def test_the_form_starts_from_the_live_policy_and_cluster(
    admin_client: Client,
    settings,
    django_assert_max_num_queries,  # noqa: ANN001
) -> None:
    settings.CORRAL_POLICY = "tiresias-las"
    settings.CORRAL_PLACEMENT = "consolidate"
    with django_assert_max_num_queries(6):
        page = admin_client.get("/whatif/").content.decode()
    boxes = re.findall(r'<input type="checkbox" name="policies" value="([^"]+)"[^>]*>', page)
    assert boxes == list(POLICIES)
    assert re.search(r'value="tiresias-las"[^>]*checked', page) and "tiresias-las (live)" in page
    assert not re.search(r'value="fifo"[^>]*checked', page)
    assert "srsf (oracle" in page
    assert re.search(r'<option value="consolidate" selected>', page)
    assert re.search(r'name="nodes" value="2"', page) and re.search(r'name="gpus_per_node" value="4"', page)
    assert PLOTLY not in page  # plotly.js only on a run's page


def test_a_live_quota_policy_is_offered_as_it_runs(admin_client: Client, settings) -> None:  # noqa: ANN001
    settings.CORRAL_POLICY = "fifo+quota"
    page = admin_client.get("/whatif/").content.decode()
    assert re.search(r'value="fifo\+quota"[^>]*checked', page) and "fifo+quota (live)" in page


def test_submitting_queues_a_run_whose_page_polls_until_it_is_done(
    admin_client: Client, history: dict[str, Job]
) -> None:
    response = admin_client.post("/whatif/", _form(since="2026-11-01", until="2026-11-02", racks="2"))
    run = WhatIfRun.objects.get()
    assert response.status_code == 302 and response["Location"] == f"/whatif/{run.pk}/"
    assert (run.state, run.policies, run.nodes, run.gpus_per_node, run.racks) == ("queued", ["fifo", "srsf"], 2, 4, 2)
    assert (run.since.isoformat(), run.until.isoformat()) == ("2026-11-01T00:00:00+00:00", "2026-11-02T00:00:00+00:00")

    page = admin_client.get(f"/whatif/{run.pk}/").content.decode()
    assert "<html" in page and f'src="{PLOTLY}"' in page
    assert 'hx-trigger="every 2s"' in page and "waiting for a worker" in page
    fragment = admin_client.get(f"/whatif/{run.pk}/", **HTMX).content.decode()
    assert "<html" not in fragment and 'id="whatif-run"' in fragment and 'hx-trigger="every 2s"' in fragment

    whatif_execute(run.pk)
    fragment = admin_client.get(f"/whatif/{run.pk}/", **HTMX).content.decode()
    assert "hx-trigger" not in fragment  # done: the poll stops, and the results come with the last fragment
    assert 'data-testid="whatif-results"' in fragment and 'id="whatif-figures"' in fragment
    assert f"/whatif/{run.pk}/" in admin_client.get("/whatif/").content.decode()  # listed among past runs


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"since": "2026-11-02", "until": "2026-11-01"}, "Must be a later day than the start of the window."),
        ({"since": "2026-11-01", "until": "2026-11-01"}, "Must be a later day than the start of the window."),
        ({"since": "yesterday"}, "Enter a valid date."),
        ({"policies": []}, "Choose at least one policy."),
        ({"policies": ["lottery"]}, "Select a valid choice. lottery is not one of the available choices."),
        ({"nodes": "0"}, "Enter a whole number of at least 1."),
        ({"gpus_per_node": "two"}, "Enter a whole number."),
        ({"racks": "3"}, "Cannot exceed the number of nodes (2)."),
        ({"preemption_overhead": "soon"}, "Enter a number of seconds (0 or more) or helios."),
        ({"since": "2030-01-01"}, "No finished jobs were submitted in this window"),
    ],
)
def test_form_errors_are_readable_and_next_to_their_field(
    admin_client: Client, history: dict[str, Job], overrides: dict[str, object], message: str
) -> None:
    response = admin_client.post("/whatif/", _form(**overrides))
    assert response.status_code == 200
    page = response.content.decode()
    assert f'<span class="error" role="alert">{message}' in page.replace("&#x27;", "'")
    assert not WhatIfRun.objects.exists()


def test_a_done_run_shows_every_policy_and_marks_the_live_one(
    admin_client: Client,
    root: AbstractBaseUser,
    history: dict[str, Job],
    settings,  # noqa: ANN001
) -> None:
    settings.CORRAL_POLICY = "fifo"
    policies = ["fifo-backfill", "fifo", "srsf", "tiresias-las", "tiresias-gittins", "qssf"]
    run = _done_run(root, policies)
    page = admin_client.get(f"/whatif/{run.pk}/").content.decode()
    table = page[page.index('data-testid="whatif-results"') : page.index("</table>")]
    assert re.findall(r"<td><b>([^<]+)</b>", table) == policies
    live = re.search(r'<tr class="live" data-testid="live-row">(.*?)</tr>', table, re.S)
    assert (
        live and "<b>fifo</b>" in live.group(1) and "1.00x" in live.group(1) and "90.0 min" in live.group(1)
    )  # 5400 s
    assert table.count("1.00x") >= 1 and "vs fifo" in table and "(oracle)" in table
    assert 'data-testid="observed-row"' in table and "3.6 h" in table  # what really happened: 13050 s on average
    assert "hx-trigger" not in page
    figures = json.loads(
        re.search(r'<script id="whatif-figures" type="application/json">(.*?)</script>', page).group(1)
    )
    assert len(figures) == 4 and [t["name"] for t in figures[0]["data"]][1] == "fifo (live)"


def test_a_failed_run_says_why_in_one_sentence(admin_client: Client, root: AbstractBaseUser, world: World) -> None:
    run = WhatIfRun.objects.create(
        requested_by=root, policies=["fifo"], live_policy="fifo", placement="count", nodes=1, gpus_per_node=1
    )
    whatif_execute(run.pk)  # no history at all
    page = admin_client.get(f"/whatif/{run.pk}/").content.decode()
    assert 'data-testid="whatif-error">No finished jobs were submitted in this window.</p>' in page
    assert "Traceback" not in page and "hx-trigger" not in page and "whatif-results" not in page
    assert admin_client.get(f"/whatif/{run.pk + 1}/").status_code == 404


def test_plotly_js_is_served_from_the_installed_package(admin_client: Client) -> None:
    found = finders.find("vendor/plotly/plotly.min.js")
    assert found is not None and Path(found).stat().st_size > 1_000_000
    response = admin_client.get(PLOTLY)  # whitenoise, as in `make run` and production
    assert response.status_code == 200 and "javascript" in response["Content-Type"]
    response.close()
