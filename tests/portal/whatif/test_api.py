"""``/api/v1/whatif/``: admins' scripts ask for a what-if replay, list runs and read what one found, as the browser's
``/whatif/`` does. Ref: #3 (replay the cluster's own history under another policy before switching)."""

from __future__ import annotations

import json
import re
from typing import Any

import jsonschema
import pytest
from django.contrib.auth.models import AbstractBaseUser
from django.test import Client
from rest_framework.test import APIClient

from portal.jobs.models import Job
from portal.nodes.models import Node, NodeState
from portal.tenants.models import Quota
from portal.whatif.models import WhatIfRun
from portal.whatif.serializers import LIVE_IS_AS_IT_IS, NO_LIVE_CLUSTER
from portal.whatif.services import NO_LIVE_NODES, whatif_execute
from tests.factories import UserFactory
from tests.fixtures import World, register_node

URL = "/api/v1/whatif/"
CLUSTER = {"nodes": 2, "gpus_per_node": 4}
#: The world's quotas as a run copies them: lab is capped at 6 GPUs, other has a quota row with no limit.
QUOTAS = {
    "lab": {"gpu_cap": 6, "guaranteed_gpus": 0, "user_cap": None, "edited": False},
    "other": {"gpu_cap": None, "guaranteed_gpus": 0, "user_cap": None, "edited": False},
}
#: The same as the run row stores them: "edited" is only written for a changed tenant.
STORED_QUOTAS = {slug: {k: v for k, v in q.items() if k != "edited"} for slug, q in QUOTAS.items()}


@pytest.fixture
def schema(db: None) -> dict[str, Any]:
    response = APIClient().get("/api/v1/schema/", HTTP_ACCEPT="application/vnd.oai.openapi+json")
    document: dict[str, Any] = response.json()
    return document


def _json_schema(node: Any) -> Any:
    """OpenAPI 3.0's ``nullable`` as JSON Schema says it (jsonschema ignores the keyword, so null would fail)."""
    if isinstance(node, list):
        return [_json_schema(item) for item in node]
    if not isinstance(node, dict):
        return node
    node = {key: _json_schema(value) for key, value in node.items()}
    return {"anyOf": [node, {"type": "null"}]} if node.pop("nullable", False) else node


def _conforms(schema: dict[str, Any], path: str, method: str, response: Any) -> None:
    """The answer's status is documented for the operation and its JSON body fits the documented schema."""
    documented = schema["paths"][path][method]["responses"]
    assert str(response.status_code) in documented, (path, response.status_code, list(documented))
    body = documented[str(response.status_code)]["content"]["application/json"]["schema"]
    jsonschema.validate(response.json(), _json_schema({**body, "components": schema["components"]}))


def _page_table(page: str) -> tuple[list[list[str]], list[str]]:
    """The run page's table: each policy row's cells (policy name first), and the observed row's cells."""
    table = page[page.index('data-testid="whatif-results"') : page.index("</table>")]
    rows = re.findall(r"<tr[^>]*>(.*?)</tr>", table[table.index("<tbody>") :], re.S)
    cells = [re.findall(r"<td>(.*?)</td>", row, re.S) for row in rows]
    policies = [[re.search(r"<b>([^<]+)</b>", c[0]).group(1), *c[1:]] for c in cells[:-1]]  # type: ignore[union-attr]
    return policies, cells[-1]


