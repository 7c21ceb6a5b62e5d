"""``GET /api/v1/nodes/``: a shared GPU holding shares is ``shared`` with its clients counted, not ``allocated``
to one of its jobs; a whole GPU keeps ``allocated``. Ref: #17"""

from __future__ import annotations

from typing import Any

from rest_framework.test import APIClient

from portal.jobs.services import job_submit
from portal.jobs.share_spec import ShareSpec
from portal.scheduler.services import scheduling_round
from tests.fixtures import World
from tests.portal.scheduler.test_share_round import share_gpus


def _gpus(api: APIClient, node: str) -> dict[int, dict[str, Any]]:
    (row,) = [n for n in api.get("/api/v1/nodes/").json()["results"] if n["name"] == node]
    return {g["index"]: g for g in row["gpus"]}


def test_a_shared_gpu_holding_shares_is_shared_with_its_clients(world: World, api: APIClient) -> None:
    node = world.nodes[0]
    share_gpus(node, [0])
    for _ in range(3):
        job_submit(user=world.alice, command="python serve.py", gpus=1, share=ShareSpec(0.25))
    job_submit(user=world.alice, command="python train.py", gpus=1)
    scheduling_round()
    gpus = _gpus(api, node.name)
    assert (gpus[0]["state"], gpus[0]["clients"], gpus[0]["shared"]) == ("shared", 3, True), gpus[0]
    assert gpus[0]["job"] is None  # three jobs hold it: none of them is "the" job
    whole = [g for g in gpus.values() if not g["shared"] and g["state"] == "allocated"]
    assert len(whole) == 1 and whole[0]["clients"] == 0 and whole[0]["job"] is not None, gpus


def test_the_schema_documents_clients_and_the_shared_state(api: APIClient) -> None:
    schema = api.get("/api/v1/schema/", HTTP_ACCEPT="application/vnd.oai.openapi+json").json()
    gpu = schema["components"]["schemas"]["Gpu"]["properties"]
    assert gpu["clients"]["type"] == "integer"
    assert "shared" in gpu["state"]["description"]


def test_a_shared_gpu_without_shares_is_free(world: World, api: APIClient) -> None:
    share_gpus(world.nodes[0], [0])
    gpu = _gpus(api, world.nodes[0].name)[0]
    assert (gpu["state"], gpu["clients"], gpu["shared"], gpu["job"]) == ("free", 0, True, None)
