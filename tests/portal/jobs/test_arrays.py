"""Job arrays on the real database: creation in bulk, quotas, the %N limit through real scheduling rounds, cancelling
a whole array or one task (the environment a task's processes get: tests/portal/nodes/test_array_env.py).
Ref: #16"""

from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from portal.errors import Conflict, NotAllowed, QuotaExceeded, ValidationFailed
from portal.jobs.array_selectors import array_state_counts, array_tasks_held_back
from portal.jobs.array_services import job_array_cancel, job_array_submit
from portal.jobs.models import EventKind, Job, JobArray, JobEvent, JobTask
from portal.jobs.services import job_cancel, job_submit
from portal.nodes.models import Node
from portal.nodes.services import TaskReport, node_heartbeat
from portal.scheduler.services import scheduling_round
from portal.tenants.models import Quota
from scheduling.core.model import WaitReason
from tests.concurrency import run_together
from tests.fixtures import World


def _tasks(job_array: JobArray) -> list[Job]:
    return list(Job.objects.filter(array=job_array).order_by("array_index"))


def _states(job_array: JobArray) -> dict[int, str]:
    return dict(Job.objects.filter(array=job_array).values_list("array_index", "state"))


def _run_and_exit(job: Job, exit_code: int = 0) -> None:
    """Play the agent: the task's process starts, then exits."""
    task = JobTask.objects.get(job=job, attempt=job.attempt)
    node = Node.objects.get(pk=task.node_id)
    node_heartbeat(node=node, reports=[TaskReport(job.pk, job.attempt, 0, "running", pid=7)])
    node_heartbeat(node=node, reports=[TaskReport(job.pk, job.attempt, 0, "exited", exit_code=exit_code)])


def test_an_array_is_one_row_with_a_task_job_and_a_submitted_event_per_index(world: World) -> None:
    job_array = job_array_submit(user=world.alice, command="python sweep.py", gpus=1, array="1,3,5-7%2", name="sweep")
    assert (job_array.task_count, job_array.limit, job_array.spec) == (5, 2, "1,3,5-7%2")
    assert (job_array.index_min, job_array.index_max, job_array.tenant) == (1, 7, world.tenant)
    tasks = _tasks(job_array)
    assert [t.array_index for t in tasks] == [1, 3, 5, 6, 7]
    assert [t.name for t in tasks] == ["sweep[1]", "sweep[3]", "sweep[5]", "sweep[6]", "sweep[7]"]
    assert {(t.state, t.gpus, t.command, t.tenant_id, t.user_id) for t in tasks} == {
        ("pending", 1, "python sweep.py", world.tenant.pk, world.alice.pk)
    }
    events = JobEvent.objects.filter(job__array=job_array)
    assert sorted(events.values_list("job_id", flat=True)) == sorted(t.pk for t in tasks)
    assert set(events.values_list("kind", "to_state", "actor")) == {("submitted", "pending", "alice")}


