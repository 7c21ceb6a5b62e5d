"""``corral logs`` says "output still arriving" for a finished job whose last output is still on its way, and
``corral logs -f`` keeps following such a job until all of it has landed. Ref: #15"""

from __future__ import annotations

import threading
import time
from typing import Any

from typer.testing import Result

from tests.cli.conftest import Invoke

# The live-portal fixtures (a live server, a logged-in user, an agent played over the real API) and their helpers;
# pytest finds fixtures by the names a module holds, so tests naming them as arguments carry a noqa for F811.
from tests.cli.test_against_portal import FakeAgent, Portal, agent, logged_in, portal, submit  # noqa: F401


def ship(agent: FakeAgent, order: dict[str, Any], offset: int, data: bytes) -> None:  # noqa: F811
    """Send bytes of the task's log as the agent's log shipper does (``POST /api/v1/agent/logs/``)."""
    where = {"job": order["job"], "attempt": order["attempt"], "rank": order["rank"], "offset": offset}
    for _ in range(50):  # a 5xx is retried, as FakeAgent._post explains (SQLite's table locks)
        response = agent.http.post(
            "/api/v1/agent/logs/", params=where, content=data, headers={"Content-Type": "application/octet-stream"}
        )
        if not response.is_server_error:
            break
        time.sleep(0.05)
    assert response.status_code == 200 and response.json() == {"log_offset": offset + len(data)}, response.text


def test_logs_of_a_finished_job_whose_output_is_still_arriving(corral: Invoke, agent: FakeAgent) -> None:  # noqa: F811
    job_id = submit(corral, "--", "python", "train.py")
    order = agent.start(job_id)
    ship(agent, order, 0, b"epoch 1\n")
    agent.heartbeat(agent.report(order, "exited", exit_code=0, log_offset=8, log_size=8 + 5))

    early = corral("logs", str(job_id))
    assert (early.exit_code, early.stdout) == (0, "epoch 1\n"), early.output
    assert early.stderr.strip() == (
        "Output still arriving: rank 0 on gpu-up has sent 8 bytes of 13 bytes. "
        f"`corral logs -f {job_id}` prints the rest as it lands."
    )
    assert "Output still arriving" in corral("show", str(job_id)).stdout

    ship(agent, order, 8, b"done\n")
    late = corral("logs", str(job_id))
    assert (late.exit_code, late.stdout, late.stderr) == (0, "epoch 1\ndone\n", "")


def test_logs_follow_a_finished_job_until_its_last_output_lands(corral: Invoke, agent: FakeAgent) -> None:  # noqa: F811
    job_id = submit(corral, "--", "python", "train.py")
    order = agent.start(job_id)
    agent.heartbeat(agent.report(order, "exited", exit_code=0, log_size=12))  # the job ended; no output here yet
    outcome: list[Result] = []
    follower = threading.Thread(target=lambda: outcome.append(corral("logs", "-f", "--interval", "0.1", str(job_id))))
    follower.start()
    time.sleep(0.5)
    assert follower.is_alive(), "logs -f stopped at the job's end, before its output had arrived"
    ship(agent, order, 0, b"first\n")
    time.sleep(0.3)
    assert follower.is_alive()
    ship(agent, order, 6, b"last!\n")
    follower.join(timeout=15)
    assert not follower.is_alive(), "logs -f did not stop once all the output had arrived"
    result = outcome[0]
    assert (result.exit_code, result.stdout) == (0, "first\nlast!\n"), result.output
    assert result.stderr.strip() == f"job {job_id} succeeded (exit code 0)"
