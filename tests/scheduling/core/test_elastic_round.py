"""The live round's elastic step: minimums first, growth only into idle GPUs, caps, cordons, hysteresis and
notices respected. Ref: #19"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from scheduling.core.elastic_round import ElasticRules, elastic_step, size_ladder
from scheduling.core.model import (
    Decision,
    GpuSlot,
    JobView,
    NodeView,
    Placement,
    Snapshot,
    TenantLimits,
    Wait,
    WaitReason,
)
from scheduling.core.states import JobState

NOW = 100_000.0


def _node(name: str, free: list[int], total: int = 4, short_only: tuple[int, ...] = ()) -> NodeView:
    return NodeView(name=name, total_gpus=total, free_gpus=tuple(free), short_only=short_only)


def _running(job_id: int, slots: list[tuple[str, int]], lo: int, hi: int, started: float = 0.0) -> JobView:
    allocation = tuple(GpuSlot(node, gpu) for node, gpu in slots)
    return JobView(
        id=job_id,
        tenant="t",
        user="u",
        gpus=len(allocation),
        submit_time=0.0,
        state=JobState.RUNNING,
        allocation=allocation,
        last_started=started,
        min_gpus=lo,
        max_gpus=hi,
    )


def _pending(job_id: int, gpus: int, lo: int | None = None, hi: int | None = None) -> JobView:
    return JobView(id=job_id, tenant="t", user="u", gpus=gpus, submit_time=0.0, min_gpus=lo, max_gpus=hi)


def test_a_starting_job_is_widened_on_its_own_node_first() -> None:
    snapshot = Snapshot(nodes=(_node("a", [0, 1, 2, 3]), _node("b", [4, 5, 6, 7])), jobs=(_pending(1, 2, 2, 6),))
    decision = Decision(start=(Placement(1, (GpuSlot("a", 0), GpuSlot("a", 1))),))
    outcome = elastic_step(snapshot, decision, now=NOW)
    (placement,) = outcome.start
    nodes = [slot.node for slot in placement.slots]
    assert len(placement.slots) == 6 and nodes.count("a") == 4 and len({s.gpu for s in placement.slots}) == 6


def test_cordoned_gpus_are_never_extras() -> None:
    snapshot = Snapshot(nodes=(_node("a", [0, 1, 2, 3], short_only=(2, 3)),), jobs=(_pending(1, 1, 1, 4),))
    decision = Decision(start=(Placement(1, (GpuSlot("a", 0),)),))
    (placement,) = elastic_step(snapshot, decision, now=NOW).start
    assert {slot.gpu for slot in placement.slots} == {0, 1}


def test_a_job_waiting_for_gpus_takes_back_what_elastic_jobs_hold_above_their_minimum() -> None:
    running = _running(1, [("a", g) for g in range(4)], lo=1, hi=4, started=NOW - 10)  # inside the hysteresis
    snapshot = Snapshot(nodes=(_node("a", []),), jobs=(running, _pending(2, 2)))
    decision = Decision(waiting={2: Wait(WaitReason.NOT_ENOUGH_FREE_GPUS)})
    outcome = elastic_step(snapshot, decision, now=NOW)
    assert outcome.resize == {1: 2}


def test_a_recently_resized_job_keeps_its_size_when_nothing_forces_it() -> None:
    running = _running(1, [("a", 0)], lo=1, hi=4, started=NOW - 10)
    snapshot = Snapshot(nodes=(_node("a", [1, 2, 3]),), jobs=(running,))
    assert elastic_step(snapshot, Decision(), now=NOW).resize == {}
    later = elastic_step(snapshot, Decision(), now=NOW + ElasticRules().hysteresis.min_interval)
    assert later.resize == {1: 4}


def test_a_job_under_notice_is_left_alone() -> None:
    running = _running(1, [("a", 0)], lo=1, hi=4)
    snapshot = Snapshot(nodes=(_node("a", [1, 2, 3]),), jobs=(running,))
    assert elastic_step(snapshot, Decision(), now=NOW, frozen={1}).resize == {}


def test_a_grown_job_that_waits_for_gpus_goes_back_to_its_minimum() -> None:
    snapshot = Snapshot(nodes=(_node("a", [0]),), jobs=(_pending(1, 4, 1, 4),))
    decision = Decision(waiting={1: Wait(WaitReason.NOT_ENOUGH_FREE_GPUS)})
    assert elastic_step(snapshot, decision, now=NOW).reset == (1,)


def test_the_tenant_cap_bounds_growth() -> None:
    snapshot = Snapshot(
        nodes=(_node("a", [0, 1, 2, 3]),), jobs=(_pending(1, 1, 1, 4),), tenants={"t": TenantLimits(gpu_cap=2)}
    )
    decision = Decision(start=(Placement(1, (GpuSlot("a", 0),)),))
    (placement,) = elastic_step(snapshot, decision, now=NOW).start
    assert len(placement.slots) == 2


@settings(max_examples=60, deadline=None)
@given(
    free=st.lists(st.integers(0, 3), min_size=1, max_size=4),
    jobs=st.lists(st.tuples(st.integers(1, 3), st.integers(0, 5), st.booleans()), min_size=1, max_size=5),
)
def test_growth_never_hands_out_a_gpu_twice_or_leaves_the_range(
    free: list[int], jobs: list[tuple[int, int, bool]]
) -> None:
    nodes = tuple(_node(f"n{i}", [i * 10 + g for g in range(k)], total=k or 1) for i, k in enumerate(free))
    pool = [(node.name, g) for node in nodes for g in node.free_gpus]
    views: list[JobView] = []
    starts: list[Placement] = []
    for job_id, (lo, more, starting) in enumerate(jobs, start=1):
        if starting and len(pool) >= lo:
            taken, pool = pool[:lo], pool[lo:]
            views.append(_pending(job_id, lo, lo, lo + more))
            starts.append(Placement(job_id, tuple(GpuSlot(n, g) for n, g in taken)))
        else:
            views.append(_running(job_id, [("elsewhere", 100 * job_id + g) for g in range(lo)], lo, lo + more))
    outcome = elastic_step(Snapshot(nodes=nodes, jobs=tuple(views)), Decision(start=tuple(starts)), now=NOW)
    given_out = [slot.gpu for p in outcome.start for slot in p.slots]
    assert len(given_out) == len(set(given_out))
    free_ids = {g for node in nodes for g in node.free_gpus}
    assert set(given_out) <= free_ids
    by_id = {v.id: v for v in views}
    for p in outcome.start:
        view = by_id[p.job_id]
        assert view.max_gpus is not None and len(p.slots) <= view.max_gpus
    for job_id, size in outcome.resize.items():
        view = by_id[job_id]
        assert view.min_gpus is not None and view.max_gpus is not None
        assert view.min_gpus <= size <= view.max_gpus


def test_live_sizes_are_the_minimum_doubled_and_the_maximum() -> None:
    assert size_ladder(2, 8) == (2, 4, 8)
    assert size_ladder(2, 6) == (2, 4, 6)
    assert size_ladder(3, 3) == (3,)
    assert size_ladder(1, 64) == (1, 2, 4, 8, 16, 32, 64)


def test_a_starting_job_never_makes_a_running_one_shrink_for_gpus_it_cannot_take_now() -> None:
    running = _running(1, [("a", g) for g in range(8)], lo=2, hi=8)  # resized long ago: free to change
    snapshot = Snapshot(nodes=(_node("a", [], total=8), _node("b", [], total=2)), jobs=(running, _pending(2, 2, 2, 8)))
    decision = Decision(start=(Placement(2, (GpuSlot("b", 8), GpuSlot("b", 9))),))
    outcome = elastic_step(snapshot, decision, now=NOW)
    assert outcome.resize == {} and len(outcome.start[0].slots) == 2


def test_no_growth_while_a_job_of_the_same_tenant_waits_on_its_cap() -> None:
    snapshot = Snapshot(
        nodes=(_node("a", [0, 1, 2, 3]),),
        jobs=(_pending(1, 1, 1, 4), _pending(2, 2)),
        tenants={"t": TenantLimits(gpu_cap=3)},
    )
    decision = Decision(start=(Placement(1, (GpuSlot("a", 0),)),), waiting={2: Wait(WaitReason.TENANT_CAP_REACHED)})
    (placement,) = elastic_step(snapshot, decision, now=NOW).start
    assert len(placement.slots) == 1
