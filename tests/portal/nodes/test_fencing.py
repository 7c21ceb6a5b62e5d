"""The three reproductions of issue #15, each replayed against the real services with fake nodes that say what
really runs: a GPU is never used by two jobs, a job never runs twice, a cap is never overshot.

Each loop runs the portal's round and every node's heartbeat, lets the test's clock move, and checks
:func:`fence_violations` after every step: the ledger must cover every living process, always.
"""

from __future__ import annotations

from datetime import timedelta

from django.db.models import F

from portal.jobs.models import Allocation, Job, JobTask
from portal.jobs.services import job_submit
from portal.nodes.models import Node
from portal.nodes.services import nodes_mark_stale_down
from portal.scheduler.services import scheduling_round
from tests.fixtures import World, agent_client
from tests.portal.nodes.fake_agent import FakeNode, fence_violations


def _tick(fakes: list[FakeNode], seconds: float = 1.0, *, ignore: str = "") -> None:
    """One step of the world: a round, a heartbeat from every node that is heard, time passes; then check."""
    scheduling_round()
    for fake in fakes:
        fake.heartbeat()
    for fake in fakes:
        fake.advance(seconds)
    problems = [p for p in fence_violations(fakes) if not (ignore and ignore in p)]
    assert not problems, problems


def test_a_requeued_gang_does_not_start_again_while_a_rank_still_runs(world: World) -> None:
    """Reproduction 1: a 6-GPU job (cap 6) over n1 (4) and n2 (2); n1's agent is killed and restarts. The rank on
    n2 ignores SIGTERM: attempt 2 starts only once it is dead, and the tenant never holds more than 6 GPUs."""
    fakes = [FakeNode(n) for n in world.nodes]
    job = job_submit(user=world.alice, command="stubborn train", gpus=6)
    _tick(fakes)
    big = next(f for f in fakes if JobTask.objects.get(job=job, rank=0).node_id == f.node.pk)
    small = next(f for f in fakes if f is not big)
    assert len(big.alive()) == 1 and len(small.alive()) == 1
    big.register(clean=True)  # the restarted agent SIGKILLed its orphans, then registered
    seconds_until_restart = 0
    while Job.objects.get(pk=job.pk).attempt == 1:
        _tick(fakes)
        seconds_until_restart += 1
        assert seconds_until_restart < 30
        if any(p.attempt == 1 for p in small.alive()):
            job.refresh_from_db()
            assert job.state == "pending"
            assert job.reason_code in ("previous_attempt_stopping", "tenant_cap_reached")
    assert seconds_until_restart >= 10  # the stubborn rank lived out the kill grace, and attempt 2 waited for it
    _tick(fakes)
    assert {p.attempt for f in fakes for p in f.alive()} == {2}


def test_a_node_that_comes_back_gets_no_work_on_gpus_its_old_job_still_uses(world: World) -> None:
    """Reproduction 2: n1's agent is stopped past the node timeout (n1 marked down, its job requeued); 4-GPU jobs
    queue; the agent resumes. Its heartbeat is told to register again, and n1's GPUs go to no one until it has
    killed its old processes and registered."""
    fakes = [FakeNode(n) for n in world.nodes]
    n1, n2 = fakes
    Node.objects.filter(pk=n2.node.pk).update(state="draining")  # first job on n1
    old = job_submit(user=world.alice, command="train", gpus=4)
    _tick(fakes)
    Node.objects.filter(pk=n2.node.pk).update(state="up")
    assert [p.job for p in n1.alive()] == [old.pk]
    # n1 falls silent (its agent is SIGSTOPped): its process keeps running, unsupervised.
    Node.objects.filter(pk=n1.node.pk).update(last_heartbeat=F("last_heartbeat") - timedelta(minutes=5))
    assert nodes_mark_stale_down() == ["n1"]
    waiting = [job_submit(user=world.eve, command="train", gpus=4) for _ in range(2)]
    silent = [n2]
    for _ in range(3):  # nothing is placed on n1, whose GPUs are fenced
        # The old job may start again on n2: a down node is fenced. (Its processes on n1 run on here because this
        # test has no agent to kill them; the real agent's watchdog does at its lease, see tests/agent.)
        _tick(silent, ignore="runs attempts")
        _check_no_overlap_with(n1)
    # The fenced GPUs still count against the old job's tenant (cap 6): it cannot start a second copy beside them.
    old.refresh_from_db()
    assert (old.state, old.reason_code) == ("pending", "tenant_cap_reached")
    assert [p.job for p in n2.alive()] == [waiting[0].pk]
    # The agent resumes: its heartbeat is refused, nothing new is placed on n1 while the old process lives.
    assert agent_client(world.tokens["n1"]).post("/api/v1/agent/heartbeat/", {"tasks": []}, format="json").json() == {
        "detail": "register again"
    }
    assert not n1.heartbeat()
    _tick(silent, ignore="runs attempts")
    _check_no_overlap_with(n1)
    n1.register(clean=True)  # kills the stale duplicate at once, then registers
    for _ in range(3):
        _tick(fakes)
    assert [(p.job, p.attempt) for p in n1.alive()] == [(old.pk, 2)]  # n1's GPUs are offered again
    assert Job.objects.get(pk=waiting[1].pk).state == "pending"


def _check_no_overlap_with(fake: FakeNode) -> None:
    """No allocation made after ``fake``'s processes started covers a GPU one of them still uses."""
    for p in fake.alive():
        holders = set(
            Allocation.objects.filter(node=fake.node, gpu__index__in=p.gpus, released_at__isnull=True).values_list(
                "job_id", "attempt"
            )
        )
        assert holders == {(p.job, p.attempt)}, holders


def test_caps_hold_while_time_limited_jobs_that_ignore_sigterm_are_killed(world: World) -> None:
    """Reproduction 3: 40 one-GPU jobs with a 2 s time limit that ignore SIGTERM, in a tenant capped at 6. Each
    keeps its GPU until SIGKILL ends it, and the tenant never holds more than its cap meanwhile."""
    fakes = [FakeNode(n) for n in world.nodes]
    jobs = [job_submit(user=world.alice, command="stubborn step", gpus=1, time_limit=2) for _ in range(40)]
    for _ in range(200):
        _tick(fakes, seconds=3.0)
        # Three seconds pass for the portal too: every running job is past its 2 s limit at the next round.
        Job.objects.filter(state="running").update(started_at=F("started_at") - timedelta(seconds=3))
        if not Job.objects.filter(pk__in=[j.pk for j in jobs], state__in=["pending", "running"]).exists():
            break
    assert set(Job.objects.filter(pk__in=[j.pk for j in jobs]).values_list("state", flat=True)) == {"failed"}
    for _ in range(5):
        _tick(fakes, seconds=3.0)
    assert not Allocation.objects.filter(released_at__isnull=True).exists()
