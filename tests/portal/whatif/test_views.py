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
from portal.nodes.models import Node, NodeState
from portal.tenants.models import Quota
from portal.whatif.models import WhatIfRun
from portal.whatif.selectors import ClusterShape
from portal.whatif.services import ReplayCluster, whatif_create, whatif_execute
from scheduling.core.model import TenantLimits
from scheduling.core.policies import POLICIES
from tests.factories import QuotaFactory, TenantFactory
from tests.fixtures import World, register_node

HTMX = {"HTTP_HX_REQUEST": "true"}
PLOTLY = "/static/vendor/plotly/plotly.min.js"
KEYS = ("guaranteed_gpus", "gpu_cap", "user_cap")  # the quota table's columns, as the inputs are named


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
        "cluster": "uniform",
        "nodes": "2",
        "gpus_per_node": "4",
        "racks": "1",
    }
    return data | overrides


def _quota_form(**quotas: object) -> dict[str, object]:
    """The form with the quotas ticked and the quota table as the page fills it in today (lab: cap 6, other: no
    limit); ``quotas`` overrides inputs by short name, e.g. ``lab_gpu_cap="8"``."""
    inputs = {
        "lab_guaranteed_gpus": "0",
        "lab_gpu_cap": "6",
        "lab_user_cap": "",
        "other_guaranteed_gpus": "0",
        "other_gpu_cap": "",
        "other_user_cap": "",
    }
    return _form(apply_quotas="on") | {f"quota_{name}": value for name, value in (inputs | quotas).items()}


def _quota_cells(page: str) -> dict[str, list[str]]:
    """The form's quota table: each tenant's input values, in column order."""
    table = page[page.index('data-testid="whatif-quota-inputs"') : page.index("</table>", page.index("quota-inputs"))]
    rows = re.findall(r'<tr data-tenant="([^"]+)">(.*?)</tr>', table, re.S)
    return {
        tenant: [
            (value.group(1) if (value := re.search(r'value="([^"]*)"', tag)) else "")
            for tag in re.findall(r'<input type="number"[^>]*>', cells)
        ]
        for tenant, cells in rows
    }


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
    assert boxes == [*POLICIES, *(f"{name}+quota" for name in POLICIES)]  # each also with the tenant layer (#18)
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


def test_the_form_offers_the_live_cluster_as_it_is_now(admin_client: Client, history: dict[str, Job]) -> None:
    register_node("n3", gpus=8)
    Node.objects.filter(name="n3").update(rack="r2")  # n1 and n2 name no rack: one more group for placement
    page = admin_client.get("/whatif/").content.decode()
    radios = re.findall(r'<input type="radio" name="cluster" value="([^"]+)"[^>]*>', page)
    assert radios == ["live", "uniform"]
    assert re.search(r'value="live"[^>]*checked', page) and not re.search(r'value="uniform"[^>]*checked', page)
    assert "The live cluster as it is now: 3 nodes, 16 GPUs (1 × 8 + 2 × 4), 2 racks" in page
    assert "A uniform cluster of the size below (what if we had more, or fewer)" in page
    uniform = page[page.index('data-testid="whatif-uniform"') : page.index("</fieldset>", page.index("whatif-uniform"))]
    assert 'name="nodes" value="3"' in uniform and 'name="gpus_per_node" value="4"' in uniform
    assert 'name="racks" value="1"' in uniform  # the uniform sizes sit under the uniform choice; one rack named
    assert re.search(r'<input type="checkbox" name="apply_quotas"[^>]*checked', page)
    assert "Apply the tenants&#x27; quotas as they are now" in page

    # The run's page says what the choice said.
    response = admin_client.post("/whatif/", _form(cluster="live"))
    assert response.status_code == 302
    run_page = admin_client.get(response["Location"]).content.decode()
    assert "Live nodes: 3 nodes, 16 GPUs (1 × 8 + 2 × 4), 2 racks" in run_page


