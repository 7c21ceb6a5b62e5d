"""What-if runs with elastic capacity (issue #19): one policy of the run replayed with no loaning and no elasticity,
then with elastic jobs and a loaned inference pool, beside the policies' table, through the real API, form, service
and task (eager), and the page that shows both arms. Ref: #19"""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import AbstractBaseUser
from django.test import Client, TestCase
from rest_framework.test import APIClient

from portal.jobs.models import Job
from portal.whatif.elastic_replay import ElasticAsk, elastic_refusal, elastic_rows
from portal.whatif.models import WhatIfRun, WhatIfState
from portal.whatif.services import ReplayCluster, whatif_create, whatif_execute
from tests.portal.whatif.test_api import _conforms

URL = "/api/v1/whatif/"
BODY = {"policies": ["fifo"], "nodes": 2, "gpus_per_node": 4, "apply_quotas": False}
#: The summary keys each arm carries (``ElasticResult.summary``).
ARM_KEYS = {"arm", "jobs", "avg_queue", "avg_jct", "makespan", "usage", "training_usage", "usage_whole_run",
            "preemptions", "resizes", "reclaims", "reclaims_on_time", "reclaim_cost_gpu_hours",
            "lent_node_hours"}  # fmt: skip
POSTED = {"policies": ["fifo"], "placement": "count", "preemption_overhead": "0", "cluster": "uniform",
          "nodes": "2", "gpus_per_node": "4", "racks": "1"}  # fmt: skip


@pytest.fixture
def browser(root: AbstractBaseUser) -> Client:
    client = Client()
    client.force_login(root)
    return client


def _run(staff: APIClient, **body: Any) -> dict[str, Any]:
    with TestCase.captureOnCommitCallbacks(execute=True):  # the task runs once the run is committed, eagerly
        response = staff.post(URL, {**BODY, **body}, format="json")
    assert response.status_code == 201, response.json()
    done: dict[str, Any] = staff.get(f"{URL}{response.json()['id']}/").json()
    assert done["state"] == "done", done["error"]
    return done


def test_a_run_with_elastic_replays_both_arms_and_the_page_shows_them(
    staff: APIClient, browser: Client, history: dict[str, Job], eager: None
) -> None:
    # srtf is preemptive: the elastic replay takes the first listed policy it can, fifo.
    done = _run(staff, policies=["srtf", "fifo"], elastic=True, elastic_share=1.0, elastic_factor=2,
                loan_pool_servers=2, loan_pool_gpus=4, reclaim_deadline=30)  # fmt: skip
    schema = APIClient().get("/api/v1/schema/", HTTP_ACCEPT="application/vnd.oai.openapi+json").json()
    _conforms(schema, "/api/v1/whatif/{id}/", "get", staff.get(f"{URL}{done['id']}/"))  # as documented
    assert done["elastic"] == {"policy": "fifo", "elastic_share": 1.0, "elastic_factor": 2, "loan_pool_servers": 2,
                               "loan_pool_gpus": 4, "reclaim_deadline": 30.0}  # fmt: skip
    elastic = done["results"]["elastic"]
    assert elastic["policy"] == "fifo"
    assert [arm["arm"] for arm in elastic["arms"]] == ["baseline", "elastic"]
    assert all(set(arm) == ARM_KEYS for arm in elastic["arms"])
    base, grown = elastic["arms"]
    assert base["jobs"] == grown["jobs"] == done["jobs"] == 4  # the jobs the policies replayed
    # The baseline neither lends nor grows; the elastic arm borrows the idle pool and grows jobs into it.
    assert (base["resizes"], base["lent_node_hours"], base["reclaims"]) == (0, 0.0, 0)
    assert grown["lent_node_hours"] > 0 and grown["resizes"] > 0
    assert grown["avg_jct"] < base["avg_jct"]
    assert [p["policy"] for p in done["results"]["policies"]] == ["srtf", "fifo"]  # the policy table is still there

    page = browser.get(f"/whatif/{done['id']}/").content.decode()
    assert 'data-testid="whatif-elastic-results"' in page and 'data-testid="whatif-results"' in page
    table = page[page.index('data-testid="whatif-elastic-results"') : page.index('data-testid="whatif-elastic-note"')]
    assert "<b>baseline</b>" in table and "<b>elastic</b>" in table
    assert "Replayed under fifo: the first policy of this run that the elastic replay takes" in page
    assert "a loan pool of 2 servers of 4 GPUs, reclaimed with a 30 s deadline" in page


def test_elastic_is_off_by_default_and_changes_nothing(staff: APIClient, history: dict[str, Job], eager: None) -> None:
    plain = _run(staff)
    assert plain["elastic"] is None and plain["results"]["elastic"] is None
    assert WhatIfRun.objects.get(pk=plain["id"]).elastic_results is None
    # Asking for it adds its table and leaves the policies' replay as it was.
    asked = _run(staff, elastic=True, loan_pool_servers=1)
    assert asked["results"]["policies"] == plain["results"]["policies"]
    assert asked["results"]["observed"] == plain["results"]["observed"]
    assert asked["elastic"]["elastic_share"] == 0.5 and asked["elastic"]["loan_pool_gpus"] == 8  # the defaults


def test_the_page_of_a_run_without_elastic_has_no_elastic_table(
    staff: APIClient, browser: Client, history: dict[str, Job], eager: None
) -> None:
    done = _run(staff)
    page = browser.get(f"/whatif/{done['id']}/").content.decode()
    assert 'data-testid="whatif-results"' in page and "whatif-elastic" not in page


