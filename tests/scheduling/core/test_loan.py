"""Loanable pools and reclaims (issue #19): which nodes take work, and which ones a reclaim gives back."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scheduling.core.loan import (
    TRAINING,
    LoanError,
    LoanPool,
    RunningJob,
    check_reclaim,
    give_back,
    lend,
    plan_reclaim,
    takes_work,
)


def test_a_loanable_node_takes_work_only_while_lent():
    assert takes_work(TRAINING, "t1", ())
    assert not takes_work("serving", "s1", ())
    assert takes_work("serving", "s1", {"s1"})


def test_lend_and_give_back():
    pool = LoanPool("serving", frozenset({"s1", "s2", "s3"}))
    pool = lend(pool, ["s1", "s2"])
    assert pool.lent == {"s1", "s2"}
    assert lend(pool, ["s1"]).lent == pool.lent  # lending twice changes nothing
    assert give_back(pool, ["s1"]).lent == {"s2"}


def test_bad_loans_are_refused_and_change_nothing():
    pool = LoanPool("serving", frozenset({"s1"}))
    with pytest.raises(LoanError, match="no node"):
        lend(pool, ["s1", "x"])
    with pytest.raises(LoanError, match="not lent"):
        give_back(pool, ["s1"])
    with pytest.raises(LoanError, match="cannot be lent"):
        LoanPool(TRAINING, frozenset({"t"}))
    with pytest.raises(LoanError, match="cannot reclaim 2"):
        check_reclaim(lend(pool, ["s1"]), 2, 60.0)
    with pytest.raises(LoanError, match="at least one"):
        check_reclaim(lend(pool, ["s1"]), 0, 60.0)
    with pytest.raises(LoanError, match="deadline"):
        check_reclaim(lend(pool, ["s1"]), 1, -1.0)


def test_cost_counts_the_whole_gang_and_the_checkpoint_or_lost_progress():
    job = RunningJob("j", {"s1": 4, "t1": 4}, min_gpus=8, since_checkpoint=900.0, checkpoint_seconds=30.0,
                     restart_seconds=10.0)  # fmt: skip
    assert job.cost(60.0) == 8 * (10.0 + 30.0)  # checkpoints in time
    assert job.cost(20.0) == 8 * (10.0 + 900.0)  # stopped at once: redoes 900 s
    assert job.stop_seconds(60.0) == 30.0 and job.stop_seconds(20.0) == 0.0


def test_idle_nodes_go_back_first_then_shrinks_then_preemptions():
    jobs = [
        RunningJob("small", {"s1": 1}, min_gpus=1, since_checkpoint=10.0),
        RunningJob("elastic", {"t1": 2, "s2": 6}, min_gpus=2, checkpoint_seconds=30.0),
    ]
    lent = ["s1", "s2", "s3"]
    assert plan_reclaim(lent=lent, jobs=jobs, count=1, deadline=60.0).nodes == ("s3",)
    plan = plan_reclaim(lent=lent, jobs=jobs, count=2, deadline=60.0)
    assert plan.nodes == ("s3", "s2")  # shrinking the elastic job, although it costs more than the small job
    assert plan.shrink == {"elastic": 2} and plan.preempt == ()
    assert plan.on_time and plan.vacate_seconds == 30.0
    plan = plan_reclaim(lent=lent, jobs=jobs, count=3, deadline=60.0)
    assert plan.preempt == ("small",)


def test_the_rest_of_a_gang_comes_for_free():
    gang = RunningJob("gang", {"s1": 8, "s2": 8}, min_gpus=16, since_checkpoint=10.0, checkpoint_seconds=30.0)
    other = RunningJob("other", {"s3": 1}, min_gpus=1, since_checkpoint=1000.0, checkpoint_seconds=30.0)
    # No time to checkpoint: the gang loses 16 x 10 GPU-s, the other job 1 x 1000.
    plan = plan_reclaim(lent=["s3", "s1", "s2"], jobs=[gang, other], count=2, deadline=0.0)
    assert plan.nodes == ("s1", "s2")  # once s1 stops the gang, s2 costs nothing more
    assert plan.preempt == ("gang",) and plan.cost == 160.0


def test_reclaiming_more_than_is_lent_is_refused():
    with pytest.raises(LoanError, match="cannot reclaim 2"):
        plan_reclaim(lent=["s1"], jobs=[], count=2, deadline=60.0)


@st.composite
def clusters(draw):
    names = [f"s{i}" for i in range(draw(st.integers(1, 5)))]
    free = {name: 8 for name in names}
    jobs = []
    for j in range(draw(st.integers(0, 6))):
        per_node: dict[str, int] = {}
        for name in draw(st.lists(st.sampled_from(names), min_size=1, max_size=3, unique=True)):
            if free[name]:
                per_node[name] = draw(st.integers(1, free[name]))
                free[name] -= per_node[name]
        if not per_node:
            continue
        gpus = sum(per_node.values())
        jobs.append(
            RunningJob(
                j,
                per_node,
                min_gpus=draw(st.integers(1, gpus)),
                since_checkpoint=draw(st.floats(0, 3600)),
                checkpoint_seconds=draw(st.sampled_from([0.0, 30.0, 120.0])),
                restart_seconds=draw(st.sampled_from([0.0, 20.0])),
            )
        )
    return names, jobs, draw(st.integers(1, len(names))), draw(st.sampled_from([0.0, 60.0]))


@settings(max_examples=200, deadline=None)
@given(case=clusters())
def test_every_reclaim_is_met_on_time_and_empties_its_nodes(case):
    names, jobs, count, deadline = case
    plan = plan_reclaim(lent=names, jobs=jobs, count=count, deadline=deadline)
    assert len(plan.nodes) == count == len(set(plan.nodes))
    assert plan.on_time
    # Every job with GPUs on a returned node is shrunk or preempted, and a shrunk one keeps at least its minimum
    # and loses exactly its GPUs on the returned nodes.
    for job in jobs:
        taken = sum(n for name, n in job.per_node.items() if name in plan.nodes)
        if not taken:
            assert job.id not in plan.shrink and job.id not in plan.preempt
        elif job.id in plan.shrink:
            assert plan.shrink[job.id] == job.gpus - taken >= job.min_gpus
        else:
            assert job.id in plan.preempt and job.gpus - taken < job.min_gpus
    assert plan.cost == pytest.approx(
        sum(j.cost(deadline) for j in jobs if j.id in plan.shrink or j.id in plan.preempt)
    )


@settings(max_examples=200, deadline=None)
@given(case=clusters())
def test_a_single_node_reclaim_is_the_cheapest_node_by_preemptions_then_cost(case):
    names, jobs, _, deadline = case
    plan = plan_reclaim(lent=names, jobs=jobs, count=1, deadline=deadline)

    def key(name: str) -> tuple[int, float]:
        touched = [j for j in jobs if j.per_node.get(name)]
        preempts = sum(1 for j in touched if j.gpus - j.per_node[name] < j.min_gpus)
        return preempts, sum(j.cost(deadline) for j in touched)

    assert key(plan.nodes[0]) == min(key(name) for name in names)
