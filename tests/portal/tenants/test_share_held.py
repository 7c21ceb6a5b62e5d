"""The tenants page and ``GET /api/v1/tenants/`` count a share of a GPU as its fraction of GPUs held, as the caps
count it (``portal.jobs.share_selectors.gpu_use_by_user``), not as one whole GPU. Ref: #17"""

from __future__ import annotations

from django.test import Client
from django.utils import timezone
from rest_framework.test import APIClient

from portal.jobs.models import Allocation
from portal.jobs.services import job_submit
from portal.jobs.share_spec import ShareSpec
from portal.scheduler.services import scheduling_round
from tests.fixtures import World
from tests.portal.scheduler.test_share_round import share_gpus
from tests.portal.tenants.history import held
from tests.portal.tenants.test_api import conforms


def _two_quarter_shares_and_a_whole_gpu(world: World) -> None:
    """alice's tenant (lab) runs two 0.25 shares of one shared GPU and one whole GPU: 1.5 GPUs held."""
    share_gpus(world.nodes[0], [0])
    for _ in range(2):
        job_submit(user=world.alice, command="python serve.py", gpus=1, share=ShareSpec(0.25))
    scheduling_round()
    assert Allocation.objects.filter(released_at__isnull=True, compute_percent__isnull=False).count() == 2
    held(world.alice, 1, timezone.now(), None)


def test_the_api_counts_a_share_as_its_fraction(world: World, api: APIClient) -> None:
    _two_quarter_shares_and_a_whole_gpu(world)
    body = api.get("/api/v1/tenants/").json()
    (lab,) = body["tenants"]
    assert (lab["slug"], lab["gpus_held"], lab["borrowed"]) == ("lab", 1.5, 1.5)
    conforms(body)  # a number now, and the schema says so


def test_the_page_counts_a_share_as_its_fraction(world: World, client: Client) -> None:
    _two_quarter_shares_and_a_whole_gpu(world)
    assert client.login(username="alice", password="pw")
    page = client.get("/tenants/").content.decode()
    assert "1.5 GPUs, all borrowed" in page, page
