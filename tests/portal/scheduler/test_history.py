"""Learning policies in the live loop learn from the database's finished jobs, once each. Ref: #3"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from portal.jobs.models import Job, JobTask
from portal.jobs.services import job_cancel, job_submit
from portal.nodes.services import TaskReport, node_heartbeat
from portal.scheduler.policy_cache import forget_policies, live_policy
from portal.scheduler.services import scheduling_round
from tests.fixtures import World


@pytest.fixture(autouse=True)
def _fresh_policies() -> Iterator[None]:
    forget_policies()
    yield
    forget_policies()


def _finish(job: Job, exit_code: int = 0) -> None:
    job.refresh_from_db()
    task = JobTask.objects.get(job=job, attempt=job.attempt)
    node_heartbeat(node=task.node, reports=[TaskReport(job.pk, job.attempt, 0, "exited", exit_code=exit_code)])


def test_gittins_learns_finished_jobs_once(world: World, settings) -> None:  # noqa: ANN001
    settings.CORRAL_POLICY = "tiresias-gittins"
    jobs = [job_submit(user=world.eve, command=f"j{i}", gpus=1) for i in range(3)]
    scheduling_round()
    _finish(jobs[0])
    _finish(jobs[1], exit_code=1)  # failed jobs still tell how long work runs
    cancelled = job_submit(user=world.eve, command="c", gpus=1)
    job_cancel(job=cancelled, by=world.eve)  # cut short by a person: not learned from
    policy = live_policy("tiresias-gittins")
    assert len(policy.pooled) == 2
    assert live_policy("tiresias-gittins") is policy and len(policy.pooled) == 2  # nothing new: nothing re-fed
    _finish(jobs[2])
    scheduling_round()  # the round itself feeds the kept policy
    assert len(live_policy("tiresias-gittins").pooled) == 3


def test_qssf_runs_live(world: World, settings) -> None:  # noqa: ANN001
    settings.CORRAL_POLICY = "qssf"
    job_submit(user=world.eve, command="a", gpus=2)
    result = scheduling_round()
    assert result is not None and result.started == 1
