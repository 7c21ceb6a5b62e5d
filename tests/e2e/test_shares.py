"""Shares of a GPU end to end, with every process real (issue #17): an admin shares a node's simulated GPUs, two
shares submitted through the API land on them, and the agent starts each under (simulated) MPS with the limits the
portal chose, visible in the job's own environment. Ref: #17"""

from __future__ import annotations

import httpx
import pytest

from portal.nodes.models import Gpu
from portal.nodes.sharing import gpus_set_shared
from tests.e2e.harness import NODES, Stack, wait_for
from tests.e2e.test_job_lifecycle import TERMINAL, get_job, log_of, wait_state

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True), pytest.mark.timeout(120)]

PRINT_ENV = 'echo "share=$CUDA_MPS_ACTIVE_THREAD_PERCENTAGE mem=$CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"; sleep 1'


def test_shares_run_under_mps_with_the_portals_limits(corral_stack: Stack, live_api: httpx.Client) -> None:
    shared_node = NODES[1]
    ids = list(Gpu.objects.filter(node__name=shared_node, index=0).values_list("pk", flat=True))
    assert gpus_set_shared(gpu_ids=ids, shared=True, by="e2e") == 1
    jobs = []
    for fraction, klass in ((0.5, "online"), (0.1, "offline")):
        body = {"command": PRINT_ENV, "gpus": fraction, "gpu_memory": "8G", "workload_class": klass, "tenant": "demo"}
        response = live_api.post("/api/v1/jobs/", json=body)
        assert response.status_code == 201, response.text
        jobs.append(response.json()["id"])
    for job_id, percent in zip(jobs, (50, 10), strict=True):
        done = wait_state(live_api, corral_stack, job_id, TERMINAL, timeout=40)
        assert (done["state"], done["node"], done["gpu_indices"]) == ("succeeded", shared_node, [0]), done
        wait_for(lambda j=job_id: "share=" in log_of(live_api, j), timeout=10, what="the job's output")
        assert f"share={percent} mem=0=8192M" in log_of(live_api, job_id)
    assert get_job(live_api, jobs[0])["gpu_fraction"] == 0.5