def test_a_script_queues_a_run_and_reads_what_the_page_shows(
    staff: APIClient,
    root: AbstractBaseUser,
    history: dict[str, Job],
    eager: None,
    schema: dict[str, Any],
    settings,  # noqa: ANN001
    django_capture_on_commit_callbacks,  # noqa: ANN001
) -> None:
    settings.CORRAL_POLICY = "fifo"
    policies = ["fifo-backfill", "fifo", "srsf", "tiresias-gittins"]
    # small_history's numbers are those of a uniform 2 x 4 cluster with no quotas (lab's cap of 6 would leave out
    # its 8-GPU job).
    body = {"policies": policies, "preemption_overhead": " Helios", **CLUSTER, "racks": 2, "apply_quotas": False}
    with django_capture_on_commit_callbacks(execute=True) as callbacks:
        created = staff.post(URL, body | {"since": "2026-11-01", "until": "2026-11-02T00:00:00Z"}, format="json")
    assert created.status_code == 201, created.json()
    assert len(callbacks) == 1  # whatif_run, queued once the run was committed (and run here, eagerly)
    run = created.json()
    assert (run["state"], run["requested_by"], run["live_policy"]) == ("queued", "root", "fifo")
    assert run["policies"] == policies
    assert (run["preemption_overhead"], run["nodes"], run["gpus_per_node"], run["racks"]) == ("helios", 2, 4, 2)
    assert (run["cluster"], run["layout"], run["quotas"]) == ("uniform", [], None)
    assert run["cluster_text"] == "Uniform: 2 × 4 GPUs, 2 racks"
    assert (run["since"], run["until"]) == ("2026-11-01T00:00:00Z", "2026-11-02T00:00:00Z")
    assert run["url"] == f"http://testserver/api/v1/whatif/{run['id']}/" == created["Location"]
    assert run["results"] is None and run["error"] == ""
    _conforms(schema, "/api/v1/whatif/", "post", created)

    response = staff.get(run["url"])
    _conforms(schema, "/api/v1/whatif/{id}/", "get", response)
    done = response.json()
    assert (done["state"], done["jobs"], done["error"]) == ("done", 4, "")
    assert done["started_at"] is not None and done["finished_at"] is not None
    results = done["results"]
    assert [p["policy"] for p in results["policies"]] == policies  # the order asked for
    fifo = results["policies"][1]
    assert (fifo["live"], fifo["clairvoyant"], fifo["jobs"], fifo["avg_jct"]) == (True, False, 4, 5400)  # 90 min
    # 90 min, in hours as the rest of the avg JCT column (what really happened: 3.6 h on average). Ref: #18
    assert (fifo["shown"]["avg_jct"], fifo["shown"]["ratio"], results["baseline"]) == ("1.50 h", "1.00x", "fifo")
    assert results["policies"][2]["clairvoyant"] is True  # srsf, an oracle
    assert results["observed"]["avg_jct"] == 13050 and results["skipped"] == 0
    assert results["figures"] is None  # only when asked for

    # The numbers are the page's, formatted as it shows them.
    browser = Client()
    browser.force_login(root)
    page = browser.get(f"/whatif/{run['id']}/").content.decode()
    rows, observed = _page_table(page)
    keys = ["avg_jct", "ratio", "median_jct", "p95_jct", "avg_queue", "utilization", "preemptions", "fairness"]
    assert rows == [[p["policy"], *(p["shown"][k] for k in keys)] for p in results["policies"]]
    shown = results["observed"]["shown"]
    assert [observed[i] for i in (1, 3, 4, 5)] == [shown[k] for k in ("avg_jct", "median_jct", "p95_jct", "avg_queue")]

    with_figures = staff.get(run["url"], {"figures": "1"})
    _conforms(schema, "/api/v1/whatif/{id}/", "get", with_figures)
    script = re.search(r'<script id="whatif-figures" type="application/json">(.*?)</script>', page, re.S)
    assert script is not None
    assert with_figures.json()["results"]["figures"] == json.loads(script.group(1))
    assert with_figures.json()["results"]["policies"] == results["policies"]


def test_what_is_left_out_is_the_live_cluster(
    staff: APIClient,
    world: World,
    history: dict[str, Job],
    settings,  # noqa: ANN001
) -> None:
    settings.CORRAL_POLICY = "tiresias-las"
    settings.CORRAL_PLACEMENT = "consolidate"
    response = staff.post(URL, {}, format="json")
    assert response.status_code == 201, response.json()
    run = WhatIfRun.objects.get(pk=response.json()["id"])
    assert (run.state, run.policies, run.placement, run.preemption_overhead) == (
        "queued", ["tiresias-las"], "consolidate", "0",
    )  # fmt: skip
    assert (run.nodes, run.gpus_per_node, run.racks, run.since, run.until) == (2, 4, 1, None, None)  # n1 and n2
    assert (run.layout, run.quotas) == ([[4, ""], [4, ""]], STORED_QUOTAS)  # a copy of them, with today's quotas

    Node.objects.filter(name="n1").update(rack="a")
    Node.objects.filter(name="n2").update(rack="b")
    assert staff.post(URL, {}, format="json").json()["racks"] == 2
    asked = staff.post(URL, {"nodes": 1, "policies": ["fifo+quota"]}, format="json").json()
    assert (asked["nodes"], asked["gpus_per_node"], asked["racks"], asked["policies"]) == (1, 4, 1, ["fifo+quota"])
    assert (asked["cluster"], asked["layout"]) == ("uniform", [])  # a size given: uniform, the rest still live


