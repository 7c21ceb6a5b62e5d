"""Shares of a GPU in the live round (issue #17): placed on shared GPUs only, with the start order carrying the
share, never two online shares or over 100 % guaranteed compute on a GPU, and never a whole-GPU job on a shared
GPU. Ref: #17"""

from __future__ import annotations

from datetime import timedelta

import pytest
from hypothesis import HealthCheck, given
from hypothesis import settings as hsettings
from hypothesis import strategies as st

from agent.share import parse_share
from portal.jobs.models import Allocation, Job, JobTask
from portal.jobs.services import job_submit
from portal.jobs.share_spec import ShareSpec
from portal.nodes.models import Gpu, Node
from portal.nodes.services import node_heartbeat
from portal.scheduler.policy_cache import forget_policies
from portal.scheduler.services import scheduling_round, start_forecast_refresh
from tests.fixtures import World

GIB = 1 << 30


def share_gpus(node: Node, indices: list[int], *, memory_mb: int = 40 * 1024, max_clients: int = 48) -> list[Gpu]:
    """What an admin does in the node admin: mark these GPUs shared (and give them a real card's memory)."""
    Gpu.objects.filter(node=node, index__in=indices).update(shared=True, memory_mb=memory_mb, max_clients=max_clients)
    return list(Gpu.objects.filter(node=node, index__in=indices))


def submit_share(world: World, fraction: float, *, cls: str = "offline", memory: int | None = None, user=None) -> Job:  # noqa: ANN001
    return job_submit(user=user or world.eve, command="python serve.py", gpus=1, share=ShareSpec(fraction, memory, cls))


def test_a_share_starts_on_a_shared_gpu_and_its_start_order_carries_the_share(world: World) -> None:
    (gpu,) = share_gpus(world.nodes[1], [2])
    job = submit_share(world, 0.25, cls="online", memory=4 * GIB)
    scheduling_round()
    job.refresh_from_db()
    assert job.state == "running" and (job.gpus, job.gpu_fraction) == (1, 0.25)
    alloc = Allocation.objects.get(job=job)
    assert (alloc.gpu_id, alloc.compute_percent, alloc.memory_limit_bytes) == (gpu.pk, 25, 4 * GIB)
    (order,) = node_heartbeat(node=world.nodes[1], reports=[]).start
    assert order["gpus"] == [2]
    assert order["share"] == {"compute_percent": 25, "memory_limit_bytes": 4 * GIB, "workload_class": "online"}
    assert "shared: 25% compute" in job.events.get(kind="started").reason
    # The agent takes the order as it is (its own parser, docs/agent-protocol.md): the wire fields agree.
    share = parse_share(order["share"], tuple(order["gpus"]))
    assert (share.compute_percent, share.memory_limit_mib, share.online) == (25, 4096, True)


def test_whole_gpu_jobs_never_land_on_shared_gpus_and_shares_never_on_whole_ones(world: World) -> None:
    shared = share_gpus(world.nodes[0], [0, 1, 2, 3])
    whole = job_submit(user=world.eve, command="train", gpus=4)
    scheduling_round()
    whole.refresh_from_db()
    assert whole.state == "running"
    assert {t.node.name for t in JobTask.objects.filter(job=whole)} == {"n2"}
    shares = [submit_share(world, 0.5) for _ in range(3)]
    blocker = job_submit(user=world.eve, command="train", gpus=1)  # n2 is full: waits, never takes a shared GPU
    scheduling_round()
    assert Job.objects.get(pk=blocker.pk).state == "pending"
    held = set(Allocation.objects.filter(job__in=shares, released_at__isnull=True).values_list("gpu_id", flat=True))
    assert held and held <= {g.pk for g in shared}
    # A second round does not move anything onto the wrong kind of GPU either.
    scheduling_round()
    assert not Allocation.objects.filter(gpu__in=shared, compute_percent__isnull=True).exists()


def test_an_online_share_waits_when_its_gpu_already_has_one_and_says_why(world: World) -> None:
    share_gpus(world.nodes[0], [0])
    first = submit_share(world, 0.3, cls="online")
    second = submit_share(world, 0.3, cls="online")
    scheduling_round()
    assert Job.objects.get(pk=first.pk).state == "running"
    second.refresh_from_db()
    assert second.state == "pending" and second.reason_code == "share_no_room"
    assert "already running an online share" in second.reason