@pytest.mark.parametrize(("ticked", "quotas"), [(True, "applied"), (False, "none")])
def test_replaying_on_the_live_cluster_copies_its_nodes_and_the_quotas_when_ticked(
    admin_client: Client, history: dict[str, Job], ticked: bool, quotas: str
) -> None:
    Node.objects.filter(name="n1").update(rack="r1")
    Node.objects.filter(name="n2").update(rack="r2")
    # The uniform fields are ignored for a live copy, even empty or larger than the cluster.
    form = _form(cluster="live", nodes="", gpus_per_node="", racks="9")
    if ticked:
        form["apply_quotas"] = "on"  # an unticked checkbox is not posted at all
    response = admin_client.post("/whatif/", form)
    run = WhatIfRun.objects.get()
    assert response.status_code == 302 and response["Location"] == f"/whatif/{run.pk}/"
    assert run.layout == [[4, "r1"], [4, "r2"]]
    assert (run.nodes, run.gpus_per_node, run.racks) == (2, 4, 2)
    if ticked:
        assert run.quotas == {
            "lab": {"gpu_cap": 6, "guaranteed_gpus": 0, "user_cap": None},
            "other": {"gpu_cap": None, "guaranteed_gpus": 0, "user_cap": None},
        }
    else:
        assert run.quotas is None
    row = re.search(
        r"<tr>\s*<td><a href=\"/whatif/\d+/\">.*?</tr>", admin_client.get("/whatif/").content.decode(), re.S
    )
    assert row and "<td>live, 8 GPUs, count</td>" in row.group(0) and f"<td>{quotas}</td>" in row.group(0)


def test_an_empty_racks_field_means_one_rack(admin_client: Client, history: dict[str, Job]) -> None:
    response = admin_client.post("/whatif/", _form(racks=""))
    assert response.status_code == 302
    run = WhatIfRun.objects.get()
    assert (run.layout, run.nodes, run.gpus_per_node, run.racks, run.quotas) == ([], 2, 4, 1, None)


def test_with_no_live_node_only_a_uniform_cluster_is_offered(admin_client: Client, history: dict[str, Job]) -> None:
    Node.objects.update(state=NodeState.DOWN)
    page = admin_client.get("/whatif/").content.decode()
    assert re.findall(r'<input type="radio" name="cluster" value="([^"]+)"[^>]*>', page) == ["uniform"]
    assert re.search(r'value="uniform"[^>]*checked', page) and "The live cluster as it is now" not in page
    assert "No live node has GPUs now (all down, or none registered): only a uniform cluster." in page
    page = admin_client.post("/whatif/", _form(cluster="live")).content.decode()
    assert '<span class="error" role="alert">No live node has GPUs now: choose a uniform cluster.</span>' in page
    assert not WhatIfRun.objects.exists()
    assert admin_client.post("/whatif/", _form()).status_code == 302  # a uniform cluster still replays


def test_a_live_cluster_gone_since_the_page_loaded_is_refused_next_to_the_choice(
    admin_client: Client, history: dict[str, Job], monkeypatch: pytest.MonkeyPatch
) -> None:
    # The form still offers the live cluster (as when the page was loaded), but its nodes went down since.
    shape = ClusterShape(layout=((4, ""), (4, "")), nodes=2, gpus_per_node=4, racks=1)
    monkeypatch.setattr("portal.whatif.views.whatif_live_cluster", lambda: shape)
    Node.objects.update(state=NodeState.DOWN)
    response = admin_client.post("/whatif/", _form(cluster="live"))
    assert response.status_code == 200
    page = response.content.decode()
    fieldset = page[
        page.index('data-testid="whatif-cluster"') : page.index("</fieldset>", page.index("whatif-cluster"))
    ]
    assert '<span class="error" role="alert">No live node has GPUs now; choose a uniform cluster' in fieldset
    assert not WhatIfRun.objects.exists()


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
        ({"nodes": ""}, "Give the number of nodes for a uniform cluster."),
        ({"gpus_per_node": ""}, "Give the GPUs per node for a uniform cluster."),
        ({"cluster": ""}, "Choose a cluster."),
        ({"cluster": "mars"}, "Choose the live cluster or a uniform one."),
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
    # 5400 s, in hours as the rest of its column: what really happened took 13050 s on average (#18)
    assert live and "<b>fifo</b>" in live.group(1) and "1.00x" in live.group(1) and "1.50 h" in live.group(1)
    assert table.count("1.00x") >= 1 and "vs fifo" in table and "(oracle)" in table
    assert 'data-testid="observed-row"' in table and "3.62 h" in table
    assert "hx-trigger" not in page
    figures = json.loads(
        re.search(r'<script id="whatif-figures" type="application/json">(.*?)</script>', page).group(1)
    )
    assert len(figures) == 4 and [t["name"] for t in figures[0]["data"]][1] == "fifo (live)"


