"""Submitting within what exists: the form shows the reader's caps, what their tenant and they use now and the
cluster's free GPUs; a job larger than the cluster is told "the cluster has 8 GPUs" (not the quota's words), and
the API's refusals carry the codes the README lists. One rule (``check_fits``) for the form, the API and the CLI.
Ref: #18 (items 7, 8)"""

from __future__ import annotations

import pytest
from django.test import Client
from rest_framework.test import APIClient

from portal.errors import ClusterTooSmall, OverQuota
from portal.jobs.models import Job
from portal.jobs.services import job_submit
from portal.jobs.submit_outlook import submit_outlook
from portal.nodes.models import Gpu, GpuHealth
from portal.scheduler.services import scheduling_round
from portal.tenants.models import Quota
from tests.fixtures import World


def test_a_job_larger_than_the_cluster_is_told_the_clusters_size_first(world: World) -> None:
    # lab's cap is 6 GPUs, the cluster has 8: a 64-GPU job could never run whatever the cap.
    with pytest.raises(ClusterTooSmall, match="the cluster has 8 GPUs; this job asks for 64"):
        job_submit(user=world.alice, command="x", gpus=64)
    with pytest.raises(OverQuota, match="may use at most 6 GPUs at once; this job asks for 7"):
        job_submit(user=world.alice, command="x", gpus=7)
    Quota.objects.filter(tenant=world.tenant).update(user_gpu_limit=2)
    with pytest.raises(OverQuota, match="each member of 'lab' may use at most 2 GPUs"):
        job_submit(user=world.alice, command="x", gpus=3)
    assert not Job.objects.exists()


@pytest.mark.parametrize(
    ("gpus", "code", "words"),
    [
        (64, "cluster_too_small", "the cluster has 8 GPUs"),
        (7, "quota_exceeded", "tenant 'lab' may use at most 6 GPUs"),
    ],
)
def test_the_api_says_which_limit_with_its_code(api: APIClient, world: World, gpus: int, code: str, words: str) -> None:
    response = api.post("/api/v1/jobs/", {"command": "x", "gpus": gpus}, format="json")
    assert response.status_code == 400, response.content
    body = response.json()
    assert body["code"] == code and words in body["gpus"][0]


def test_the_form_refuses_with_the_same_words(world: World, client: Client) -> None:
    assert client.login(username="alice", password="pw")
    too_big = client.post("/jobs/new/", {"command": "x", "gpus": "64"}).content.decode()
    assert "the cluster has 8 GPUs; this job asks for 64" in too_big and "may use at most" not in too_big
    over_cap = client.post("/jobs/new/", {"command": "x", "gpus": "7"}).content.decode()
    assert "tenant &#x27;lab&#x27; may use at most 6 GPUs" in over_cap
    assert not Job.objects.exists()


def test_the_form_shows_caps_use_and_free_gpus(world: World, client: Client) -> None:
    Quota.objects.filter(tenant=world.tenant).update(user_gpu_limit=4)
    job_submit(user=world.alice, command="a", gpus=2)
    job_submit(user=world.bob, command="b", gpus=1)
    scheduling_round()
    Gpu.objects.filter(uuid="GPU-n2-3").update(health=GpuHealth.UNHEALTHY)
    outlook = submit_outlook(user=world.alice, tenants=[world.tenant])
    (lab,) = outlook.tenants
    assert (lab.gpu_cap, lab.user_cap, lab.tenant_gpus, lab.user_gpus) == (6, 4, 3, 2)
    assert (outlook.cluster_gpus, outlook.free_gpus, outlook.largest_job(lab)) == (8, 4, 4)  # 8 - 3 held - 1 sick

    assert client.login(username="alice", password="pw")
    page = client.get("/jobs/new/").content.decode()
    assert 'data-testid="submit-outlook"' in page
    assert "The cluster has 8 GPUs" in page and "4 free now" in page
    assert "cap 6 GPUs, 3 in use (2 of them yours, at most 4 per member). A job may ask for at most 4 GPUs." in page


def test_shared_gpus_do_not_count_for_whole_gpu_jobs(world: World, client: Client) -> None:
    # n2's four GPUs take shares only (#17): a 6-GPU job would wait for ever on the four whole ones, so it is
    # refused with both numbers, and the form counts the shared GPUs apart.
    Gpu.objects.filter(node__name="n2").update(shared=True)
    with pytest.raises(ClusterTooSmall, match=r"has 4 GPUs for whole-GPU jobs \(4 more take only shares\)"):
        job_submit(user=world.alice, command="x", gpus=6)
    outlook = submit_outlook(user=world.alice, tenants=[world.tenant])
    assert (outlook.cluster_gpus, outlook.free_gpus, outlook.shared_gpus) == (4, 4, 4)
    assert client.login(username="alice", password="pw")
    page = client.get("/jobs/new/").content.decode()
    assert "The cluster has 4 GPUs" in page and "4 shared GPUs" in page