def test_shares_count_as_their_fraction_against_the_tenant_cap(world: World) -> None:
    share_gpus(world.nodes[0], [0, 1])
    from portal.tenants.models import Quota

    Quota.objects.filter(tenant=world.other_tenant).update(gpu_limit=1)
    jobs = [submit_share(world, 0.25) for _ in range(5)]
    scheduling_round()
    states = [Job.objects.get(pk=j.pk).state for j in jobs]
    assert states.count("running") == 4  # 4 x 0.25 = the cap of 1 GPU
    waiting = Job.objects.get(pk=jobs[-1].pk)
    assert waiting.reason_code == "tenant_cap_reached" and "needs 0.25 GPU" in waiting.reason


def _gpu_invariants() -> None:
    for gpu in Gpu.objects.filter(shared=True):
        active = Allocation.objects.filter(gpu=gpu, released_at__isnull=True).select_related("job")
        assert not any(a.compute_percent is None for a in active) or len(active) == 1
        online = [a for a in active if a.job.workload_class == "online"]
        assert len(online) <= 1
        guaranteed = sum(a.job.gpu_fraction or 1.0 for a in online)
        assert guaranteed <= 1.0 + 1e-9
        assert sum(a.compute_percent or 100 for a in active) <= 100
        assert sum(a.memory_limit_bytes or 0 for a in active) <= gpu.memory_mb * (1 << 20) - GIB


@hsettings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    steps=st.lists(
        st.one_of(
            st.tuples(st.just("submit"), st.sampled_from([0.1, 0.25, 0.3, 0.5, 0.75, 0.9]), st.booleans()),
            st.tuples(st.just("finish"), st.integers(0, 50), st.booleans()),
        ),
        min_size=1,
        max_size=12,
    )
)
def test_rounds_never_overcommit_a_shared_gpu(world: World, steps: list[tuple[str, float, bool]]) -> None:
    """Through the real services: submits and exits in any order, a round after each; a shared GPU never holds two
    online shares, over 100 % compute or over its memory. Ref: #17"""
    Job.objects.all().delete()
    Gpu.objects.update(shared=False)
    share_gpus(world.nodes[0], [0, 1], memory_mb=8 * 1024, max_clients=4)
    for kind, value, flag in steps:
        if kind == "submit":
            submit_share(world, float(value), cls="online" if flag else "offline")
        else:
            running = list(Job.objects.filter(state="running").order_by("pk"))
            if running:
                job = running[int(value) % len(running)]
                task = JobTask.objects.get(job=job, attempt=job.attempt)
                from portal.nodes.services import TaskReport

                node_heartbeat(node=task.node, reports=[TaskReport(job.pk, job.attempt, 0, "exited", exit_code=0)])
        scheduling_round()
        _gpu_invariants()


def test_fair_share_counts_a_share_as_its_fraction_of_the_gpu_seconds(world: World) -> None:
    from datetime import timedelta

    from django.utils import timezone

    from portal.tenants.selectors import tenant_usage

    share_gpus(world.nodes[0], [0])
    submit_share(world, 0.25)  # eve, tenant "other"
    job_submit(user=world.alice, command="train", gpus=1)  # tenant "lab"
    scheduling_round()
    usage = tenant_usage(now=timezone.now() + timedelta(hours=1), half_life=1e9)
    assert usage["other"] / usage["lab"] == pytest.approx(0.25, rel=1e-3)


def test_a_waiting_share_is_forecast_to_start_when_the_share_ahead_of_it_ends(world: World) -> None:
    forget_policies()  # no run times learned from other tests' jobs: the time limit is the estimate
    share_gpus(world.nodes[1], [2])
    ahead = job_submit(
        user=world.eve, command="serve", gpus=1, share=ShareSpec(0.5, 30 * GIB, "offline"), time_limit=1800
    )
    scheduling_round()
    waiting = submit_share(world, 0.5, memory=30 * GIB)  # does not fit beside it: 60 GiB on a 40 GiB GPU
    scheduling_round()
    start_forecast_refresh()
    ahead.refresh_from_db()
    waiting.refresh_from_db()
    assert ahead.state == "running" and waiting.state == "pending" and ahead.started_at is not None
    assert waiting.start_outlook == "estimated" and waiting.expected_start_at is not None
    assert abs((waiting.expected_start_at - (ahead.started_at + timedelta(seconds=1800))).total_seconds()) < 2