def test_without_a_live_cluster_its_size_must_be_given(
    staff: APIClient, world: World, history: dict[str, Job], schema: dict[str, Any]
) -> None:
    Node.objects.update(state=NodeState.DOWN)
    response = staff.post(URL, {"gpus_per_node": 8}, format="json")
    assert response.status_code == 400
    assert response.json() == {"nodes": [NO_LIVE_CLUSTER]}
    _conforms(schema, "/api/v1/whatif/", "post", response)
    nothing = staff.post(URL, {}, format="json")  # no live cluster to default to: its size is asked for
    assert nothing.status_code == 400
    assert nothing.json() == {"nodes": [NO_LIVE_CLUSTER], "gpus_per_node": [NO_LIVE_CLUSTER]}
    assert staff.post(URL, {"nodes": 3, "gpus_per_node": 8}, format="json").json()["racks"] == 1


def test_a_live_cluster_with_no_live_node_is_a_400_on_cluster(
    staff: APIClient, world: World, history: dict[str, Job], schema: dict[str, Any]
) -> None:
    Node.objects.update(state=NodeState.DOWN)
    response = staff.post(URL, {"cluster": "live"}, format="json")
    assert response.status_code == 400
    assert response.json() == {"cluster": [NO_LIVE_NODES], "code": "invalid"}  # whatif_create's refusal
    _conforms(schema, "/api/v1/whatif/", "post", response)
    assert not WhatIfRun.objects.exists()


@pytest.mark.parametrize(
    ("body", "field", "words"),
    [
        ({"policies": ["fifo", "lottery"]}, "policies", "unknown policy lottery; choose from fifo, fifo-backfill"),
        ({"policies": []}, "policies", "choose at least one policy"),
        ({"policies": "fifo"}, "policies", 'Expected a list of items but got type "str".'),
        ({"placement": "random"}, "placement", '"random" is not a valid choice.'),
        ({"preemption_overhead": "soon"}, "preemption_overhead", "enter a number of seconds (0 or more) or helios"),
        ({"preemption_overhead": "-5"}, "preemption_overhead", "enter a number of seconds (0 or more) or helios"),
        ({"preemption_overhead": "inf"}, "preemption_overhead", "enter a number of seconds (0 or more) or helios"),
        ({"since": "2026-11-02", "until": "2026-11-01"}, "until", "must be after the start of the window"),
        ({"since": "2026-11-01", "until": "2026-11-01"}, "until", "must be after the start of the window"),
        ({"since": "2030-01-01"}, "since", "no finished jobs were submitted in this window"),
        ({"since": "yesterday"}, "since", "Datetime has wrong format"),
        ({"nodes": 0}, "nodes", "Ensure this value is greater than or equal to 1."),
        ({"nodes": 10_001}, "nodes", "Ensure this value is less than or equal to 10000."),
        ({"nodes": "two"}, "nodes", "A valid integer is required."),
        ({"gpus_per_node": 65}, "gpus_per_node", "Ensure this value is less than or equal to 64."),
        ({"racks": 3}, "racks", "must be a whole number from 1 to the number of nodes (2)"),
        ({"cluster": "mixed"}, "cluster", '"mixed" is not a valid choice.'),
        ({"cluster": None}, "cluster", "This field may not be null."),
        ({"cluster": "live", "nodes": 2}, "nodes", LIVE_IS_AS_IT_IS),
        ({"cluster": "live", "gpus_per_node": 4}, "gpus_per_node", LIVE_IS_AS_IT_IS),
        ({"cluster": "live", "racks": 1}, "racks", LIVE_IS_AS_IT_IS),
        ({"cluster": "uniform", "nodes": 1, "racks": 2}, "racks", "from 1 to the number of nodes (1)"),
        ({"apply_quotas": "maybe"}, "apply_quotas", "Must be a valid boolean."),
        ({"apply_quotas": None}, "apply_quotas", "This field may not be null."),
        ({"quota_changes": {"lab": {"guaranteed_gpus": 8}}}, "quota_changes", "lab: the guarantee (8) cannot exceed"),
        ({"quota_changes": {"nobody": {"gpu_cap": 8}}}, "quota_changes", "no tenant nobody"),
        ({"quota_changes": {"lab": {}}, "apply_quotas": False}, "quota_changes", "need the tenants' quotas applied"),
        ({"quota_changes": ["lab"]}, "quota_changes", 'Expected a dictionary of items but got type "list".'),
        ({"fair_share_half_life_hours": -1}, "fair_share_half_life_hours", "greater than or equal to 0"),
        ({"fair_share_half_life_hours": 87_601}, "fair_share_half_life_hours", "less than or equal to 87600"),
        ({"fair_share_half_life_hours": "a week"}, "fair_share_half_life_hours", "A valid number is required."),
    ],
)
def test_bad_input_is_a_400_on_its_field(
    staff: APIClient, history: dict[str, Job], schema: dict[str, Any], body: dict[str, Any], field: str, words: str
) -> None:
    response = staff.post(URL, body, format="json")
    assert response.status_code == 400
    errors = response.json()
    assert words in " ".join(errors[field]), errors
    _conforms(schema, "/api/v1/whatif/", "post", response)
    assert not WhatIfRun.objects.exists()


