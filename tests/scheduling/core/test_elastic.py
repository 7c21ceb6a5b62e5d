"""The elastic hand-out (issue #19): the knapsack is exact, respects its capacity and the hysteresis rules."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scheduling.core.elastic import (
    DEFAULT_CURVE,
    ElasticJob,
    Hysteresis,
    Objective,
    ScalingCurve,
    allocate_extra,
    choice_values,
    extra_of,
    gain,
)


def test_default_curve_is_amdahl_with_95_percent_parallel():
    assert DEFAULT_CURVE.speedup(1) == pytest.approx(1.0)
    assert DEFAULT_CURVE.speedup(8) == pytest.approx(1 / (0.05 + 0.95 / 8))
    assert DEFAULT_CURVE.rate(4, 2) == pytest.approx(DEFAULT_CURVE.speedup(4) / DEFAULT_CURVE.speedup(2))


def test_measured_points_interpolate_and_stay_flat_past_the_last():
    curve = ScalingCurve(points=((2, 2.0), (4, 3.0)))
    assert curve.speedup(1) == pytest.approx(1.0)
    assert curve.speedup(3) == pytest.approx(2.5)
    assert curve.speedup(16) == pytest.approx(3.0)


@pytest.mark.parametrize("points", [((4, 2.0), (2, 1.0)), ((2, 0.0),), ((0, 1.0),)])
def test_bad_points_are_refused(points):
    with pytest.raises(ValueError, match="scaling points"):
        ScalingCurve(points=points)


def test_a_job_outside_its_range_is_refused():
    with pytest.raises(ValueError, match="min_gpus <= max_gpus"):
        ElasticJob("j", min_gpus=4, max_gpus=2, gpus=4)
    with pytest.raises(ValueError, match="outside"):
        ElasticJob("j", min_gpus=2, max_gpus=4, gpus=8)


def test_jct_gain_is_the_seconds_saved():
    job = ElasticJob("j", 1, 2, 1, remaining=1000.0, curve=ScalingCurve(1.0))  # linear: twice as fast on 2
    assert gain(job, 2) == pytest.approx(500.0)
    assert gain(job, 2, Objective.THROUGHPUT) == pytest.approx(1.0)


def test_spare_gpus_go_where_they_save_most():
    long = ElasticJob("long", 1, 4, 1, remaining=10_000.0)
    short = ElasticJob("short", 1, 4, 1, remaining=100.0)
    plan = allocate_extra([short, long], 3, now=0.0)
    assert plan.sizes == {"short": 1, "long": 4}
    assert plan.resized == ("long",)


def test_no_spare_gpus_keeps_every_minimum_and_takes_back_extras():
    job = ElasticJob("j", 2, 8, 6, remaining=1e6)
    assert allocate_extra([job], 0, now=0.0).sizes == {"j": 2}


def test_of_equally_good_plans_the_one_with_fewest_gpus_wins():
    flat = ScalingCurve(points=((1, 1.0),))  # no faster on more GPUs: growing gains nothing
    assert allocate_extra([ElasticJob("j", 1, 4, 1, remaining=1e6, curve=flat)], 3, now=0.0).sizes == {"j": 1}


def test_sizes_restrict_the_choices():
    job = ElasticJob("j", 2, 8, 2, remaining=1e6, sizes=(2, 4, 8))
    assert allocate_extra([job], 5, now=0.0).sizes == {"j": 4}
    assert allocate_extra([job], 6, now=0.0).sizes == {"j": 8}


def test_a_resize_must_gain_more_than_its_charge():
    job = ElasticJob("j", 1, 2, 1, remaining=100.0, curve=ScalingCurve(1.0), restart_seconds=30.0)
    assert allocate_extra([job], 1, now=0.0).sizes == {"j": 2}  # saves 50 s, costs 30 s
    assert allocate_extra([job], 1, now=0.0, hysteresis=Hysteresis(min_gain=25.0)).sizes == {"j": 1}


def test_a_recently_resized_job_keeps_its_size_until_the_interval_is_over():
    rule = Hysteresis(min_interval=600.0)
    grown = ElasticJob("a", 1, 4, 4, remaining=10.0, last_resized=1000.0)
    hungry = ElasticJob("b", 1, 4, 1, remaining=1e6)
    plan = allocate_extra([grown, hungry], 3, now=1500.0, hysteresis=rule)
    assert plan.sizes == {"a": 4, "b": 1}
    assert plan.held == ("a",)
    later = allocate_extra([grown, hungry], 3, now=1600.0, hysteresis=rule)
    assert later.sizes == {"a": 1, "b": 4}


def test_locked_jobs_shrink_when_their_spare_gpus_are_gone():
    grown = ElasticJob("a", 1, 4, 4, remaining=1e6, last_resized=1000.0)
    plan = allocate_extra([grown], 1, now=1001.0, hysteresis=Hysteresis(min_interval=600.0))
    assert plan.sizes == {"a": 2}


def test_bad_arguments_are_refused():
    job = ElasticJob("j", 1, 2, 1)
    with pytest.raises(ValueError, match="extra_gpus"):
        allocate_extra([job], -1, now=0.0)
    with pytest.raises(ValueError, match="once"):
        allocate_extra([job, job], 1, now=0.0)
    with pytest.raises(ValueError, match=">= 0"):
        Hysteresis(min_gain=-1.0)


@st.composite
def cases(draw):
    jobs = []
    for i in range(draw(st.integers(0, 4))):
        lo = draw(st.integers(1, 3))
        hi = draw(st.integers(lo, lo + 4))
        curve = draw(
            st.one_of(
                st.builds(ScalingCurve, st.floats(0.0, 1.0)),
                st.just(ScalingCurve(points=((1, 1.0), (2, 1.8), (4, 2.5), (6, 2.0)))),
            )
        )
        jobs.append(
            ElasticJob(
                i,
                lo,
                hi,
                draw(st.integers(lo, hi)),
                remaining=draw(st.floats(0.0, 1e5)),
                curve=curve,
                sizes=tuple(draw(st.sets(st.integers(1, 8), max_size=3))),
                restart_seconds=draw(st.sampled_from([0.0, 30.0])),
                last_resized=draw(st.sampled_from([None, 0.0, 500.0])),
            )
        )
    return jobs, draw(st.integers(0, 10))


@settings(max_examples=300, deadline=None)
@given(
    case=cases(),
    objective=st.sampled_from(list(Objective)),
    rule=st.sampled_from([Hysteresis(), Hysteresis(min_gain=50.0, min_interval=600.0)]),
)
def test_knapsack_matches_brute_force(case, objective, rule):
    jobs, spare = case
    now = 700.0
    plan = allocate_extra(jobs, spare, now=now, objective=objective, hysteresis=rule)
    held = {job.id for job in jobs if job.last_resized is not None and now - job.last_resized < rule.min_interval}
    if sum(job.gpus - job.min_gpus for job in jobs if job.id in held) > spare:
        held = set()  # spare GPUs were taken back: locked jobs may shrink
    assert set(plan.held) == held
    items = [choice_values(job, objective=objective, hysteresis=rule, locked=job.id in held) for job in jobs]
    best = max(
        (sum(v for _, v in combo) for combo in itertools.product(*items) if sum(w for w, _ in combo) <= spare),
        default=0.0,
    )
    assert extra_of(jobs, plan) <= spare
    assert plan.value == pytest.approx(best, rel=1e-9, abs=1e-6)
    for job in jobs:
        assert job.min_gpus <= plan.sizes[job.id] <= job.max_gpus
        assert plan.sizes[job.id] in job.choices()
        if job.id in held:
            assert plan.sizes[job.id] == job.gpus
    assert set(plan.resized) == {job.id for job in jobs if plan.sizes[job.id] != job.gpus}


def test_a_job_shrunk_recently_does_not_grow_again_until_the_interval_is_over():
    shrunk = ElasticJob("a", 1, 4, 1, remaining=1e6, last_resized=1000.0)
    rule = Hysteresis(min_interval=600.0)
    assert allocate_extra([shrunk], 3, now=1300.0, hysteresis=rule).sizes == {"a": 1}
    assert allocate_extra([shrunk], 3, now=1600.0, hysteresis=rule).sizes == {"a": 4}
