"""A property-based test of the allocation state machine (issue #15): whatever order submissions, rounds,
heartbeats, exits, cancels, time limits, preemptions, silent nodes, agent restarts and admin releases come in,
what really runs on the fake nodes stays covered by the ledger — no GPU used twice, no job running twice, no
tenant over its cap.

Hypothesis drives the real services; the fake nodes (:mod:`tests.portal.nodes.fake_agent`) say what runs. A node
that falls silent fences itself first, as the real agent does when its lease runs out (tested in tests/agent); a
node may also re-register without a clean slate (a process it could not kill), or be released by an admin after
the machine is known to be off.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import transaction
from django.db.models import F
from hypothesis import HealthCheck
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

from portal.jobs.models import Job
from portal.jobs.services import job_cancel, job_submit
from portal.nodes.models import Node
from portal.nodes.services import node_release_fenced, nodes_mark_stale_down
from portal.scheduler.job_views import forget_job_views
from portal.scheduler.services import scheduling_round
from tests.fixtures import World
from tests.portal.nodes.fake_agent import FakeNode, fence_violations


class FenceMachine(RuleBasedStateMachine):
    """One example: a fresh savepoint over the shared world, rolled back at teardown."""

    world: World

    def __init__(self) -> None:
        super().__init__()
        forget_job_views()  # the rollback of the last example may hand its job ids out again (SQLite)
        self._atomic = transaction.atomic()
        self._atomic.__enter__()
        self.fakes = [FakeNode(Node.objects.get(pk=n.pk)) for n in self.world.nodes]
        self.jobs: list[int] = []

    def teardown(self) -> None:
        transaction.set_rollback(True)
        self._atomic.__exit__(None, None, None)

    @initialize(
        specs=st.lists(
            st.tuples(st.sampled_from(["alice", "bob", "eve"]), st.integers(1, 6), st.booleans(), st.booleans()),
            min_size=2,
            max_size=6,
        )
    )
    def a_busy_cluster(self, specs: list[tuple[str, int, bool, bool]]) -> None:
        """Start from jobs already placed and running: the interesting steps happen to running jobs."""
        for who, gpus, stubborn, limited in specs:
            self.submit(who, gpus, stubborn, limited)
        self.a_beat(1.0)

    @rule(
        who=st.sampled_from(["alice", "bob", "eve"]),
        gpus=st.integers(1, 6),
        stubborn=st.booleans(),
        limited=st.booleans(),
    )
    def submit(self, who: str, gpus: int, stubborn: bool, limited: bool) -> None:
        user = {"alice": self.world.alice, "bob": self.world.bob, "eve": self.world.eve}[who]
        command = "stubborn train" if stubborn else "train"
        job = job_submit(user=user, command=command, gpus=gpus, time_limit=2 if limited else None)
        self.jobs.append(job.pk)

    @rule()
    def round(self) -> None:
        scheduling_round()

    @rule(node=st.integers(0, 1))
    def heartbeat(self, node: int) -> None:
        self.fakes[node].heartbeat()

    @rule(seconds=st.sampled_from([1.0, 4.0]))
    def a_beat(self, seconds: float) -> None:
        """What a cluster does every few seconds: a round, a heartbeat from each node, time passing."""
        scheduling_round()
        for fake in self.fakes:
            fake.heartbeat()
        self.time_passes(seconds)

    @rule(seconds=st.sampled_from([1.0, 5.0, 11.0]))
    def time_passes(self, seconds: float) -> None:
        for fake in self.fakes:
            fake.advance(seconds)
        Job.objects.filter(state="running").update(started_at=F("started_at") - timedelta(seconds=seconds))

    @precondition(lambda self: self.jobs)
    @rule(data=st.data(), code=st.sampled_from([0, 1]))
    def a_job_ends_by_itself(self, data: st.DataObject, code: int) -> None:
        job = data.draw(st.sampled_from(self.jobs))
        for fake in self.fakes:
            fake.finish(job, code)

    @precondition(lambda self: self.jobs)
    @rule(data=st.data())
    def cancel(self, data: st.DataObject) -> None:
        job = Job.objects.get(pk=data.draw(st.sampled_from(self.jobs)))
        if not job.is_terminal:
            job_cancel(job=job, by=job.user)

    @rule(node=st.integers(0, 1))
    def node_falls_silent(self, node: int) -> None:
        """Its agent stops answering; at its lease it kills its jobs, then the portal marks the node down."""
        fake = self.fakes[node]
        fake.kill_everything()
        fake.registered = False
        Node.objects.filter(pk=fake.node.pk).update(last_heartbeat=F("last_heartbeat") - timedelta(minutes=5))
        nodes_mark_stale_down()

    @rule(node=st.integers(0, 1), clean=st.booleans())
    def agent_restarts(self, node: int, clean: bool) -> None:
        """The agent restarts (or answers "register again"); without ``clean`` some process survived its kill.
        The cluster goes on at once (a beat), which is when a second copy of a requeued job would start."""
        self.fakes[node].register(clean=clean)
        self.a_beat(1.0)

    @rule(node=st.integers(0, 1))
    def admin_releases_fenced_gpus(self, node: int) -> None:
        """The admin powers the machine off (nothing survives), then releases its fenced GPUs."""
        fake = self.fakes[node]
        fake.kill_everything()
        for p in fake.survivors:
            p.exit_code = -9
        fake.registered = False  # it will register when it boots again
        node_release_fenced(node=fake.node, by="admin")

    @invariant()
    def what_runs_is_what_the_ledger_gives(self) -> None:
        problems = fence_violations(self.fakes)
        assert not problems, problems


@pytest.mark.parametrize("policy", ["fifo", "tiresias-las"])
def test_the_ledger_covers_what_runs_whatever_happens(world: World, policy: str, settings) -> None:  # noqa: ANN001
    settings.CORRAL_POLICY = policy
    FenceMachine.world = world
    run_state_machine_as_test(
        FenceMachine,
        settings=hypothesis_settings(
            max_examples=40,
            stateful_step_count=30,
            deadline=None,
            suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
        ),
    )
