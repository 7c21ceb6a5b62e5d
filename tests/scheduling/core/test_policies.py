"""Policy ordering: LAS queues and starvation, the Gittins index, QSSF predictions, and the quota layer."""

from __future__ import annotations

import math

import pytest

from scheduling.core import JobState, JobView, TenantLimits, WaitReason, decide
from scheduling.core.duration_predict import DurationPredictor
from scheduling.core.gittins import ServiceDistribution, geometric_grid
from scheduling.core.model import FinishedJob
from scheduling.core.policies import Quota, resolve_policy
from scheduling.core.policies.gittins import TiresiasGittins
from scheduling.core.policies.las import TiresiasLas
from scheduling.core.policies.qssf import Qssf


def finished(job_id, gpus, seconds, *, user="", name="", submit=0.0, finish=None) -> FinishedJob:
    return FinishedJob(
        id=job_id,
        tenant="",
        user=user,
        gpus=gpus,
        submit_time=submit,
        finish_time=submit + seconds if finish is None else finish,
        executed_time=seconds,
        name=name,
    )


# -- Tiresias LAS -------------------------------------------------------------------------------------------------


def test_las_queue_follows_attained_gpu_seconds(b):
    las = TiresiasLas(thresholds=(100.0, 1000.0))
    assert las.queue(b.job(1, 2, attained_service=99.0), now=0.0) == 0
    assert las.queue(b.job(2, 2, attained_service=100.0), now=0.0) == 1
    assert las.queue(b.job(3, 2, attained_service=5000.0), now=0.0) == 2


def test_las_running_service_is_extrapolated_from_service_at(b):
    las = TiresiasLas(thresholds=(100.0,))
    job = b.running(1, [("n1", 100), ("n1", 101)], attained_service=40.0, service_at=10.0)
    assert las.queue(job, now=39.0) == 0  # 40 + 2 x 29 = 98
    assert las.queue(job, now=40.0) == 1  # 40 + 2 x 30 = 100
    assert las.key_expiry(job, now=20.0) == pytest.approx(40.0)


def test_las_starvation_knob_returns_a_long_waiter_to_the_top_queue(b):
    las = TiresiasLas(thresholds=(100.0,), starvation_knob=2.0)
    job = b.job(1, 1, attained_service=500.0, executed_time=500.0, last_queued=1000.0)
    assert las.queue(job, now=1999.0) == 1
    assert las.key_expiry(job, now=1999.0) == 2000.0
    assert las.queue(job, now=2000.0) == 0


def test_las_prefers_the_job_with_least_service_and_preempts(b):
    old = b.running("old", [("n1", 100)], attained_service=5000.0, executed_time=5000.0)
    snap = b.snapshot([b.node("n1", 1, free=[])], [old, b.job("new", 1, 10.0)])
    decision = decide(snap, now=5000.0, policy=TiresiasLas(thresholds=(3250.0, 7200.0)), placement="count")
    assert decision.preempt == ("old",)
    assert [p.job_id for p in decision.start] == ["new"]


def test_las_respects_the_minimum_quantum(b):
    old = b.running("old", [("n1", 100)], attained_service=5000.0, last_started=4990.0)
    snap = b.snapshot([b.node("n1", 1, free=[])], [old, b.job("new", 1, 10.0)])
    decision = decide(snap, now=5000.0, policy=TiresiasLas(min_quantum=60.0), placement="count")
    assert decision.preempt == ()
    assert decision.waiting["new"].reason == WaitReason.NOT_ENOUGH_FREE_GPUS


def test_las_rejects_unsorted_thresholds():
    with pytest.raises(ValueError):
        TiresiasLas(thresholds=(10.0, 5.0))


# -- Gittins ------------------------------------------------------------------------------------------------------


def test_gittins_index_matches_the_definition_on_a_two_point_distribution():
    # Half the jobs need 100 GPU-s, half 1000. At a=0 the best quantum is 100: P=0.5, E[cost]=100 -> 0.005.
    dist = ServiceDistribution((0.0, 100.0, 1000.0, 10000.0))
    for s in [100.0] * 5 + [1000.0] * 5:
        dist.add(s)
    dist.refit()
    assert dist.index(0.0) == pytest.approx(0.5 / 100.0)
    # Past 100 every survivor needs 1000: finishing within 900 more is certain -> 1/900.
    assert dist.index(100.0) == pytest.approx(1 / 900.0)
    assert dist.index(1000.0) == 0.0  # outlived every job seen: nothing known