def test_a_runs_page_says_what_it_replayed_on_and_under_which_quotas(
    admin_client: Client, root: AbstractBaseUser, world: World, history: dict[str, Job]
) -> None:
    Quota.objects.filter(tenant=world.tenant).update(gpu_limit=6, guaranteed_gpus=2, user_gpu_limit=3)
    common = {"user": root, "policies": ["fifo"], "placement": "count", "preemption_overhead": "0"}
    live = whatif_create(**common, cluster=ReplayCluster.LIVE, apply_quotas=True)
    page = admin_client.get(f"/whatif/{live.pk}/").content.decode()
    setup = page[page.index('data-testid="whatif-setup"') : page.index("</section>", page.index("whatif-setup"))]
    assert "<h2>Replayed on</h2>" in setup and "Live nodes: 2 nodes, 8 GPUs (2 × 4), 1 rack" in setup
    assert "<th>Tenant</th><th>Guaranteed GPUs</th><th>GPU cap</th><th>Per-user cap</th>" in setup
    assert re.findall(r"<tr><td>([^<]*)</td><td>([^<]*)</td><td>([^<]*)</td><td>([^<]*)</td></tr>", setup) == [
        ("lab", "2", "6", "3")
    ]
    assert "Other tenants: no limits." in setup  # "other" has no limit, so it is not in the table

    uniform = whatif_create(**common, nodes=3, gpus_per_node=2)
    setup = admin_client.get(f"/whatif/{uniform.pk}/", **HTMX).content.decode()  # the polled fragment says it too
    assert "Uniform: 3 × 2 GPUs, 1 rack" in setup
    assert "No quotas applied: every tenant could use the whole cluster." in setup and "<th>Tenant</th>" not in setup

    Quota.objects.update(gpu_limit=None, guaranteed_gpus=0, user_gpu_limit=None)
    unlimited = whatif_create(**common, nodes=3, gpus_per_node=2, apply_quotas=True)
    setup = admin_client.get(f"/whatif/{unlimited.pk}/").content.decode()
    assert "Quotas applied; no tenant had any limit." in setup and "<th>Tenant</th>" not in setup

    listing = admin_client.get("/whatif/").content.decode()
    cells = re.findall(r"<td>([^<]*GPUs, count)</td>\s*<td>(applied|none)</td>", listing)
    assert cells == [
        ("3 × 2 GPUs, count", "applied"),
        ("3 × 2 GPUs, count", "none"),
        ("live, 8 GPUs, count", "applied"),
    ]