@pytest.mark.parametrize(
    ("body", "field", "words"),
    [
        ({"elastic_share": 1.5}, "elastic_share", "less than or equal to 1"),
        ({"elastic_share": -0.1}, "elastic_share", "greater than or equal to 0"),
        ({"elastic_factor": 0}, "elastic_factor", "greater than or equal to 1"),
        ({"elastic_factor": 2.5}, "elastic_factor", "valid integer"),
        ({"loan_pool_servers": -1}, "loan_pool_servers", "greater than or equal to 0"),
        ({"loan_pool_gpus": 0}, "loan_pool_gpus", "greater than or equal to 1"),
        ({"reclaim_deadline": 600}, "reclaim_deadline", "under 600"),
        ({"reclaim_deadline": "soon"}, "reclaim_deadline", "valid number"),
        ({"elastic_share": 0}, "elastic_share", "both arms are the same"),
        ({"policies": ["srtf", "fifo+quota"]}, "elastic", "non-preemptive policy without quotas"),
        ({"elastic": "maybe"}, "elastic", "valid boolean"),
    ],
)
def test_bad_elastic_input_is_a_400_on_its_field(
    staff: APIClient, history: dict[str, Job], body: dict[str, Any], field: str, words: str
) -> None:
    response = staff.post(URL, {**BODY, "elastic": True, **body}, format="json")
    assert response.status_code == 400
    assert words in " ".join(response.json()[field]), response.json()
    assert not WhatIfRun.objects.exists()


def test_the_form_asks_for_elastic_and_says_what_is_wrong(browser: Client, history: dict[str, Job]) -> None:
    page = browser.get("/whatif/").content.decode()
    assert "Also replay with elastic jobs and a loaned inference pool" in page
    for name in ("elastic_share", "elastic_factor", "loan_pool_servers", "loan_pool_gpus", "reclaim_deadline"):
        assert f'name="{name}"' in page
    assert 'name="elastic_share" value="0.5"' in page and 'name="elastic_factor" value="4"' in page

    bad = POSTED | {"elastic": "on", "elastic_share": "2", "elastic_factor": "x", "reclaim_deadline": "900",
                    "loan_pool_servers": "1"}  # fmt: skip
    response = browser.post("/whatif/", bad)
    assert response.status_code == 200
    text = response.content.decode()
    assert "Enter a share of jobs from 0 to 1." in text and "Enter a whole number." in text
    response = browser.post("/whatif/", POSTED | {"elastic": "on", "elastic_share": "0.5", "reclaim_deadline": "900",
                                                   "loan_pool_servers": "1"})  # fmt: skip
    assert response.status_code == 200
    assert "Enter seconds from 0 to under 600 (the pool&#x27;s demand step)." in response.content.decode()
    response = browser.post("/whatif/", POSTED | {"elastic": "on", "elastic_share": "0"})
    assert response.status_code == 200 and "both arms are the same" in response.content.decode()
    response = browser.post("/whatif/", POSTED | {"elastic": "on", "policies": ["srtf"]})
    assert response.status_code == 200
    assert "The elastic replay takes a non-preemptive policy without quotas" in response.content.decode()
    assert not WhatIfRun.objects.exists()

    # Unticked, the inputs are ignored, their errors too; ticked with empty inputs, they take their defaults.
    response = browser.post("/whatif/", bad | {"elastic": ""})
    assert response.status_code == 302
    assert WhatIfRun.objects.get().elastic is None
    response = browser.post("/whatif/", POSTED | {"elastic": "on", "loan_pool_servers": "3"})
    assert response.status_code == 302
    assert WhatIfRun.objects.first().elastic == {  # type: ignore[union-attr]
        "policy": "fifo", "elastic_share": 0.5, "elastic_factor": 4, "loan_pool_servers": 3, "loan_pool_gpus": 8,
        "reclaim_deadline": 60.0,
    }  # fmt: skip


def test_a_stored_ask_the_rules_refuse_fails_the_run_in_words(root: AbstractBaseUser, history: dict[str, Job]) -> None:
    run = whatif_create(user=root, policies=["fifo"], placement="count", preemption_overhead="0",
                        cluster=ReplayCluster.UNIFORM, nodes=2, gpus_per_node=4, elastic=ElasticAsk())  # fmt: skip
    WhatIfRun.objects.filter(pk=run.pk).update(elastic={**run.elastic, "policy": "srtf"})  # no form writes this
    failed = whatif_execute(run.pk)
    assert failed is not None and failed.state == WhatIfState.FAILED
    assert failed.error.startswith("The run's stored elastic parameters are refused: the elastic replay takes")
    assert failed.elastic_results is None


def test_the_rules_and_the_rows() -> None:
    assert elastic_refusal(["fifo"], None) is None
    assert elastic_refusal(["fifo"], ElasticAsk(elastic_share=float("nan"))).field == "elastic_share"  # type: ignore[union-attr]
    assert elastic_refusal(["tiresias-las", "sjf"], ElasticAsk()) is None  # sjf is taken
    arm = {"jobs": 3, "avg_queue": 90.0, "avg_jct": 7200.0, "usage": 0.5, "training_usage": 0.25, "reclaims": 0,
           "reclaims_on_time": 0, "preemptions": 0, "resizes": 0, "lent_node_hours": 0.0}  # fmt: skip
    rows = elastic_rows([{"arm": "baseline", **arm}, {"arm": "elastic", **arm, "reclaims": 4, "reclaims_on_time": 3}])
    assert (rows[0].reclaims, rows[1].reclaims) == ("—", "3 / 4")
    # Both time columns in the one unit the longest calls for, as `corral simulate --loan-pool` prints them.
    assert (rows[0].usage, rows[0].avg_jct.split()[-1], rows[0].avg_queue.split()[-1]) == ("50.0%", "h", "h")