def test_gittins_learns_only_from_finished_jobs_and_prefers_likely_finishers(b):
    policy = TiresiasGittins(grid=(0.0, 100.0, 150.0, 200.0, 1e6), min_samples=4, per_size=False)
    assert policy.key(b.job(1, 1), now=0.0)[0] == 0.0  # nothing learned: LAS order
    version = policy.version
    for i in range(10):
        policy.observe_finished(finished(i, 1, 100.0 if i % 2 else 200.0))
    assert policy.version > version
    fresh = b.job("fresh", 1, 5.0)
    veteran = b.job("veteran", 1, 0.0, attained_service=150.0, executed_time=150.0)
    # The veteran is certain to finish within 50 more (index 1/50); a fresh job finishes within 200 (2/300).
    assert [j.id for j in policy.order([fresh, veteran], now=10.0)] == ["veteran", "fresh"]


def test_gittins_per_size_distributions(b):
    policy = TiresiasGittins(grid=geometric_grid(10.0, 2.0, 1e6), min_samples=3)
    for i in range(5):
        policy.observe_finished(finished(i, 1, 50.0))
        policy.observe_finished(finished(10 + i, 8, 5000.0))
    assert policy.distribution(1) is policy.sizes[1]
    assert policy.distribution(4) is policy.pooled  # no 4-GPU history yet
    small, big = b.job("small", 1, 1.0), b.job("big", 8, 0.0)
    assert [j.id for j in policy.order([big, small], now=2.0)] == ["small", "big"]


def test_gittins_order_is_a_stable_sort_by_key(b):
    # order() ranks by two stable sorts and a per-GPU-count table memo; it must equal one stable sort by key().
    policy = TiresiasGittins(grid=geometric_grid(10.0, 2.0, 1e6), min_samples=3)
    jobs = [
        b.job(i, gpus, float(i % 5), attained_service=float(service))
        for i, (gpus, service) in enumerate(
            [(1, 0), (8, 0), (1, 30), (2, 5000), (8, 30), (1, 0), (2, 0), (4, 30), (1, 5000), (8, 1e7)] * 3
        )
    ]
    jobs.append(b.running("r", [("n1", 100), ("n1", 101)], 2.0, attained_service=20.0, service_at=0.0))

    def by_key() -> list[JobView]:
        return sorted(jobs, key=lambda job: policy.key(job, now=10.0))

    assert policy.order(jobs, now=10.0) == by_key()  # nothing learned: LAS order by grid level
    for i, seconds in enumerate([5.0, 40.0, 40.0, 900.0, 20.0]):
        policy.observe_finished(finished(i, 1, seconds))
        policy.observe_finished(finished(10 + i, 8, seconds * 3))
        assert policy.order(jobs, now=10.0) == by_key()  # the memo follows every refit
    assert policy.table(8) is policy.sizes[8].table and policy.table(4) is policy.pooled.table


def test_geometric_grid_validates():
    assert geometric_grid(10.0, 10.0, 1000.0) == (0.0, 10.0, 100.0, 1000.0)
    with pytest.raises(ValueError):
        geometric_grid(10.0, 1.0, 100.0)


# -- QSSF and the predictor ---------------------------------------------------------------------------------------


def test_predictor_uses_the_most_specific_group_with_history(b):
    p = DurationPredictor()
    p.observe(finished(1, 2, 100.0, user="ann", name="train", finish=10.0))
    p.observe(finished(2, 2, 300.0, user="ann", name="eval", finish=20.0))
    p.observe(finished(3, 4, 1000.0, user="bob", name="x", finish=30.0))
    assert p.predict(b.job(9, 2, 50.0, user="ann", name="train")) == 100.0  # user + name + gpus
    assert p.predict(b.job(9, 1, 50.0, user="ann", name="train")) == 100.0  # user + name
    assert p.predict(b.job(9, 2, 50.0, user="ann", name="new")) == 200.0  # user + gpus
    assert p.predict(b.job(9, 4, 50.0, user="cy", name="new")) == 1000.0  # gpus
    assert p.predict(b.job(9, 8, 50.0, user="cy")) == pytest.approx(1400.0 / 3)  # everything


def test_predictor_never_sees_the_future(b):
    p = DurationPredictor()
    p.observe(finished(1, 1, 100.0, finish=10.0))
    p.observe(finished(2, 1, 900.0, finish=60.0))
    assert p.predict(b.job(9, 1, 5.0)) is None
    assert p.predict(b.job(9, 1, 30.0)) == 100.0
    assert p.predict(b.job(9, 1, 60.0)) == 500.0