def test_a_failed_run_says_why_and_a_queued_one_has_no_results(
    staff: APIClient, root: AbstractBaseUser, world: World, schema: dict[str, Any]
) -> None:
    run = WhatIfRun.objects.create(
        requested_by=root, policies=["fifo"], live_policy="fifo", placement="count", nodes=1, gpus_per_node=1
    )
    queued = staff.get(f"{URL}{run.pk}/")
    assert (queued.json()["state"], queued.json()["results"]) == ("queued", None)
    _conforms(schema, "/api/v1/whatif/{id}/", "get", queued)
    whatif_execute(run.pk)  # no history at all
    failed = staff.get(f"{URL}{run.pk}/", {"figures": "true"})
    assert failed.status_code == 200
    body = failed.json()
    assert (body["state"], body["error"], body["results"]) == (
        "failed", "No finished jobs were submitted in this window.", None,
    )  # fmt: skip
    _conforms(schema, "/api/v1/whatif/{id}/", "get", failed)


def test_the_list_is_the_latest_runs_newest_first_a_page_at_a_time(
    staff: APIClient,
    root: AbstractBaseUser,
    world: World,
    schema: dict[str, Any],
    django_assert_max_num_queries,  # noqa: ANN001
) -> None:
    other = UserFactory(username="ops", is_staff=True)
    for i, user in enumerate([root, other, root]):
        WhatIfRun.objects.create(
            requested_by=user, policies=["fifo", "srsf"][: i + 1], live_policy="fifo", placement="count", nodes=i + 1,
            gpus_per_node=4, state="done", results={"policies": [], "observed": {"jobs": 0}, "skipped": 0},
        )  # fmt: skip
    with django_assert_max_num_queries(4):  # the token, the count, the page with who asked
        response = staff.get(URL)
    assert response.status_code == 200
    _conforms(schema, "/api/v1/whatif/", "get", response)
    page = response.json()
    assert (page["count"], page["next"], page["previous"]) == (3, None, None)
    listed = page["results"]
    assert [r["nodes"] for r in listed] == [3, 2, 1]  # newest first
    assert [r["requested_by"] for r in listed] == ["root", "ops", "root"]
    assert listed[1]["policies"] == ["fifo", "srsf"] and listed[1]["state"] == "done"
    assert all(r["results"] is None and r["created_at"] and "finished_at" in r for r in listed)  # read a run for them
    assert staff.get(URL, {"page": 2}).status_code == 404


def test_only_staff_may_use_the_api(
    api: APIClient, world: World, root: AbstractBaseUser, history: dict[str, Job]
) -> None:
    run = WhatIfRun.objects.create(
        requested_by=root, policies=["fifo"], live_policy="fifo", placement="count", nodes=1, gpus_per_node=1
    )
    for client, status in ((api, 403), (APIClient(), 401)):  # alice, a member; then no token
        assert client.get(URL).status_code == status
        assert client.get(f"{URL}{run.pk}/").status_code == status
        assert client.post(URL, CLUSTER, format="json").status_code == status
    tenant_admin = APIClient()
    tenant_admin.force_authenticate(world.admin)  # a tenant's admin is not staff either
    assert tenant_admin.post(URL, CLUSTER, format="json").status_code == 403
    assert WhatIfRun.objects.count() == 1


