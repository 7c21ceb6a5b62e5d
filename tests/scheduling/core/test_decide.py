"""decide(): starts, placements and wait reasons for the live default (fifo + topology) and its variants."""

from __future__ import annotations

import pytest

from scheduling.core import (
    PLACEMENTS,
    POLICIES,
    Decision,
    GpuSlot,
    Placement,
    TenantLimits,
    Wait,
    WaitReason,
    decide,
)


def reasons(decision: Decision) -> dict:
    return {job_id: wait.reason for job_id, wait in decision.waiting.items()}


def started(decision: Decision) -> dict:
    return {p.job_id: sorted((s.node, s.gpu) for s in p.slots) for p in decision.start}


def test_exports_name_every_policy_and_placement():
    assert {"fifo", "fifo-backfill", "srtf", "srsf", "sjf", "tiresias-las", "tiresias-gittins", "qssf"} <= set(POLICIES)
    assert set(PLACEMENTS) == {"count", "consolidate", "topology"}


def test_fifo_topology_gives_real_free_gpu_ids_packed_on_one_node(b):
    snap = b.snapshot(
        [b.node("n1", 4, free=[101, 103]), b.node("n2", 4, free=[200, 201, 202, 203])],
        [b.job(1, 2, 0.0), b.job(2, 4, 1.0)],
    )
    decision = decide(snap, now=10.0)
    # Job 1 (2 GPUs) best-fits the node with exactly 2 free, leaving the whole node for job 2.
    assert started(decision) == {1: [("n1", 101), ("n1", 103)], 2: [("n2", g) for g in range(200, 204)]}
    assert decision.waiting == {}
    assert decision.preempt == ()


def test_strict_fifo_head_blocks_later_jobs_with_reasons(b):
    snap = b.snapshot([b.node("n1", 4)], [b.job("big", 8, 0.0), b.job("small", 1, 1.0)])
    decision = decide(snap, now=0.0, policy="fifo")
    assert decision.start == ()
    assert decision.waiting["big"] == Wait(WaitReason.NOT_ENOUGH_FREE_GPUS, "needs 8 GPUs, 4 free")
    assert decision.waiting["small"].reason == WaitReason.BLOCKED_BY_EARLIER_JOB
    assert "big" in decision.waiting["small"].detail


def test_backfill_skips_the_job_that_does_not_fit(b):
    snap = b.snapshot([b.node("n1", 4)], [b.job("big", 8, 0.0), b.job("small", 1, 1.0)])
    decision = decide(snap, now=0.0, policy="fifo-backfill")
    assert list(started(decision)) == ["small"]
    assert reasons(decision) == {"big": WaitReason.NOT_ENOUGH_FREE_GPUS}


def test_fifo_orders_by_submit_time_not_snapshot_order(b):
    snap = b.snapshot([b.node("n1", 2)], [b.job("late", 2, 5.0), b.job("early", 2, 1.0)])
    decision = decide(snap, now=6.0)
    assert list(started(decision)) == ["early"]
    assert reasons(decision) == {"late": WaitReason.NOT_ENOUGH_FREE_GPUS}


def test_tenant_at_cap_is_skipped_not_a_head_of_line_blocker(b):
    running = b.running("r", [("n1", 100), ("n1", 101)], tenant="a")
    snap = b.snapshot(
        [b.node("n1", 4, free=[102, 103])],
        [running, b.job("a2", 2, 1.0, tenant="a"), b.job("b1", 2, 2.0, tenant="b")],
        {"a": TenantLimits(gpu_cap=2)},
    )
    decision = decide(snap, now=3.0, policy="fifo")
    assert list(started(decision)) == ["b1"]
    assert decision.waiting["a2"].reason == WaitReason.TENANT_CAP_REACHED
    assert decision.waiting["a2"].detail == "needs 2 GPUs; tenant a has 0 of its cap of 2 left"


def test_jobs_started_this_round_count_toward_the_cap(b):
    snap = b.snapshot(
        [b.node("n1", 8)], [b.job(1, 4, 0.0, tenant="a"), b.job(2, 4, 1.0, tenant="a")], {"a": TenantLimits(gpu_cap=6)}
    )
    decision = decide(snap, now=1.0)
    assert list(started(decision)) == [1]
    assert reasons(decision) == {2: WaitReason.TENANT_CAP_REACHED}


def test_user_cap_inside_a_tenant(b):
    snap = b.snapshot(
        [b.node("n1", 8)],
        [b.job(1, 2, 0.0, user="ann"), b.job(2, 2, 1.0, user="ann"), b.job(3, 2, 2.0, user="bob")],
        {"t": TenantLimits(user_cap=2)},
    )
    decision = decide(snap, now=2.0)
    assert sorted(started(decision)) == [1, 3]
    assert reasons(decision) == {2: WaitReason.USER_CAP_REACHED}


def test_no_schedulable_nodes(b):
    snap = b.snapshot([b.node("n1", 4, up=False)], [b.job(1, 1, 0.0)])
    decision = decide(snap, now=0.0, policy="fifo-backfill")
    assert reasons(decision) == {1: WaitReason.NO_SCHEDULABLE_NODES}


