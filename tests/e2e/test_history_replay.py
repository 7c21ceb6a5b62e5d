"""Replaying the cluster's own history: jobs run for real, an admin exports them, the simulator replays them.
Ref: #3. Run by `make test`; skipped (with the reason) on SQLite or without REDIS_URL."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest
import typer
from typer.testing import CliRunner

from scheduling.sim import cli as sim_cli
from scheduling.sim.trace import read_trace
from tests.e2e.harness import Stack, api_client, obtain_token, wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True), pytest.mark.timeout(120)]


def test_finished_jobs_export_as_a_trace_that_every_policy_replays(
    corral_stack: Stack, live_api: httpx.Client, tmp_path: Path
) -> None:
    specs = [("short", "sleep 1", 1), ("pair", "sleep 2", 2), ("broken", "exit 3", 1)]
    ids = {}
    for name, command, gpus in specs:
        response = live_api.post(
            "/api/v1/jobs/", json={"name": name, "command": command, "gpus": gpus, "tenant": "demo"}
        )
        assert response.status_code == 201, response.text
        ids[name] = response.json()["id"]

    def all_done() -> bool:
        return all(live_api.get(f"/api/v1/jobs/{i}/").json()["state"] in {"succeeded", "failed"} for i in ids.values())

    wait_for(all_done, timeout=40, what="the three jobs to finish", stack=corral_stack)

    with api_client(corral_stack.url) as anonymous:
        staff = obtain_token(anonymous, "e2e-staff", "e2e-staff")
    with api_client(corral_stack.url, staff) as admin:
        response = admin.get("/api/v1/history/trace/", headers={"Accept": "text/csv"})
    assert response.status_code == 200, response.text
    path = tmp_path / "history.csv"
    path.write_bytes(response.content)

    jobs = {j.name: j for j in read_trace(path)}
    assert set(jobs) == set(ids)
    assert (jobs["short"].status, jobs["pair"].status, jobs["broken"].status) == ("completed", "completed", "failed")
    assert (jobs["short"].gpus, jobs["pair"].gpus, jobs["short"].user, jobs["short"].tenant) == (1, 2, "demo", "demo")
    # Each duration is the time its processes held GPUs: at least the sleep, at most a few heartbeats more.
    assert 1 <= jobs["short"].duration < 15 and 2 <= jobs["pair"].duration < 15, jobs
    assert all(j.queue_delay is not None and j.queue_delay >= 0 for j in jobs.values())

    app = typer.Typer()
    sim_cli.register(app)
    app.command("noop")(lambda: None)  # a second command keeps typer from collapsing the app into ``simulate``
    result = CliRunner().invoke(
        app, ["simulate", "--trace", str(path), "--policy", "all", "--nodes", "2", "--gpus-per-node", "4", "--json"]
    )
    assert result.exit_code == 0, result.output
    policies: dict[str, Any] = json.loads(result.stdout)["policies"]
    assert {"fifo", "tiresias-gittins", "qssf", "srsf"} <= set(policies)
    assert all(summary["jobs"] == 3 for summary in policies.values()), policies