@pytest.mark.parametrize("run_id", ["999999", str(10**30), "abc", "-1"])
def test_an_unknown_run_is_a_404(staff: APIClient, run_id: str) -> None:
    assert staff.get(f"{URL}{run_id}/").status_code == 404


def test_a_bad_figures_flag_is_a_400(staff: APIClient, root: AbstractBaseUser) -> None:
    run = WhatIfRun.objects.create(
        requested_by=root, policies=["fifo"], live_policy="fifo", placement="count", nodes=1, gpus_per_node=1
    )
    response = staff.get(f"{URL}{run.pk}/", {"figures": "maybe"})
    assert response.status_code == 400 and "figures" in response.json()


def test_nothing_but_policies_replays_a_copy_of_the_live_nodes_with_todays_quotas(
    staff: APIClient, world: World, history: dict[str, Job], schema: dict[str, Any]
) -> None:
    register_node("n3", gpus=8)
    Node.objects.filter(name="n3").update(rack="r2")
    response = staff.post(URL, {"policies": ["fifo", "fifo+quota"]}, format="json")
    assert response.status_code == 201, response.json()
    _conforms(schema, "/api/v1/whatif/", "post", response)
    run = response.json()
    assert run["cluster"] == "live"
    assert run["layout"] == [{"gpus": 4, "rack": ""}, {"gpus": 4, "rack": ""}, {"gpus": 8, "rack": "r2"}]
    assert (run["nodes"], run["gpus_per_node"], run["racks"]) == (3, 8, 2)  # no rack is a rack of its own
    assert run["cluster_text"] == "Live nodes: 3 nodes, 16 GPUs (1 × 8 + 2 × 4), 2 racks"
    assert run["quotas"] == QUOTAS

    Quota.objects.filter(tenant=world.tenant).update(gpu_limit=None)  # a change after the ask: the copy holds
    whatif_execute(run["id"])
    done = staff.get(run["url"])
    _conforms(schema, "/api/v1/whatif/{id}/", "get", done)
    body = done.json()
    assert (body["state"], body["error"], body["quotas"], body["layout"]) == ("done", "", QUOTAS, run["layout"])
    # The 8-GPU job fits n3 but not lab's cap of 6 GPUs, copied with the run: it is left out.
    assert (body["jobs"], body["results"]["skipped"]) == (3, 1)
    assert [p["skipped"] for p in body["results"]["policies"]] == [1, 1]


def test_nodes_and_gpus_per_node_alone_are_a_uniform_cluster_as_before(
    staff: APIClient, world: World, history: dict[str, Job]
) -> None:
    register_node("n3", gpus=8)  # a live cluster that is not 3 x 2
    response = staff.post(URL, {"nodes": 3, "gpus_per_node": 2}, format="json")  # a script from before `cluster`
    assert response.status_code == 201, response.json()
    run = response.json()
    assert (run["cluster"], run["layout"], run["nodes"], run["gpus_per_node"], run["racks"]) == (
        "uniform", [], 3, 2, 1,
    )  # fmt: skip
    assert run["cluster_text"] == "Uniform: 3 × 2 GPUs, 1 rack"
    assert run["quotas"] == QUOTAS  # quotas apply unless turned off
    uniform = staff.post(URL, {"cluster": "uniform"}, format="json").json()  # sized as the live cluster's nearest
    assert (uniform["cluster"], uniform["layout"], uniform["nodes"], uniform["gpus_per_node"]) == ("uniform", [], 3, 4)


def test_apply_quotas_false_replays_with_no_limits(staff: APIClient, world: World, history: dict[str, Job]) -> None:
    response = staff.post(URL, {"apply_quotas": False}, format="json")
    assert response.status_code == 201, response.json()
    run = response.json()
    assert (run["cluster"], run["quotas"]) == ("live", None)
    assert WhatIfRun.objects.get(pk=run["id"]).quotas is None
    whatif_execute(run["id"])
    done = staff.get(run["url"]).json()
    assert (done["state"], done["jobs"], done["results"]["skipped"]) == ("done", 4, 0)  # the 8-GPU job fits 2 x 4


