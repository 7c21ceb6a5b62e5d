"""Fair share by decayed usage: the meter's arithmetic, the borrowing order, and what a round does with it."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from scheduling.core import TenantLimits, WaitReason, decide
from scheduling.core.fairshare import UsageMeter, borrow_ranks, decay_factor, standings
from scheduling.core.forecast import StartOutlook, forecast_starts
from scheduling.core.model import UsageHistory
from scheduling.sim.simulator import Cluster, simulate
from scheduling.sim.trace import TraceJob

HOUR = 3600.0
DAY = 24 * HOUR
SHARES = {"a": TenantLimits(guaranteed_gpus=2), "b": TenantLimits(guaranteed_gpus=2)}


def numeric_usage(intervals: list[tuple[float, float, int]], now: float, half_life: float) -> float:
    """The definition, integrated numerically: GPUs held at t, weighted by 2^-(now - t)/half_life."""
    steps = 20_000
    total = 0.0
    for start, end, gpus in intervals:
        dt = (min(end, now) - start) / steps
        total += sum(gpus * 0.5 ** ((now - (start + (k + 0.5) * dt)) / half_life) * dt for k in range(steps))
    return total


def test_the_meter_integrates_decayed_gpu_seconds_exactly():
    meter = UsageMeter(DAY)
    meter.change("a", 4, 0.0)
    meter.change("a", -3, 6 * HOUR)  # 4 GPUs for 6 h, then 1 GPU
    meter.change("b", 2, 2 * HOUR)
    meter.change("b", -2, 3 * HOUR)
    got = meter.history(2 * DAY).usage
    assert got["a"] == pytest.approx(numeric_usage([(0, 6 * HOUR, 3), (0, 2 * DAY, 1)], 2 * DAY, DAY), rel=1e-6)
    assert got["b"] == pytest.approx(numeric_usage([(2 * HOUR, 3 * HOUR, 2)], 2 * DAY, DAY), rel=1e-6)


def test_usage_halves_every_half_life_once_nothing_runs():
    meter = UsageMeter(DAY, usage={"a": 1000.0}, at=0.0)
    assert meter.history(DAY).usage["a"] == pytest.approx(500.0)
    assert meter.history(3 * DAY).usage["a"] == pytest.approx(125.0)
    assert decay_factor(DAY, DAY) == pytest.approx(0.5)


def test_a_gpu_held_for_ever_tends_to_half_life_over_ln2():
    meter = UsageMeter(HOUR)
    meter.change("a", 1, 0.0)
    assert meter.history(50 * HOUR).usage["a"] == pytest.approx(HOUR / math.log(2))


def test_the_half_life_must_be_positive():
    with pytest.raises(ValueError, match="half-life"):
        UsageMeter(0.0)


def test_borrowing_order_is_usage_per_guaranteed_gpu_and_share_holders_first():
    limits = {
        "small": TenantLimits(guaranteed_gpus=1),
        "big": TenantLimits(guaranteed_gpus=8),
        "none": TenantLimits(),
    }
    history = UsageHistory(DAY, {"small": 100.0, "big": 400.0})  # 100 and 50 per guaranteed GPU
    ranks = borrow_ranks(history, limits)
    assert sorted(ranks, key=ranks.__getitem__) == ["big", "small", "none"]
    rows = standings(history, limits)
    assert [(r.tenant, r.order) for r in rows] == [("big", 1), ("small", 2), ("none", 3)]
    big, small, none = rows
    assert big.usage_share == pytest.approx(0.8) and big.entitled_share == pytest.approx(8 / 9)
    assert small.ratio == pytest.approx(0.2 / (1 / 9))  # used 1.8x its share
    assert none.ratio is None  # holds no share


def borrowers_snapshot(b, usage: UsageHistory | None):
    """6 GPUs; a and b own 2 each and each has one more job that would borrow the 2 left over (a's asked first)."""
    jobs = [
        b.job("a1", 2, 0.0, tenant="a"),
        b.job("a2", 2, 1.0, tenant="a"),
        b.job("b1", 2, 2.0, tenant="b"),
        b.job("b2", 2, 3.0, tenant="b"),
    ]
    return replace(b.snapshot([b.node("n1", 6)], jobs, SHARES), usage=usage)


def test_without_usage_the_policy_alone_orders_borrowers(b):
    decision = decide(borrowers_snapshot(b, None), now=5.0, policy="fifo+quota", placement="count")
    assert sorted(p.job_id for p in decision.start) == ["a1", "a2", "b1"]
    assert decision.waiting["b2"].reason == WaitReason.LOWER_PRIORITY


def test_the_tenant_that_used_less_borrows_first_and_the_other_is_told_why(b):
    history = UsageHistory(DAY, {"a": 50 * HOUR, "b": 5 * HOUR})
    decision = decide(borrowers_snapshot(b, history), now=5.0, policy="fifo+quota", placement="count")
    assert sorted(p.job_id for p in decision.start) == ["a1", "b1", "b2"]
    wait = decision.waiting["a2"]
    assert wait.reason == WaitReason.FAIR_SHARE
    assert "used less of their share" in wait.detail and "used less of their share" in wait.reason.label


def test_usage_is_ignored_without_the_quota_layer(b):
    history = UsageHistory(DAY, {"a": 50 * HOUR, "b": 5 * HOUR})
    decision = decide(borrowers_snapshot(b, history), now=5.0, policy="fifo-backfill", placement="count")
    assert sorted(p.job_id for p in decision.start) == ["a1", "a2", "b1"]


def test_fair_share_never_preempts_a_running_borrower_for_a_waiting_one(b):
    owner_a = b.running("a1", [("n1", 100), ("n1", 101)], tenant="a")
    borrower_a = b.running("a2", [("n1", 102), ("n1", 103)], tenant="a", submit=1.0)
    owner_b = b.running("b1", [("n1", 104), ("n1", 105)], tenant="b", submit=2.0)
    snap = b.snapshot([b.node("n1", 6, free=[])], [owner_a, borrower_a, owner_b, b.job("b2", 2, 3.0, tenant="b")])
    snap = replace(snap, tenants=SHARES, usage=UsageHistory(DAY, {"a": 500 * HOUR, "b": 0.0}))
    decision = decide(snap, now=5.0, policy="fifo+quota", placement="count")
    assert decision.preempt == () and decision.start == ()
    assert decision.waiting["b2"].reason == WaitReason.LOWER_PRIORITY


def test_a_waiting_borrower_that_jumps_the_queue_does_not_push_out_a_running_one(b):
    # A waiting borrower (x, of c) that fair share moves ahead of another waiting one must not take the GPUs of a
    # running borrower (r, of b) that both the policy and fair share rank ahead of it; nor may r then take them back.
    limits = {t: TenantLimits(guaranteed_gpus=g) for t, g in {"a": 1, "b": 1, "c": 1, "d": 2}.items()}
    usage = UsageHistory(DAY, {"a": 1000.0, "b": 10.0, "c": 100.0, "d": 0.0})
    owner = b.running("o", [("n1", 100), ("n1", 101)], tenant="d", submit=0.0)
    r = b.running("r", [("n1", 102), ("n1", 103)], tenant="b", submit=2.0)
    jobs = [owner, b.job("y", 6, 1.0, tenant="a"), r, b.job("x", 3, 3.0, tenant="c")]
    snap = replace(b.snapshot([b.node("n1", 6, free=[104, 105])], jobs, limits), usage=usage)
    for policy in ("fifo+quota", "tiresias-las+quota"):
        decision = decide(snap, now=10.0, policy=policy, placement="count")
        assert decision.preempt == () and decision.start == (), policy


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())  # the builders fixture keeps no state
def test_fair_share_never_preempts_a_job_the_policy_alone_would_keep(b, data):
    tenants = "abc"
    free = data.draw(st.integers(0, 4))
    held = data.draw(st.lists(st.tuples(st.sampled_from(tenants), st.sampled_from([1, 2, 3])), max_size=5))
    jobs, gpu = [], 0
    for n, (tenant, gpus) in enumerate(held):
        slots = [("n1", 100 + gpu + k) for k in range(gpus)]
        gpu += gpus
        jobs.append(
            b.running(f"r{n}", slots, float(n), tenant=tenant, attained_service=float(data.draw(st.integers(0, 500))))
        )
    queued = data.draw(st.lists(st.tuples(st.sampled_from(tenants), st.sampled_from([1, 2, 4])), max_size=6))
    jobs += [b.job(f"p{n}", gpus, 10.0 + n, tenant=tenant) for n, (tenant, gpus) in enumerate(queued)]
    node = b.node("n1", gpu + free, free=range(100 + gpu, 100 + gpu + free))
    limits = {t: TenantLimits(guaranteed_gpus=data.draw(st.integers(0, 3))) for t in tenants}
    usage = UsageHistory(DAY, {t: float(data.draw(st.integers(0, 100))) for t in tenants})
    policy = data.draw(st.sampled_from(["fifo+quota", "tiresias-las+quota"]))
    plain = decide(b.snapshot([node], jobs, limits), now=1000.0, policy=policy, placement="count")
    fair = decide(replace(b.snapshot([node], jobs, limits), usage=usage), now=1000.0, policy=policy, placement="count")
    assert set(fair.preempt) <= set(plain.preempt)