def test_creation_costs_a_few_queries_and_multi_row_inserts(world: World) -> None:
    """bulk_create for the tasks and their events: beside the inserts, 400 tasks cost the queries 4 do, and each
    insert writes many rows (a benchmark times 10,000 on PostgreSQL, where one statement writes 1,000)."""
    others, inserts = [], []
    for spec in ("0-3", "0-399"):
        with CaptureQueriesContext(connection) as queries:
            job_array_submit(user=world.eve, command="x", gpus=1, array=spec)
        sql = [q["sql"].lstrip().upper() for q in queries.captured_queries]
        inserts.append(sum(s.startswith("INSERT") for s in sql))
        others.append(len(sql) - inserts[-1])
    assert others[0] == others[1] and others[1] <= 8, others
    assert inserts[1] <= 2 * -(-400 // 25) + 1, inserts  # at least 25 rows a statement, even on SQLite


@pytest.mark.parametrize(
    ("spec", "words"),
    [
        ("5-1", "goes down"),
        ("0-10000000", "at most 100,000"),
        ("a-b", "not an index"),
        ("0-9%0", "at least 1"),
        ("", "give the array's task indices"),
        ("-3", "cannot be negative"),
        ("4000001", "largest allowed"),
    ],
)
def test_a_bad_spec_is_refused_on_the_array_field(world: World, spec: str, words: str) -> None:
    with pytest.raises(ValidationFailed) as refused:
        job_array_submit(user=world.alice, command="x", gpus=1, array=spec)
    assert refused.value.field == "array" and words in refused.value.message
    assert not JobArray.objects.exists() and not Job.objects.exists()


def test_the_task_cap_is_a_setting(world: World, settings) -> None:  # noqa: ANN001
    settings.CORRAL_MAX_ARRAY_TASKS = 10
    with pytest.raises(ValidationFailed, match="at most 10"):
        job_array_submit(user=world.alice, command="x", gpus=1, array="0-10")
    assert job_array_submit(user=world.alice, command="x", gpus=1, array="0-9").task_count == 10


def test_an_array_passes_the_checks_a_job_passes(world: World) -> None:
    with pytest.raises(ValidationFailed, match="at most 6 GPUs") as refused:
        job_array_submit(user=world.alice, command="x", gpus=7, array="0-3")  # more than the tenant's cap
    assert refused.value.field == "gpus"
    with pytest.raises(ValidationFailed, match="set by Corral"):
        job_array_submit(user=world.alice, command="x", gpus=1, array="0-3", env={"CORRAL_ARRAY_TASK_ID": "9"})


def test_every_task_counts_against_the_active_job_limit(world: World) -> None:
    Quota.objects.filter(tenant=world.tenant).update(max_active_jobs=5)
    job_submit(user=world.bob, command="one", gpus=1)
    with pytest.raises(QuotaExceeded, match="has 1; this array would add 5"):
        job_array_submit(user=world.alice, command="x", gpus=1, array="0-4")
    assert not JobArray.objects.exists()  # nothing half-made
    job_array_submit(user=world.alice, command="x", gpus=1, array="0-3")
    with pytest.raises(QuotaExceeded):
        job_submit(user=world.alice, command="one more", gpus=1)


def test_tasks_are_scheduled_like_jobs_within_the_tenant_cap(world: World) -> None:
    job_array = job_array_submit(user=world.alice, command="x", gpus=1, array="0-9")  # lab may use 6 GPUs
    scheduling_round()
    states = _states(job_array)
    assert sorted(i for i, s in states.items() if s == "running") == [0, 1, 2, 3, 4, 5]
    waiting = Job.objects.filter(array=job_array, state="pending")
    assert set(waiting.values_list("reason_code", flat=True)) == {WaitReason.TENANT_CAP_REACHED.value}


def test_the_limit_holds_tasks_back_lowest_indices_first(world: World) -> None:
    job_array = job_array_submit(user=world.eve, command="x", gpus=1, array="10-15%2")
    result = scheduling_round()
    assert result is not None
    assert _states(job_array) == {
        10: "running",
        11: "running",
        12: "pending",
        13: "pending",
        14: "pending",
        15: "pending",
    }
    held = Job.objects.filter(array=job_array, state="pending")
    assert set(held.values_list("reason_code", flat=True)) == {WaitReason.ARRAY_LIMIT.value}
    assert all(f"array {job_array.pk} runs at most 2 tasks at once" in job.reason for job in held)
    assert scheduling_round() is not None
    assert sum(s == "running" for s in _states(job_array).values()) == 2  # a second round starts no more

    _run_and_exit(Job.objects.get(array=job_array, array_index=10))
    scheduling_round()
    states = _states(job_array)
    assert (states[10], states[11], states[12], states[13]) == ("succeeded", "running", "running", "pending")


def test_a_job_behind_a_limited_array_is_not_blocked_by_its_held_tasks(world: World) -> None:
    job_array = job_array_submit(user=world.eve, command="x", gpus=1, array="0-99%1")
    later = job_submit(user=world.eve, command="later", gpus=1)
    scheduling_round()
    assert sum(s == "running" for s in _states(job_array).values()) == 1
    assert Job.objects.get(pk=later.pk).state == "running"  # FIFO does not wait behind tasks the limit holds


def test_held_back_tasks_are_found_in_one_query_whatever_the_number_of_arrays(
    world: World, django_assert_num_queries
) -> None:  # noqa: ANN001
    arrays = [job_array_submit(user=world.eve, command="x", gpus=1, array=f"0-{n}%2") for n in (4, 9, 19)]
    job_array_submit(user=world.eve, command="no limit", gpus=1, array="0-9")
    with django_assert_num_queries(1):
        held = array_tasks_held_back()
    assert len(held) == 3 + 8 + 18
    assert {held[t.pk] for t in _tasks(arrays[0])[2:]} == {f"array {arrays[0].pk} runs at most 2 tasks at once"}


def test_cancelling_an_array_cancels_pending_tasks_at_once_and_stops_running_ones(world: World) -> None:
    job_array = job_array_submit(user=world.eve, command="x", gpus=1, array="0-9%3")
    scheduling_round()
    running = list(Job.objects.filter(array=job_array, state="running"))
    assert len(running) == 3
    result = job_array_cancel(job_array=job_array, by=world.eve)
    assert (result.cancelled, result.stopping) == (7, 3)
    states = _states(job_array)
    assert sorted(i for i, s in states.items() if s == "cancelled") == [3, 4, 5, 6, 7, 8, 9]
    for job in Job.objects.filter(array=job_array, state="cancelled"):
        assert job.finished_at is not None
        assert list(job.events.values_list("kind", flat=True)) == [EventKind.SUBMITTED, EventKind.CANCELLED]
    for job in running:  # job_cancel's semantics: asked to stop, cancelled once its processes are gone
        job.refresh_from_db()
        assert job.state == "running" and job.cancel_requested_at is not None
        assert JobTask.objects.get(job=job, attempt=job.attempt).kill_requested
    _run_and_exit(running[0], exit_code=143)
    assert Job.objects.get(pk=running[0].pk).state == "cancelled"


def test_one_task_can_be_cancelled_alone(world: World) -> None:
    job_array = job_array_submit(user=world.alice, command="x", gpus=1, array="0-2")
    task = Job.objects.get(array=job_array, array_index=1)
    job_cancel(job=task, by=world.alice)
    assert _states(job_array) == {0: "pending", 1: "cancelled", 2: "pending"}
    counts = array_state_counts(array_ids=[job_array.pk])[job_array.pk]
    assert counts.text() == "2 pending · 1 cancelled"


def test_who_may_cancel_an_array(world: World) -> None:
    job_array = job_array_submit(user=world.alice, command="x", gpus=1, array="0-2")
    with pytest.raises(NotAllowed):
        job_array_cancel(job_array=job_array, by=world.bob)  # a member, not its owner
    assert job_array_cancel(job_array=job_array, by=world.admin).cancelled == 3  # the tenant's admin
    with pytest.raises(Conflict, match="no pending or running tasks"):
        job_array_cancel(job_array=job_array, by=world.alice)


pg_only = pytest.mark.skipif(connection.vendor != "postgresql", reason="row locks need PostgreSQL (make test runs it)")


@pg_only
@pytest.mark.django_db(transaction=True)
def test_concurrent_arrays_cannot_exceed_the_active_job_limit(world: World) -> None:
    """Six threads race to submit 4-task arrays into a tenant allowed 10 active jobs: the quota row lock lets two
    through, whole, and refuses the rest, whole."""
    Quota.objects.filter(tenant=world.tenant).update(max_active_jobs=10)
    outcomes = run_together(lambda: job_array_submit(user=world.alice, command="x", gpus=1, array="0-3"), threads=6)
    assert sum(isinstance(o, JobArray) for o in outcomes) == 2, outcomes
    assert all(isinstance(o, (JobArray, QuotaExceeded)) for o in outcomes), outcomes
    assert Job.objects.filter(tenant=world.tenant).count() == 8


@pg_only
@pytest.mark.django_db(transaction=True)
def test_cancel_and_a_round_at_once_leave_no_task_half_cancelled(world: World) -> None:
    """A round starting tasks and a cancel of their array race: every task ends cancelled or asked to stop, each
    with one event for each state change."""
    job_array = job_array_submit(user=world.eve, command="x", gpus=1, array="0-49")

    def either(which: list[str]) -> object:
        return scheduling_round() if which.pop() == "round" else job_array_cancel(job_array=job_array, by=world.eve)

    order = ["round", "cancel"]
    run_together(lambda: either(order), threads=2)
    for job in Job.objects.filter(array=job_array):
        assert job.state == "cancelled" or job.cancel_requested_at is not None, (job.pk, job.state)
        kinds = list(job.events.values_list("kind", flat=True))
        assert kinds.count(EventKind.SUBMITTED) == 1 and kinds.count(EventKind.CANCELLED) <= 1, kinds