def test_jobs_over_their_tenants_or_users_cap_are_skipped(
    staff: APIClient, world: World, history: dict[str, Job], schema: dict[str, Any]
) -> None:
    # lab is capped at 6 GPUs (its 8-GPU llm cannot run), other at 3 (eve's 4-GPU bert cannot).
    Quota.objects.filter(tenant=world.other_tenant).update(gpu_limit=3)
    body = {"policies": ["fifo", "srsf+quota"], **CLUSTER}
    capped = staff.post(URL, body, format="json").json()
    assert capped["quotas"]["other"] == {"gpu_cap": 3, "guaranteed_gpus": 0, "user_cap": None, "edited": False}
    # Then a cap of 1 GPU per member of lab: alice's 2-GPU resnet cannot run either, bob's 1-GPU gan can.
    Quota.objects.filter(tenant=world.tenant).update(user_gpu_limit=1)
    per_user = staff.post(URL, body, format="json").json()
    assert per_user["quotas"]["lab"] == {"gpu_cap": 6, "guaranteed_gpus": 0, "user_cap": 1, "edited": False}
    free = staff.post(URL, body | {"apply_quotas": False}, format="json").json()

    found = {}
    for name, run in (("capped", capped), ("per_user", per_user), ("free", free)):
        whatif_execute(run["id"])
        response = staff.get(run["url"])
        _conforms(schema, "/api/v1/whatif/{id}/", "get", response)
        done = response.json()
        assert done["state"] == "done", done["error"]
        results = done["results"]
        assert [p["skipped"] for p in results["policies"]] == [results["skipped"]] * 2
        assert all(p["jobs"] == done["jobs"] for p in results["policies"])
        found[name] = (done["jobs"], results["skipped"])
    assert found == {"capped": (2, 2), "per_user": (1, 3), "free": (4, 0)}


def test_quota_changes_try_other_quotas_in_one_run_only(
    staff: APIClient, world: World, history: dict[str, Job], schema: dict[str, Any]
) -> None:
    # lab's cap of 6 is lifted for this run (its 8-GPU llm can then run) and it gets 4 guaranteed GPUs; what the
    # change leaves out (the per-user cap) stays as today, and `other` is not touched.
    body = {"policies": ["fifo+quota"], "quota_changes": {"lab": {"gpu_cap": None, "guaranteed_gpus": 4}}, **CLUSTER}
    response = staff.post(URL, body, format="json")
    assert response.status_code == 201, response.json()
    _conforms(schema, "/api/v1/whatif/", "post", response)
    run = response.json()
    assert run["quotas"] == {
        "lab": {"gpu_cap": None, "guaranteed_gpus": 4, "user_cap": None, "edited": True},
        "other": {"gpu_cap": None, "guaranteed_gpus": 0, "user_cap": None, "edited": False},
    }
    assert Quota.objects.get(tenant=world.tenant).gpu_limit == 6  # today's quota is unchanged
    whatif_execute(run["id"])
    done = staff.get(run["url"]).json()
    assert (done["state"], done["jobs"], done["results"]["skipped"]) == ("done", 4, 0)

    negative = staff.post(URL, body | {"quota_changes": {"lab": {"guaranteed_gpus": -1}}}, format="json")
    assert negative.status_code == 400
    assert negative.json()["quota_changes"] == {
        "lab": {"guaranteed_gpus": ["Ensure this value is greater than or equal to 0."]}
    }


def test_fair_share_follows_the_live_half_life_unless_the_request_names_one(
    staff: APIClient,
    history: dict[str, Job],
    schema: dict[str, Any],
    settings,  # noqa: ANN001
) -> None:
    response = staff.post(URL, {"policies": ["fifo+quota"]}, format="json")
    assert response.status_code == 201, response.json()
    assert response.json()["fair_share_half_life_hours"] == 168.0  # CORRAL_FAIR_SHARE_HALF_LIFE_HOURS' default
    _conforms(schema, "/api/v1/whatif/", "post", response)
    asked = staff.post(URL, {"fair_share_half_life_hours": 12}, format="json").json()
    off = staff.post(URL, {"fair_share_half_life_hours": None}, format="json").json()
    assert (asked["fair_share_half_life_hours"], off["fair_share_half_life_hours"]) == (12.0, None)
    settings.CORRAL_FAIR_SHARE_HALF_LIFE_HOURS = 0
    assert staff.post(URL, {}, format="json").json()["fair_share_half_life_hours"] is None
