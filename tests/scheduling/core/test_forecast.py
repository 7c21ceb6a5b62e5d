"""forecast_starts(): when each waiting job should start, played forward with the live policy's own rounds."""

from __future__ import annotations

import random

import pytest

from scheduling.core import TenantLimits, decide
from scheduling.core.forecast import DEFAULT_MAX_ROUNDS, StartForecast, StartOutlook, forecast_starts, round_budget
from scheduling.core.model import FinishedJob
from scheduling.core.policies import Qssf, TiresiasLas

NOW = 1_000.0


def at(seconds: float) -> StartForecast:
    return StartForecast(StartOutlook.ESTIMATED, NOW + seconds)


def test_a_job_that_fits_now_starts_now_and_the_next_waits_for_the_gpus_it_needs(b):
    snap = b.snapshot(
        [b.node("n1", 4, free=[102, 103])],
        [b.running("a", [("n1", 100), ("n1", 101)]), b.job("x", 2, 10.0), b.job("y", 2, 20.0)],
    )
    out = forecast_starts(snap, now=NOW, remaining={"a": 300.0, "x": 50.0, "y": 60.0}, policy="fifo")
    # x takes the two free GPUs at once; y gets the first pair that frees up: x's, after 50 s.
    assert out == {"x": at(0), "y": at(50)}


def test_strict_fifo_holds_later_jobs_behind_a_blocked_head(b):
    snap = b.snapshot(
        [b.node("n1", 4, free=[103])],
        [b.running("a", [("n1", 100), ("n1", 101), ("n1", 102)]), b.job("big", 4, 1.0), b.job("small", 1, 2.0)],
    )
    remaining = {"a": 100.0, "big": 500.0, "small": 10.0}
    fifo = forecast_starts(snap, now=NOW, remaining=remaining, policy="fifo")
    assert fifo == {"big": at(100), "small": at(600)}  # small waits behind big, although a GPU is free
    backfill = forecast_starts(snap, now=NOW, remaining=remaining, policy="fifo-backfill")
    assert backfill == {"small": at(0), "big": at(100)}


def test_jobs_behind_a_job_of_unknown_length_get_no_time(b):
    snap = b.snapshot([b.node("n1", 2, free=[])], [b.running("a", [("n1", 100), ("n1", 101)]), b.job("x", 1)])
    out = forecast_starts(snap, now=NOW, remaining={"a": None, "x": 10.0})
    assert out == {"x": StartForecast(StartOutlook.UNKNOWN_END)}


def test_a_job_the_nodes_up_now_cannot_hold_is_told_so(b):
    snap = b.snapshot([b.node("n1", 4)], [b.job("huge", 8)])
    assert forecast_starts(snap, now=NOW, remaining={}) == {"huge": StartForecast(StartOutlook.NO_CAPACITY)}


def test_starts_past_the_horizon_are_not_guessed(b):
    snap = b.snapshot([b.node("n1", 1, free=[])], [b.running("a", [("n1", 100)]), b.job("x", 1)])
    out = forecast_starts(snap, now=NOW, remaining={"a": 3 * 86_400.0}, horizon=86_400.0)
    assert out == {"x": StartForecast(StartOutlook.BEYOND_HORIZON)}
    assert forecast_starts(snap, now=NOW, remaining={"a": 3 * 86_400.0}, horizon=4 * 86_400.0) == {"x": at(259_200)}


def test_a_tenant_at_its_cap_waits_for_its_own_jobs_not_for_free_gpus(b):
    snap = b.snapshot(
        [b.node("n1", 4, free=[102, 103])],
        [
            b.running("mine", [("n1", 100), ("n1", 101)], tenant="lab"),
            b.running("other", [("n2", 200)], tenant="ops"),
            b.job("next", 2, 5.0, tenant="lab"),
        ],
        tenants={"lab": TenantLimits(gpu_cap=2)},
    )
    out = forecast_starts(snap, now=NOW, remaining={"mine": 900.0, "other": 10.0})
    assert out == {"next": at(900)}