def test_the_form_shows_todays_quotas_to_edit(admin_client: Client, world: World, history: dict[str, Job]) -> None:
    Quota.objects.filter(tenant=world.tenant).update(guaranteed_gpus=2, user_gpu_limit=3)
    TenantFactory(slug="ml-team")  # no quota row at all: no limits; a slug with a hyphen
    page = admin_client.get("/whatif/").content.decode()
    assert re.search(
        r"<th>Tenant</th><th data-quota-only>Guaranteed GPUs .*?</th><th>GPU cap</th><th>Per-user cap</th>", page
    )
    cells = _quota_cells(page)
    assert cells == {"lab": ["2", "6", "3"], "ml-team": ["0", "", ""], "other": ["0", "", ""]}  # blank: no limit
    assert "Pre-filled with today's quotas; change any to try other quotas in this replay only." in page
    assert 'name="quota_lab_gpu_cap"' in page and 'aria-label="lab: GPU cap"' in page
    # The table sits under the quotas' checkbox, and its inputs are not listed again among the other fields.
    assert page.index('name="apply_quotas"') < page.index('data-testid="whatif-quota-inputs"')
    assert page.count('name="quota_lab_gpu_cap"') == 1 and "lab: GPU cap</label>" not in page

    # Posted back as shown, with one change: only that tenant is edited.
    inputs = {f"{slug}_{key}": value for slug, row in cells.items() for key, value in zip(KEYS, row, strict=True)}
    response = admin_client.post("/whatif/", _quota_form(**inputs | {"ml-team_user_cap": "2"}))
    assert response.status_code == 302
    assert WhatIfRun.objects.get().quotas == {
        "lab": {"gpu_cap": 6, "guaranteed_gpus": 2, "user_cap": 3},
        "ml-team": {"gpu_cap": None, "guaranteed_gpus": 0, "user_cap": 2, "edited": True},
        "other": {"gpu_cap": None, "guaranteed_gpus": 0, "user_cap": None},
    }


def test_edited_quotas_are_replayed_and_marked_on_the_runs_page(
    admin_client: Client, world: World, history: dict[str, Job]
) -> None:
    response = admin_client.post("/whatif/", _quota_form(lab_guaranteed_gpus="4", lab_gpu_cap="8"))
    run = WhatIfRun.objects.get()
    assert response.status_code == 302 and response["Location"] == f"/whatif/{run.pk}/"
    assert run.quotas == {
        "lab": {"gpu_cap": 8, "guaranteed_gpus": 4, "user_cap": None, "edited": True},
        "other": {"gpu_cap": None, "guaranteed_gpus": 0, "user_cap": None},  # as today: not marked
    }
    page = admin_client.get(f"/whatif/{run.pk}/").content.decode()
    setup = page[page.index('data-testid="whatif-setup"') : page.index("</section>", page.index("whatif-setup"))]
    edited = re.search(r'<tr class="edited" data-testid="whatif-quota-edited">(.*?)</tr>', setup, re.S)
    assert edited and edited.group(1) == (
        '<td>lab <span class="tag">edited for this run</span></td><td>4</td><td>8</td><td>-</td>'
    )
    assert "Quotas of the day, with the edits marked." in setup and "when the run was asked for" not in setup
    assert "Other tenants: no limits." in setup
    assert re.search(
        r"<td>2 × 4 GPUs, count</td>\s*<td>applied, edited</td>", admin_client.get("/whatif/").content.decode()
    )


def test_lifting_a_limit_and_adding_one_are_edits_too(
    admin_client: Client, world: World, history: dict[str, Job]
) -> None:
    # A tenant added after the page was loaded has no inputs in the post: it keeps its quota, unmarked.
    QuotaFactory(tenant=TenantFactory(slug="new-lab"), gpu_limit=2)
    response = admin_client.post("/whatif/", _quota_form(lab_gpu_cap="", other_user_cap="2"))
    assert response.status_code == 302
    assert WhatIfRun.objects.get().quotas == {
        "lab": {"gpu_cap": None, "guaranteed_gpus": 0, "user_cap": None, "edited": True},
        "new-lab": {"gpu_cap": 2, "guaranteed_gpus": 0, "user_cap": None},
        "other": {"gpu_cap": None, "guaranteed_gpus": 0, "user_cap": 2, "edited": True},
    }
    page = admin_client.get(response["Location"]).content.decode()
    assert page.count("edited for this run") == 2  # lab lifted to no limit is still shown, marked


