"""``corral jobs`` and ``corral show`` say why a job ended, in the portal's words (the API's ``finish_reason``): a
cancelled job reads "cancelled by alice", not "exit -15"; a job past its time limit says so. Ref: #18"""

from __future__ import annotations

import re
from datetime import timedelta

from django.utils import timezone

from portal.jobs.services import jobs_enforce_time_limits
from tests.cli.conftest import Invoke

# The live-portal fixtures; pytest finds fixtures by the names a module holds, so tests naming them as arguments
# carry a noqa for F811.
from tests.cli.test_against_portal import FakeAgent, agent, logged_in, portal, submit  # noqa: F401


def _row(corral: Invoke, job_id: int) -> str:
    return next(line for line in corral("jobs").stdout.splitlines() if line.lstrip().startswith(str(job_id)))


def test_a_cancelled_job_reads_who_cancelled_it(corral: Invoke, agent: FakeAgent) -> None:  # noqa: F811
    job_id = submit(corral, "--", "sleep", "600")
    order = agent.start(job_id)
    assert corral("cancel", str(job_id)).exit_code == 0
    agent.heartbeat(agent.report(order, "exited", exit_code=-15))
    row = _row(corral, job_id)
    assert "cancelled by alice" in row and "-15" not in row
    detail = corral("show", str(job_id)).stdout
    assert re.search(r"Why it ended\s+cancelled by alice", detail) and "Exit code" not in detail


def test_a_job_past_its_time_limit_says_so(corral: Invoke, agent: FakeAgent) -> None:  # noqa: F811
    job_id = submit(corral, "--time-limit", "20s", "--", "sleep", "600")
    agent.start(job_id)
    jobs_enforce_time_limits(now=timezone.now() + timedelta(seconds=25))
    assert "time limit of 20s exceeded" in _row(corral, job_id)
    assert re.search(r"Why it ended\s+time limit of 20s exceeded", corral("show", str(job_id)).stdout)
