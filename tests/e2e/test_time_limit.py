"""A job past its time limit, with every process real: the round (Celery worker and beat) fails it, the agent's
SIGTERM stops ``sleep``, and its GPU is free again. Ref: #4"""

from __future__ import annotations

import httpx
import pytest

from tests.e2e.harness import NODES, Stack, results, wait_for
from tests.e2e.test_job_lifecycle import TERMINAL, events_of, get_job, log_of, wait_state

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True), pytest.mark.timeout(120)]


def test_a_job_past_its_time_limit_is_stopped_and_fails(corral_stack: Stack, live_api: httpx.Client) -> None:
    response = live_api.post(
        "/api/v1/jobs/",
        json={"name": "overrun", "command": "echo started; sleep 60", "gpus": 1, "tenant": "demo", "time_limit": 2},
    )
    assert response.status_code == 201, response.text
    job_id = response.json()["id"]
    running = wait_state(live_api, corral_stack, job_id, {"running"} | TERMINAL)
    node = running["node"]
    assert node in NODES, running
    wait_for(lambda: "started" in log_of(live_api, job_id), timeout=10, what="the job's first output")

    failed = wait_state(live_api, corral_stack, job_id, TERMINAL, timeout=20)
    assert (failed["state"], failed["exit_code"], failed["time_limit"]) == ("failed", None, 2), failed
    (event,) = [e for e in events_of(live_api, job_id) if e["kind"] == "failed"]
    assert (event["actor"], event["reason"]) == ("scheduler", "time limit of 2s exceeded")

    # The agent stopped the process (well before sleep's 60 s) and its GPU went back to the pool.
    wait_for(lambda: not corral_stack.job_pids(node), timeout=10, what="the job's processes to be gone")
    wait_for(
        lambda: all(g["job"] != job_id for n in results(live_api.get("/api/v1/nodes/").json()) for g in n["gpus"]),
        timeout=10,
        what=f"the GPU of job {job_id} to be released",
    )
    assert get_job(live_api, job_id)["state"] == "failed"  # the SIGTERM exit did not change how it ended