@pytest.mark.parametrize(
    ("inputs", "cell", "message"),
    [
        ({"lab_guaranteed_gpus": "7"}, "quota_lab_guaranteed_gpus", "Cannot exceed the GPU cap (6)."),
        (
            {"other_gpu_cap": "2", "other_guaranteed_gpus": "3"},
            "quota_other_guaranteed_gpus",
            "Cannot exceed the GPU cap (2).",
        ),
        ({"lab_gpu_cap": "-1"}, "quota_lab_gpu_cap", "Enter a whole number of at least 0."),
        ({"other_user_cap": "two"}, "quota_other_user_cap", "Enter a whole number."),
        ({"lab_guaranteed_gpus": "1.5"}, "quota_lab_guaranteed_gpus", "Enter a whole number."),
    ],
)
def test_a_bad_quota_is_a_readable_error_in_its_cell(
    admin_client: Client, history: dict[str, Job], inputs: dict[str, str], cell: str, message: str
) -> None:
    response = admin_client.post("/whatif/", _quota_form(**inputs))
    assert response.status_code == 200
    page = response.content.decode()
    error = f'<span class="error" role="alert" id="id_{cell}_error">{re.escape(message)}</span>'
    assert re.search(rf'<td[^>]*><input type="number" name="{cell}"[^>]*>{error}</td>', page)  # in its cell
    assert not WhatIfRun.objects.exists()
    assert _quota_cells(page)["lab"][0] == inputs.get("lab_guaranteed_gpus", "0")  # the post is shown back as typed


def test_unticked_quotas_ignore_the_edits(admin_client: Client, history: dict[str, Job]) -> None:
    form = _quota_form(lab_guaranteed_gpus="9", lab_gpu_cap="8", other_user_cap="-3")  # even a bad one
    del form["apply_quotas"]  # an unticked checkbox is not posted at all
    response = admin_client.post("/whatif/", form)
    assert response.status_code == 302
    assert WhatIfRun.objects.get().quotas is None


def test_a_refused_quota_change_is_said_under_the_quota_table(
    admin_client: Client, world: World, history: dict[str, Job], monkeypatch: pytest.MonkeyPatch
) -> None:
    # The form offers a tenant deleted since (read just before the service reads the quotas again).
    today = {"gone": TenantLimits(), "lab": TenantLimits(gpu_cap=6), "other": TenantLimits()}
    monkeypatch.setattr("portal.whatif.views.tenant_limits", lambda: today)
    response = admin_client.post("/whatif/", _quota_form(gone_gpu_cap="4"))
    assert response.status_code == 200
    page = response.content.decode()
    table = page[page.index('data-testid="whatif-quota-inputs"') : page.index("</div>", page.index("quota-inputs"))]
    assert '<p class="error" role="alert">These quotas were refused: no tenant gone.</p>' in table
    assert not WhatIfRun.objects.exists()


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


def test_the_form_replays_fair_share_with_the_half_life_given(
    admin_client: Client, root: AbstractBaseUser, history: dict[str, Job]
) -> None:
    page = admin_client.get("/whatif/").content.decode()
    assert re.search(r'name="fair_share_half_life_hours" value="168\.0"', page)  # the live setting, pre-filled
    with_quota = ["fifo", "fifo+quota"]  # fair share is read by +quota policies alone
    admin_client.post("/whatif/", _form(policies=with_quota, fair_share_half_life_hours="24"))
    admin_client.post("/whatif/", _form(policies=with_quota, fair_share_half_life_hours=""))
    asked, off = WhatIfRun.objects.order_by("pk")
    assert (asked.fair_share_half_life_hours, off.fair_share_half_life_hours) == (24.0, None)
    said = admin_client.get(f"/whatif/{asked.pk}/").content.decode()
    assert "counting usage from the start of the window with a half-life of 24 hours" in said
    assert (
        "No fair share: +quota policies lent idle GPUs in the policy"
        in admin_client.get(f"/whatif/{off.pk}/").content.decode()
    )


@pytest.mark.parametrize("value", ["-1", "a week", "100000"])
def test_a_bad_half_life_is_a_readable_error_next_to_it(
    admin_client: Client, history: dict[str, Job], value: str
) -> None:
    page = admin_client.post("/whatif/", _form(fair_share_half_life_hours=value)).content.decode()
    assert '<span class="error" role="alert">Enter a number of hours from 0 (no fair share) to 87600.' in page
    assert not WhatIfRun.objects.exists()
