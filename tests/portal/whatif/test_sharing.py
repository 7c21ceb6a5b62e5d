"""What-if runs with GPU sharing (issue #17): the window's shares of a GPU replayed under each share placer, beside
the policies' table, through the real API, service and task (eager), and the page that shows it."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.contrib.auth.models import AbstractBaseUser
from django.test import Client, TestCase
from rest_framework.test import APIClient

from portal.jobs.models import Job
from portal.nodes.models import Gpu
from portal.whatif.models import WhatIfRun
from tests.fixtures import World, register_node
from tests.history import finished_job
from tests.portal.whatif.test_api import _conforms

URL = "/api/v1/whatif/"
BODY = {"policies": ["fifo"], "nodes": 2, "gpus_per_node": 4, "apply_quotas": False}


@pytest.fixture
def shares(world: World, history: dict[str, Job]) -> list[Job]:
    """Six shares beside the small history: two online services and four offline jobs, an hour each, overlapping."""
    h = timedelta(hours=1)
    jobs = []
    for k in range(6):
        job = finished_job(world.tenant, world.alice, name=f"share{k}", gpus=1, state="succeeded",
                           submitted=k * 0.1 * h, started=k * 0.1 * h, finished=(1 + k * 0.1) * h)  # fmt: skip
        online = k < 2
        Job.objects.filter(pk=job.pk).update(
            gpu_fraction=0.3 if online else 0.25, workload_class="online" if online else "offline"
        )
        jobs.append(job)
    return jobs


def _run(staff: APIClient, **body: Any) -> dict[str, Any]:
    with TestCase.captureOnCommitCallbacks(execute=True):  # the task runs once the run is committed, eagerly
        response = staff.post(URL, {**BODY, **body}, format="json")
    assert response.status_code == 201, response.json()
    done: dict[str, Any] = staff.get(f"{URL}{response.json()['id']}/").json()
    assert done["state"] == "done", done["error"]
    return done


def test_a_run_with_sharing_replays_the_shares_under_each_placer(
    staff: APIClient, root: AbstractBaseUser, shares: list[Job], eager: None
) -> None:
    done = _run(staff, sharing=True, share_placers=["matching", "first-fit"], shared_gpus=2)
    schema = APIClient().get("/api/v1/schema/", HTTP_ACCEPT="application/vnd.oai.openapi+json").json()
    _conforms(schema, "/api/v1/whatif/{id}/", "get", staff.get(f"{URL}{done['id']}/"))  # as documented
    assert (done["sharing"], done["share_placers"], done["shared_gpus"]) == (True, ["matching", "first-fit"], 2)
    sharing = done["results"]["sharing"]
    assert (sharing["gpus"], sharing["shares"]) == (2, 6)  # not the gan job's whole GPU
    assert all(m["tasks"] == 6 for m in sharing["modes"])
    modes = {m["mode"]: m for m in sharing["modes"]}
    assert list(modes) == ["whole-gpu", "matching", "first-fit"]
    # Six jobs on 2 GPUs: a GPU each makes most wait; shares let them run side by side.
    assert modes["matching"]["offline_queue_mean"] < modes["whole-gpu"]["offline_queue_mean"]
    assert modes["matching"]["allocation"] <= 1 and modes["whole-gpu"]["evictions"] == 0
    assert done["results"]["policies"][0]["policy"] == "fifo"  # the policy table is still there

    client = Client()
    client.force_login(root)
    page = client.get(f"/whatif/{done['id']}/").content.decode()
    assert 'data-testid="whatif-share-results"' in page and 'data-testid="whatif-results"' in page
    table = page[page.index('data-testid="whatif-share-results"') :]
    assert all(f"<b>{mode}</b>" in table for mode in modes)
    assert "matching, first-fit on 2 shared GPUs of 80 GiB" in page


def test_a_run_with_sharing_on_the_live_shared_gpus_copies_them(
    staff: APIClient, shares: list[Job], eager: None
) -> None:
    node, _ = register_node("n1", gpus=2)
    Gpu.objects.filter(node=node).update(shared=True, memory_mb=81920, max_clients=8)
    done = _run(staff, sharing=True)
    assert done["shared_gpus"] == 2 and done["share_placers"] == ["first-fit", "best-fit", "matching"]
    run = WhatIfRun.objects.get(pk=done["id"])
    assert run.shared_layout == [["n1", 0, 81920 << 20, 8], ["n1", 1, 81920 << 20, 8]]
    assert [m["mode"] for m in done["results"]["sharing"]["modes"]] == ["whole-gpu", "first-fit", "best-fit",
                                                                         "matching"]  # fmt: skip


def test_a_window_with_no_shares_says_so(
    staff: APIClient, root: AbstractBaseUser, history: dict[str, Job], eager: None
) -> None:
    done = _run(staff, sharing=True, shared_gpus=4)
    assert done["results"]["sharing"]["shares"] == 0 and done["results"]["sharing"]["modes"] == []
    client = Client()
    client.force_login(root)
    page = client.get(f"/whatif/{done['id']}/").content.decode()
    assert "No job in this window asked for a share of a GPU" in page


def test_sharing_off_by_default_replays_no_shares(staff: APIClient, shares: list[Job], eager: None) -> None:
    done = _run(staff)
    assert done["sharing"] is False and done["results"]["sharing"] is None


@pytest.mark.parametrize(
    ("body", "field", "words"),
    [
        ({"sharing": True, "share_placers": ["fastest"], "shared_gpus": 2}, "share_placers", "unknown share placer"),
        ({"sharing": True}, "shared_gpus", "no live GPU accepts shares"),
        ({"sharing": True, "shared_gpus": 0}, "shared_gpus", "greater than or equal to 1"),
        ({"sharing": "maybe"}, "sharing", "valid boolean"),
    ],
)
def test_bad_sharing_input_is_a_400_on_its_field(
    staff: APIClient, shares: list[Job], body: dict[str, Any], field: str, words: str
) -> None:
    response = staff.post(URL, {**BODY, **body}, format="json")
    assert response.status_code == 400
    assert words in " ".join(response.json()[field]), response.json()
    assert not WhatIfRun.objects.exists()


def test_the_form_asks_for_sharing_and_says_what_is_wrong(root: AbstractBaseUser, shares: list[Job]) -> None:
    client = Client()
    client.force_login(root)
    page = client.get("/whatif/").content.decode()
    assert 'data-testid="whatif-share-placers"' in page and 'name="shared_gpus"' in page
    posted = {"policies": ["fifo"], "placement": "count", "preemption_overhead": "0", "cluster": "uniform",
              "nodes": "2", "gpus_per_node": "4", "racks": "1", "sharing": "on"}  # fmt: skip
    response = client.post("/whatif/", posted)
    assert response.status_code == 200
    assert "No live GPU accepts shares" in response.content.decode()
    response = client.post("/whatif/", posted | {"shared_gpus": "2", "share_placers": ["best-fit"]})
    assert response.status_code == 302
    assert WhatIfRun.objects.get().share_placers == ["best-fit"]