def test_tiresias_preempts_in_the_forecast_when_a_running_job_drops_a_queue(b):
    """A fresh job waits in queue 0 behind a running one until that job's service crosses the first threshold;
    then the round preempts it, exactly as the live loop will."""
    policy = TiresiasLas(thresholds=(100.0,))
    snap = b.snapshot(
        [b.node("n1", 1, free=[])],
        [b.running("old", [("n1", 100)], attained_service=40.0, executed_time=40.0), b.job("new", 1, 50.0)],
    )
    out = forecast_starts(snap, now=NOW, remaining={"old": 1_000.0, "new": 5.0}, policy=policy)
    assert out == {"new": at(60)}  # 60 s more takes "old" from 40 to 100 GPU-seconds


def test_first_round_agrees_with_decide(b):
    """Whatever ``decide`` starts now the forecast starts now, and nothing decide leaves waiting starts now."""
    rng = random.Random(7)
    for _ in range(40):
        nodes = [b.node(f"n{i}", 4) for i in range(1, 4)]
        jobs = [b.job(k, rng.choice([1, 2, 4, 8]), float(k)) for k in range(rng.randint(1, 8))]
        snap = b.snapshot(nodes, jobs)
        for policy in ("fifo", "fifo-backfill", "tiresias-las"):
            started_now = {p.job_id for p in decide(snap, now=NOW, policy=policy).start}
            out = forecast_starts(snap, now=NOW, remaining={j.id: 100.0 for j in jobs}, policy=policy)
            assert {j for j, f in out.items() if f.at == NOW} == started_now


def test_the_policy_learns_nothing_from_imagined_finishes(b):
    policy = Qssf()
    policy.observe_finished(
        FinishedJob(id=0, tenant="t", user="u", gpus=1, submit_time=0.0, finish_time=1.0, executed_time=77.0)
    )
    before = {group: list(series.times) for group, series in policy.predictor.series.items()}
    snap = b.snapshot([b.node("n1", 1, free=[])], [b.running("a", [("n1", 100)]), b.job("x", 1, 5.0)])
    assert forecast_starts(snap, now=NOW, remaining={"a": 30.0, "x": 30.0}, policy=policy) == {"x": at(30)}
    assert {group: list(series.times) for group, series in policy.predictor.series.items()} == before


@pytest.mark.parametrize("policy", ["fifo", "tiresias-las", "tiresias-gittins", "qssf", "fifo-backfill+quota"])
def test_every_waiting_job_gets_an_answer_on_a_busy_cluster(b, policy):
    rng = random.Random(3)
    nodes = [b.node(f"n{i}", 8, free=[]) for i in range(1, 5)]
    running = [b.running(f"r{i}", [(f"n{i}", i * 100 + g) for g in range(8)]) for i in range(1, 5)]
    pending = [b.job(k, rng.choice([1, 2, 4, 8, 16]), float(k), tenant=rng.choice("ab")) for k in range(60)]
    snap = b.snapshot(nodes, running + pending, tenants={"a": TenantLimits(guaranteed_gpus=16)})
    remaining = {j.id: rng.uniform(60, 7200) for j in running + pending}
    out = forecast_starts(snap, now=NOW, remaining=remaining, policy=policy)
    assert set(out) == {j.id for j in pending}
    # (With guarantees, tenant "a" reclaims its share from the running jobs at once: starts at NOW are right.)
    assert all(f.outlook == StartOutlook.ESTIMATED and f.at is not None and f.at >= NOW for f in out.values())


def test_jobs_past_the_round_budget_are_told_they_are_too_far_back(b):
    snap = b.snapshot(
        [b.node("n1", 1, free=[])], [b.running("a", [("n1", 100)])] + [b.job(k, 1, float(k)) for k in range(5)]
    )
    out = forecast_starts(snap, now=NOW, remaining=dict.fromkeys(["a", 0, 1, 2, 3, 4], 10.0), max_rounds=3)
    far = StartForecast(StartOutlook.BEYOND_REACH)
    assert out == {0: at(10), 1: at(20), 2: far, 3: far, 4: far}  # three rounds: now, at 10 s and at 20 s


def test_round_budget_bounds_preemptive_forecasts_by_queue_size():
    assert round_budget(25_000, preemptive=False) == DEFAULT_MAX_ROUNDS  # a plain round is cheap at any size
    assert round_budget(25_000, preemptive=True, work=10_000_000) == 400
    assert round_budget(1_000_000, preemptive=True) == 100  # the head of any queue still gets a time
    assert round_budget(10, preemptive=True) == DEFAULT_MAX_ROUNDS