def test_a_tenant_without_a_share_borrows_after_those_with_one(b):
    limits = {"a": TenantLimits(guaranteed_gpus=1), "free": TenantLimits()}
    jobs = [b.job("free1", 2, 0.0, tenant="free"), b.job("a1", 1, 1.0, tenant="a"), b.job("a2", 2, 2.0, tenant="a")]
    snap = replace(b.snapshot([b.node("n1", 3)], jobs, limits), usage=UsageHistory(DAY, {"a": 900 * HOUR}))
    decision = decide(snap, now=5.0, policy="fifo+quota", placement="count")
    assert sorted(p.job_id for p in decision.start) == ["a1", "a2"]
    assert decision.waiting["free1"].reason == WaitReason.FAIR_SHARE


def test_the_forecast_follows_the_fair_share_order(b):
    # 4 GPUs, all held until t=100 and t=200; a and b each want to borrow 2 more. b used less, so it goes first.
    running = [
        b.running("a1", [("n1", 100), ("n1", 101)], tenant="a"),
        b.running("b1", [("n1", 102), ("n1", 103)], tenant="b"),
    ]
    pending = [b.job("a2", 2, 1.0, tenant="a"), b.job("b2", 2, 2.0, tenant="b")]
    snap = b.snapshot([b.node("n1", 4, free=[])], running + pending, {"a": TenantLimits(), "b": TenantLimits()})
    remaining = {"a1": 100.0, "b1": 200.0, "a2": 500.0, "b2": 500.0}
    plain = forecast_starts(snap, now=0.0, remaining=remaining, policy="fifo+quota", placement="count")
    assert (plain["a2"].at, plain["b2"].at) == (100.0, 200.0)
    fair = replace(snap, usage=UsageHistory(DAY, {"a": 50 * HOUR, "b": HOUR}))
    out = forecast_starts(fair, now=0.0, remaining=remaining, policy="fifo+quota", placement="count")
    assert (out["b2"].at, out["a2"].at) == (100.0, 200.0)
    assert all(f.outlook == StartOutlook.ESTIMATED for f in out.values())


