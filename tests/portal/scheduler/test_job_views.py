"""The scheduler's kept job views (issue #16): brought up to date incrementally, always equal to a fresh read."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from portal.jobs.models import Job, JobTask
from portal.jobs.services import job_cancel, job_submit
from portal.nodes.services import TaskReport, node_heartbeat
from portal.scheduler.job_views import active_job_views, forget_job_views
from portal.scheduler.services import scheduling_round
from scheduling.core.model import JobView
from tests.fixtures import World


def fresh() -> list[JobView]:
    forget_job_views()
    return active_job_views()


def test_kept_views_match_a_fresh_read_through_starts_exits_and_cancels(world: World) -> None:
    jobs = [job_submit(user=world.eve, command=f"job {n}", gpus=n % 3 + 1) for n in range(6)]
    assert active_job_views() == fresh()
    scheduling_round()  # some start: state, attempt, start time and GPUs change
    kept = active_job_views()
    assert kept == fresh() and any(view.allocation for view in kept)
    running = Job.objects.filter(state="running").order_by("pk").first()
    assert running is not None
    task = JobTask.objects.get(job=running, attempt=running.attempt)
    report = TaskReport(job=running.pk, attempt=running.attempt, rank=task.rank, state="exited", exit_code=0)
    node_heartbeat(node=task.node, reports=[report])
    job_cancel(job=jobs[-1], by=world.eve)
    kept = active_job_views()
    assert kept == fresh()
    assert running.pk not in {view.id for view in kept}
    assert jobs[-1].pk not in {view.id for view in kept}


def test_an_unchanged_queue_reads_only_what_changes(
    world: World, django_assert_max_num_queries: Callable[..., Any]
) -> None:
    for n in range(5):
        job_submit(user=world.eve, command=f"job {n}", gpus=1)
    scheduling_round()
    active_job_views()
    with django_assert_max_num_queries(2):  # the changing columns, the GPUs running jobs hold; no fixed columns
        active_job_views()