def test_predictor_accepts_finishes_out_of_order(b):
    p = DurationPredictor()
    p.observe(finished(1, 1, 100.0, finish=50.0))
    p.observe(finished(2, 1, 300.0, finish=20.0))
    assert p.predict(b.job(9, 1, 30.0)) == 300.0
    assert p.predict(b.job(9, 1, 60.0)) == 200.0


def test_qssf_orders_by_predicted_service(b):
    q = Qssf()
    q.observe_finished(finished(1, 1, 1000.0, user="slow", finish=1.0))
    q.observe_finished(finished(2, 1, 10.0, user="quick", finish=1.0))
    jobs = [b.job("s", 1, 5.0, user="slow"), b.job("q", 1, 6.0, user="quick"), b.job("q8", 8, 7.0, user="quick")]
    assert [j.id for j in q.order(jobs, now=10.0)] == ["q", "q8", "s"]  # 10, 80, 1000 GPU-s


# -- the quota layer ----------------------------------------------------------------------------------------------


def test_quota_lets_a_tenant_borrow_idle_gpus(b):
    snap = b.snapshot(
        [b.node("n1", 4)],
        [b.job("a1", 2, 0.0, tenant="a"), b.job("a2", 2, 1.0, tenant="a")],
        {"a": TenantLimits(guaranteed_gpus=2), "b": TenantLimits(guaranteed_gpus=2)},
    )
    decision = decide(snap, now=1.0, policy="fifo+quota", placement="count")
    assert sorted(p.job_id for p in decision.start) == ["a1", "a2"]


def test_quota_reclaims_borrowed_gpus_for_the_owner(b):
    owner = b.running("a1", [("n1", 100), ("n1", 101)], tenant="a", submit=0.0)
    borrower = b.running("a2", [("n1", 102), ("n1", 103)], tenant="a", submit=1.0)
    snap = b.snapshot(
        [b.node("n1", 4, free=[])],
        [owner, borrower, b.job("b1", 2, 5.0, tenant="b")],
        {"a": TenantLimits(guaranteed_gpus=2), "b": TenantLimits(guaranteed_gpus=2)},
    )
    decision = decide(snap, now=6.0, policy="fifo+quota", placement="count")
    assert decision.preempt == ("a2",)
    assert [p.job_id for p in decision.start] == ["b1"]
    assert decision.waiting["a2"].reason == WaitReason.PREEMPTED


def test_plain_fifo_never_preempts_even_with_guarantees(b):
    borrower = b.running("a2", [("n1", 100), ("n1", 101)], tenant="a")
    snap = b.snapshot(
        [b.node("n1", 2, free=[])], [borrower, b.job("b1", 2, 5.0, tenant="b")], {"b": TenantLimits(guaranteed_gpus=2)}
    )
    assert decide(snap, now=6.0, policy="fifo").preempt == ()


def test_quota_wraps_any_policy_by_name():
    policy = resolve_policy("tiresias-las+quota")
    assert isinstance(policy, Quota) and policy.preemptive and policy.name == "tiresias-las+quota"


def test_running_job_extrapolation_needs_service_at(b):
    job = b.job(1, 2, state=JobState.RUNNING, attained_service=10.0, executed_time=5.0)
    assert job.attained_at(100.0) == 10.0  # as of now: nothing to add
    timed = b.job(1, 2, state=JobState.RUNNING, attained_service=10.0, executed_time=5.0, service_at=90.0)
    assert (timed.attained_at(100.0), timed.executed_at(100.0)) == (30.0, 15.0)
    assert math.isinf(TiresiasLas().key_expiry(b.job(2, 1), now=0.0))


def test_qssf_memo_never_hides_a_late_reported_finish(b):
    q = Qssf()
    job = b.job("j", 1, 100.0)
    assert q.predicted_service(job) == 0.0  # no history yet
    q.observe_finished(finished(1, 1, 40.0, finish=90.0))  # finished before the job was submitted, reported late
    assert q.predicted_service(job) == 40.0


def test_running_job_without_known_gpus_is_never_preempted(b):
    ghost = b.job("ghost", 2, 0.0, state=JobState.RUNNING, duration=1e6)  # the caller sent no allocation
    snap = b.snapshot([b.node("n1", 2)], [ghost, b.job("short", 2, 1.0, duration=1.0)])
    decision = decide(snap, now=2.0, policy="srsf", placement="count")
    assert decision.preempt == ()
    assert [p.job_id for p in decision.start] == ["short"]
