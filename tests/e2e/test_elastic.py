"""An elastic job with every process real: it starts on all 8 idle GPUs, and when a 4-GPU job arrives the round
sends it SIGUSR1 (it writes its checkpoint), stops it, and starts it again on 4 GPUs beside the newcomer. Ref: #19"""

from __future__ import annotations

import httpx
import pytest

from tests.e2e.harness import Stack, wait_for
from tests.e2e.test_job_lifecycle import events_of, log_of, wait_state

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True), pytest.mark.timeout(120)]

#: Says its size at each start, and writes a "checkpoint" when asked to (the trap runs between two short sleeps).
TRAIN = "trap 'echo checkpoint at $CORRAL_GPUS GPUs' USR1; echo start on $CORRAL_GPUS GPUs; while :; do sleep 0.2; done"


def test_an_elastic_job_gives_gpus_back_through_a_checkpoint(corral_stack: Stack, live_api: httpx.Client) -> None:
    submitted = live_api.post(
        "/api/v1/jobs/", json={"name": "elastic", "command": TRAIN, "gpus": 2, "max_gpus": 8, "tenant": "demo"}
    )
    assert submitted.status_code == 201, submitted.text
    job_id = submitted.json()["id"]
    running = wait_state(live_api, corral_stack, job_id, {"running"})
    assert running["size"] == 8, running
    wait_for(lambda: "start on 8 GPUs" in log_of(live_api, job_id), timeout=15, what="the first start's output")

    other = live_api.post("/api/v1/jobs/", json={"name": "four", "command": "sleep 30", "gpus": 4, "tenant": "demo"})
    assert other.status_code == 201, other.text
    other_id = other.json()["id"]
    wait_for(lambda: "checkpoint at 8 GPUs" in log_of(live_api, job_id), timeout=20, what="the checkpoint signal")
    wait_state(live_api, corral_stack, other_id, {"running"}, timeout=30)
    wait_for(lambda: "start on 4 GPUs" in log_of(live_api, job_id), timeout=30, what="the restart on 4 GPUs")
    kinds = [e["kind"] for e in events_of(live_api, job_id)]
    assert kinds[:2] == ["submitted", "started"] and "stop_scheduled" in kinds and "resized" in kinds, kinds
    assert live_api.get(f"/api/v1/jobs/{job_id}/").json()["size"] == 4
    live_api.post(f"/api/v1/jobs/{job_id}/cancel/")
    live_api.post(f"/api/v1/jobs/{other_id}/cancel/")
