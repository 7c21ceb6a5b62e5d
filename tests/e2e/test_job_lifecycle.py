"""A job's life through the public REST API, with every process real: the portal (live server), a Celery worker
and beat on PostgreSQL and Redis, and two node agents with 4 simulated GPUs each running real shell commands.

Run by `make test`; skipped (with the reason) on SQLite or without REDIS_URL.
"""

from __future__ import annotations

import os
from typing import Any

import httpx
import pytest

from tests.e2e.harness import NODES, Stack, results, wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True), pytest.mark.timeout(120)]

TERMINAL = {"succeeded", "failed", "cancelled"}


def submit(live_api: httpx.Client, command: str, *, gpus: int = 1, name: str = "") -> dict[str, Any]:
    response = live_api.post("/api/v1/jobs/", json={"name": name, "command": command, "gpus": gpus, "tenant": "demo"})
    assert response.status_code == 201, response.text
    job = response.json()
    # The worker may place it before the response is rendered (the round is queued on commit).
    assert job["state"] in {"pending", "running"}, job
    return job


def get_job(live_api: httpx.Client, job_id: int) -> dict[str, Any]:
    response = live_api.get(f"/api/v1/jobs/{job_id}/")
    response.raise_for_status()
    return response.json()


def wait_state(live_api: httpx.Client, stack: Stack, job_id: int, states: set[str], timeout: float = 30) -> dict:
    return wait_for(lambda: (job := get_job(live_api, job_id))["state"] in states and job, timeout=timeout,
                    what=f"job {job_id} to be {' or '.join(sorted(states))}", stack=stack)  # fmt: skip


def log_of(live_api: httpx.Client, job_id: int) -> str:
    response = live_api.get(f"/api/v1/jobs/{job_id}/log/", params={"offset": 0})
    response.raise_for_status()
    assert response.headers["content-type"].startswith("text/plain")
    return response.text


def events_of(live_api: httpx.Client, job_id: int) -> list[dict[str, Any]]:
    response = live_api.get(f"/api/v1/jobs/{job_id}/events/")
    response.raise_for_status()
    return results(response.json())


def test_job_runs_logs_and_records_its_exit(corral_stack: Stack, live_api: httpx.Client) -> None:
    ok = submit(live_api, "echo hello-from-corral; sleep 1", name="hello")
    bad = submit(live_api, "echo about-to-fail >&2; exit 3", name="fails")

    done = wait_state(live_api, corral_stack, ok["id"], TERMINAL)
    assert done["state"] == "succeeded", (done, log_of(live_api, ok["id"]))
    assert done["exit_code"] == 0
    assert done["attempt"] == 1
    assert done["started_at"] and done["finished_at"]
    # The whole log reaches the portal with the exit (the agent sends the rest before it reports "exited"), but
    # allow a heartbeat for it rather than making the test depend on that ordering.
    wait_for(lambda: "hello-from-corral" in log_of(live_api, ok["id"]), timeout=5, what="the job's log")
    kinds = [e["kind"] for e in events_of(live_api, ok["id"])]
    assert kinds[0] == "submitted" and kinds[-1] == "succeeded", kinds
    assert "started" in kinds, kinds
    runner = next(e["actor"] for e in events_of(live_api, ok["id"]) if e["kind"] == "succeeded")
    assert runner in {f"agent:{n}" for n in NODES}, runner

    failed = wait_state(live_api, corral_stack, bad["id"], TERMINAL)
    assert failed["state"] == "failed", failed
    assert failed["exit_code"] == 3
    wait_for(lambda: "about-to-fail" in log_of(live_api, bad["id"]), timeout=5, what="stderr in the job's log")

    # Nothing holds GPUs any more.
    nodes = results(live_api.get("/api/v1/nodes/").json())
    assert all(g["state"] == "free" for n in nodes for g in n["gpus"] if n["name"] in NODES), nodes


def test_cancel_kills_a_running_job(corral_stack: Stack, live_api: httpx.Client) -> None:
    job = submit(live_api, "echo cancel-me-started; sleep 600", name="long")
    running = wait_state(live_api, corral_stack, job["id"], {"running"} | TERMINAL)
    assert running["state"] == "running", running
    node = running["node"]
    assert node in NODES, running
    wait_for(lambda: "cancel-me-started" in log_of(live_api, job["id"]), timeout=10, what="the job's first output")
    pids = corral_stack.job_pids(node)
    assert pids, f"no process of job {job['id']} found under the agent's workdir"

    response = live_api.post(f"/api/v1/jobs/{job['id']}/cancel/")
    assert response.status_code == 200, response.text

    cancelled = wait_state(live_api, corral_stack, job["id"], TERMINAL, timeout=20)
    assert cancelled["state"] == "cancelled", cancelled
    wait_for(lambda: not corral_stack.job_pids(node), timeout=5, what="the job's processes to be gone")
    for pid in pids:
        assert not _alive(pid), f"process {pid} of job {job['id']} survived the cancel"
    kinds = [e["kind"] for e in events_of(live_api, job["id"])]
    assert "cancel_requested" in kinds and kinds[-1] == "cancelled", kinds


def test_killed_agent_requeues_its_job_on_the_other_node(corral_stack: Stack, live_api: httpx.Client) -> None:
    # All 4 GPUs of a node, so the job is placed whole on one node and can only restart on the other.
    job = submit(live_api, "echo attempt-$CORRAL_ATTEMPT; sleep 600", gpus=4, name="survivor")
    first = wait_state(live_api, corral_stack, job["id"], {"running"} | TERMINAL)
    assert first["state"] == "running", first
    lost_node = first["node"]
    (other_node,) = set(NODES) - {lost_node}

    corral_stack.procs[lost_node].kill_hard()

    # The beat's liveness sweep notices the silent node (CORRAL_NODE_TIMEOUT=3s in these tests) and requeues the
    # job as a whole; the scheduler then starts attempt 2 on the surviving node.
    again = wait_for(
        lambda: (j := get_job(live_api, job["id"]))["attempt"] >= 2 and j["state"] == "running" and j,
        timeout=45,
        what=f"job {job['id']} to be requeued from {lost_node} and running on {other_node}",
        stack=corral_stack,
    )
    assert again["node"] == other_node, again
    events = events_of(live_api, job["id"])
    requeues = [e for e in events if e["kind"] == "requeued"]
    assert requeues, events
    assert lost_node in requeues[0]["reason"], requeues
    nodes = {n["name"]: n for n in results(live_api.get("/api/v1/nodes/").json())}
    assert nodes[lost_node]["state"] == "down", nodes[lost_node]
    wait_for(lambda: "attempt-2" in log_of(live_api, job["id"]), timeout=10, what="output of the job's second attempt")

    # And it can still be stopped cleanly where it runs now.
    assert live_api.post(f"/api/v1/jobs/{job['id']}/cancel/").status_code == 200
    assert wait_state(live_api, corral_stack, job["id"], TERMINAL, timeout=20)["state"] == "cancelled"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False