def test_no_node_fits_when_enough_free_in_total_but_split(b):
    snap = b.snapshot([b.node("n1", 4, free=[100, 101]), b.node("n2", 4, free=[200, 201])], [b.job(1, 4, 0.0)])
    consolidated = decide(snap, now=0.0, placement="consolidate")
    assert consolidated.waiting[1] == Wait(WaitReason.NO_NODE_FITS, "needs 4 GPUs, 4 free but not in a usable shape")
    counted = decide(snap, now=0.0, placement="count")
    assert started(counted) == {1: [("n1", 100), ("n1", 101), ("n2", 200), ("n2", 201)]}


def test_topology_keeps_spread_sensitive_models_consolidated(b):
    nodes = [b.node("n1", 4, free=[100, 101, 102]), b.node("n2", 4, free=[200, 201, 202])]
    vgg = decide(b.snapshot(nodes, [b.job(1, 6, 0.0, model="vgg16")]), now=0.0, placement="topology")
    resnet = decide(b.snapshot(nodes, [b.job(1, 6, 0.0, model="resnet50")]), now=0.0, placement="topology")
    assert reasons(vgg) == {1: WaitReason.NO_NODE_FITS}
    assert started(resnet) == {1: [("n1", 100), ("n1", 101), ("n1", 102), ("n2", 200), ("n2", 201), ("n2", 202)]}


def test_topology_prefers_one_rack_for_the_same_node_count(b):
    nodes = [
        b.node("n1", 4, rack="r1"),
        b.node("n2", 4, free=[200, 201], rack="r1"),
        b.node("n3", 4, free=[300, 301, 302], rack="r2"),
        b.node("n4", 4, free=[400, 401, 402], rack="r2"),
    ]
    decision = decide(b.snapshot(nodes, [b.job(1, 6, 0.0)]), now=0.0, placement="topology")
    # n1 + n2 (one rack, two nodes) beats n1 + n3 (two racks, two nodes).
    assert {s.node for s in decision.start[0].slots} == {"n1", "n2"}


def test_consolidate_gives_large_jobs_whole_nodes(b):
    nodes = [b.node("n1", 4, free=[100, 101, 102]), b.node("n2", 4), b.node("n3", 4)]
    decision = decide(b.snapshot(nodes, [b.job(1, 8, 0.0)]), now=0.0, placement="consolidate")
    assert {s.node for s in decision.start[0].slots} == {"n2", "n3"}


def test_decide_is_pure_equal_inputs_give_equal_decisions(b):
    snap = b.snapshot([b.node("n1", 4), b.node("n2", 4)], [b.job(i, 1 + i % 3, float(i)) for i in range(6)])
    first = decide(snap, now=7.0)
    assert decide(snap, now=7.0) == first
    assert [p.job_id for p in first.start] == [0, 1, 2, 3]


def test_unknown_names_fail_loudly(b):
    snap = b.snapshot([b.node("n1", 1)], [])
    with pytest.raises(ValueError, match="unknown policy"):
        decide(snap, now=0.0, policy="lottery")
    with pytest.raises(ValueError, match="unknown placement"):
        decide(snap, now=0.0, placement="random")


def test_srtf_preempts_a_longer_running_job(b):
    long_run = b.running("long", [("n1", 100), ("n1", 101)], duration=1000.0, executed_time=10.0)
    snap = b.snapshot([b.node("n1", 2, free=[])], [long_run, b.job("short", 2, 5.0, duration=50.0)])
    decision = decide(snap, now=10.0, policy="srtf", placement="count")
    assert decision.preempt == ("long",)
    assert decision.start == (Placement("short", (GpuSlot("n1", 100), GpuSlot("n1", 101))),)
    assert reasons(decision) == {"long": WaitReason.PREEMPTED}


def test_oracles_refuse_jobs_without_duration(b):
    snap = b.snapshot([b.node("n1", 2)], [b.job(1, 1, 0.0)])
    with pytest.raises(ValueError, match="oracle"):
        decide(snap, now=0.0, policy="srtf")


def test_priority_policy_says_lower_priority_when_others_took_the_gpus(b):
    snap = b.snapshot([b.node("n1", 2)], [b.job("a", 2, 0.0, duration=10.0), b.job("b", 1, 0.0, duration=20.0)])
    decision = decide(snap, now=0.0, policy="sjf", placement="count")
    assert list(started(decision)) == ["a"]
    assert reasons(decision) == {"b": WaitReason.LOWER_PRIORITY}


def test_a_preemption_for_a_job_that_then_does_not_fit_is_undone(b):
    # SRTF wants "wide" (4 GPUs) over the two long-running victims, and the count says it fits once they go, but
    # under `consolidate` it needs one node and each node would only get 2 GPUs back: nobody may lose their GPUs.
    jobs = [
        b.running("keep1", [("n1", 10), ("n1", 11)], duration=100.0, executed_time=10.0),
        b.running("victim1", [("n1", 12), ("n1", 13)], duration=10_000.0, executed_time=10.0),
        b.running("keep2", [("n2", 20), ("n2", 21)], duration=100.0, executed_time=10.0),
        b.running("victim2", [("n2", 22), ("n2", 23)], duration=10_000.0, executed_time=10.0),
        b.job("wide", 4, 5.0, duration=500.0),
    ]
    snap = b.snapshot([b.node("n1", 4, free=[]), b.node("n2", 4, free=[])], jobs)
    decision = decide(snap, now=10.0, policy="srtf", placement="consolidate")
    assert decision.preempt == ()
    assert decision.start == ()
    assert reasons(decision) == {"wide": WaitReason.NO_NODE_FITS}