def test_a_replay_with_fair_share_lets_the_light_tenant_borrow_first():
    # 6 GPUs, 2 guaranteed to each of a and b. Tenant a first runs alone on all of them for a day; later both queue
    # 2-GPU jobs at once. Each gets its share, and one of them may borrow the 2 GPUs left over.
    trace = [TraceJob("a-early", 0.0, DAY, 6, tenant="a", user="x")]
    trace += [TraceJob(f"a{i}", DAY + 10, HOUR, 2, tenant="a", user="x") for i in range(4)]
    trace += [TraceJob(f"b{i}", DAY + 10, HOUR, 2, tenant="b", user="y") for i in range(4)]
    cluster = Cluster(1, 6)
    plain = simulate(trace, "fifo+quota", cluster=cluster, tenants=SHARES)
    fair = simulate(trace, "fifo+quota", cluster=cluster, tenants=SHARES, usage_half_life=DAY)

    def first_start(result, job_id):
        return next(o.first_start for o in result.outcomes if o.job_id == job_id)

    # Without fair share a's borrowing job (asked first) takes the idle GPUs; with it, b's does.
    assert first_start(plain, "a1") < first_start(plain, "b1")
    assert first_start(fair, "b1") < first_start(fair, "a1")
    assert {o.job_id for o in fair.outcomes} == {t.job_id for t in trace}
