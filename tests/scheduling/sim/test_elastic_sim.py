"""The elastic replay (issue #19): the reference numbers without loans or elastic jobs, GPUs never handed out twice,
every reclaim met on time, and elastic jobs growing into idle and lent GPUs."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scheduling.core.elastic import Hysteresis, Objective, ScalingCurve
from scheduling.core.placement import resolve_placement
from scheduling.core.policies import resolve_policy
from scheduling.sim.cluster import Cluster
from scheduling.sim.demand import Diurnal, SeriesDemand, read_series
from scheduling.sim.elastic_sim import ElasticSetup, LoanSetup, Restarts, _Replay, simulate_elastic
from scheduling.sim.metrics import measure
from scheduling.sim.simulator import simulate
from scheduling.sim.trace import TraceError, TraceJob, parse_trace

TIRESIAS_60 = Path(__file__).resolve().parents[3].parent / "shared" / "traces" / "tiresias_60job.csv"


def _jobs(*specs: tuple[float, float, int]) -> list[TraceJob]:
    return [TraceJob(str(i), submit, duration, gpus) for i, (submit, duration, gpus) in enumerate(specs)]


@pytest.mark.skipif(not TIRESIAS_60.exists(), reason="needs ../shared/traces")
def test_without_loans_or_elastic_jobs_it_is_the_reference_replay():
    from scheduling.sim.trace import read_trace

    jobs = read_trace(TIRESIAS_60)
    result = simulate_elastic(jobs, "fifo", cluster=Cluster(2, 4))
    assert result.summary()["avg_jct"] == pytest.approx(1556.48, abs=0.005)
    # A pool that never lends changes nothing for training.
    idle_pool = simulate_elastic(jobs, "fifo", cluster=Cluster(2, 4), loan=LoanSetup(2, lend=False))
    assert idle_pool.summary()["avg_jct"] == result.summary()["avg_jct"]


@settings(max_examples=40, deadline=None)
@given(
    specs=st.lists(
        st.tuples(st.integers(0, 5000), st.integers(1, 4000), st.sampled_from([1, 2, 4, 8])), min_size=1, max_size=25
    ),
    policy=st.sampled_from(["fifo", "fifo-backfill", "sjf"]),
)
def test_plain_replays_agree_with_the_reference_simulator(specs, policy):
    jobs = _jobs(*((float(s), float(d), g) for s, d, g in specs))
    reference = measure(simulate(jobs, policy, cluster=Cluster(2, 4)))
    ours = simulate_elastic(jobs, policy, cluster=Cluster(2, 4)).summary()
    assert ours["avg_jct"] == pytest.approx(reference.avg_jct)
    assert ours["avg_queue"] == pytest.approx(reference.avg_queue)


def test_an_elastic_job_grows_into_idle_gpus():
    curve = ScalingCurve(1.0)  # linear: four times as fast on four times the GPUs
    job = _jobs((0.0, 4000.0, 2))
    elastic = ElasticSetup(share=1.0, factor=4, curve=curve, hysteresis=Hysteresis())
    result = simulate_elastic(job, "fifo", cluster=Cluster(2, 4), elastic=elastic, restarts=Restarts(0, 0, 1800))
    assert result.outcomes[0].finish == pytest.approx(1000.0)
    assert result.summary()["resizes"] == 1


def test_a_waiting_job_takes_back_an_elastic_jobs_spare_gpus():
    jobs = _jobs((0.0, 8000.0, 2), (100.0, 1000.0, 4))
    elastic = ElasticSetup(share=1.0, factor=4, curve=ScalingCurve(1.0), hysteresis=Hysteresis())
    result = simulate_elastic(jobs, "fifo", cluster=Cluster(2, 4), elastic=elastic, restarts=Restarts(0, 0, 1800))
    by_id = {o.job_id: o for o in result.outcomes}
    assert by_id["1"].first_start == 100.0  # the second job's minimum comes before the first job's extras
    # The first job ran on 8 GPUs (4x) until 100 s, on 4 (2x) while the second ran, then on 8 again.
    assert by_id["0"].finish == pytest.approx(100.0 + 1000.0 + (8000.0 - 400.0 - 2000.0) / 4)


def test_a_trace_column_makes_a_job_elastic():
    text = "job_id,submit_time,duration,num_gpus,max_gpus\na,0,4000,1,4\nb,0,100,1,\n"
    jobs = parse_trace(text.splitlines(keepends=True))
    assert [j.max_gpus for j in jobs] == [4, None]
    result = simulate_elastic(jobs, "fifo", cluster=Cluster(1, 4), elastic=ElasticSetup(curve=ScalingCurve(1.0)))
    assert {o.job_id: o.finish for o in result.outcomes}["a"] < 4000.0


def test_a_max_below_the_size_is_refused_with_its_line():
    text = "job_id,submit_time,duration,num_gpus,max_gpus\na,0,10,4,2\n"
    with pytest.raises(TraceError, match=r"<trace>:2: max_gpus \(2\) is below num_gpus \(4\)"):
        parse_trace(text.splitlines(keepends=True))


def test_lent_servers_take_work_and_reclaims_are_met_on_time():
    # 16 one-GPU jobs of a day on 1 x 4 GPUs, plus a pool of 4 one-node servers idle half the day.
    jobs = _jobs(*((0.0, 86_400.0, 1) for _ in range(16)))
    pool = LoanSetup(4, gpus_per_node=4, demand=Diurnal(low=0.0, high=1.0), deadline=60.0)
    base = simulate_elastic(jobs, "fifo", cluster=Cluster(1, 4), loan=LoanSetup(4, 4, Diurnal(0.0, 1.0), lend=False))
    lent = simulate_elastic(jobs, "fifo", cluster=Cluster(1, 4), loan=pool)
    assert lent.summary()["avg_jct"] < base.summary()["avg_jct"]
    assert lent.summary()["usage_whole_run"] > base.summary()["usage_whole_run"]  # all submitted at once
    assert lent.reclaims and all(r.on_time for r in lent.reclaims)
    assert lent.summary()["preemptions"] > 0  # whole-node jobs on reclaimed servers had to stop


def test_a_deadline_shorter_than_a_checkpoint_stops_jobs_at_once_and_charges_their_progress():
    jobs = _jobs(*((0.0, 86_400.0, 4) for _ in range(3)))
    slow = Restarts(restart_seconds=10.0, checkpoint_seconds=120.0, checkpoint_every=3600.0)
    pool = LoanSetup(2, 4, Diurnal(0.0, 1.0), deadline=60.0)
    result = simulate_elastic(jobs, "fifo", cluster=Cluster(1, 4), loan=pool, restarts=slow)
    assert result.reclaims and all(r.on_time and r.vacate_seconds == 0.0 for r in result.reclaims)
    assert any(r.cost > 0 for r in result.reclaims)


@settings(max_examples=25, deadline=None)
@given(
    specs=st.lists(
        st.tuples(st.integers(0, 200_000), st.integers(60, 40_000), st.sampled_from([1, 2, 4, 8])),
        min_size=1,
        max_size=30,
    ),
    share=st.sampled_from([0.0, 0.5, 1.0]),
    servers=st.integers(0, 3),
    deadline=st.sampled_from([0.0, 60.0]),
    objective=st.sampled_from(["jct", "throughput"]),
)
def test_random_replays_finish_every_job_meet_every_reclaim_and_leak_no_gpu(specs, share, servers, deadline, objective):
    jobs = _jobs(*((float(s), float(d), g) for s, d, g in specs))
    replay = _Replay(
        jobs,
        resolve_policy("fifo-backfill"),
        Cluster(2, 4),
        resolve_placement("count"),
        LoanSetup(servers, 4, Diurnal(0.1, 0.9), deadline=deadline, step=900.0),
        ElasticSetup(share=share, factor=3, objective=Objective(objective)),
        Restarts(),
    )
    result = replay.run()
    assert len(result.outcomes) == len(jobs)
    assert all(r.on_time for r in result.reclaims)
    for o in result.outcomes:
        assert o.first_start >= o.submit and o.finish >= o.first_start
    # Every GPU that takes work is free again, once each; nothing runs.
    assert not replay.running and replay.busy_training == 0
    for name, ids in replay.free.items():
        assert len(ids) == len(set(ids))
        if name.startswith("n") or name in replay.lent:
            assert len(ids) == replay.sizes[name]
        else:
            assert ids == []
    s = result.summary()
    assert 0.0 <= s["usage"] <= 1.0 + 1e-9


def test_diurnal_demand_is_lowest_at_night_and_covers_its_step():
    day = Diurnal(low=0.2, high=0.95)
    assert day.share(4 * 3600.0) == pytest.approx(0.2)
    assert day.share(16 * 3600.0) == pytest.approx(0.95)
    assert day.busy(24, 600.0, 10) == math.ceil(day.share(24 * 600.0 + 600.0) * 10)  # 04:00-04:10: its end
    assert day.busy(96, 600.0, 10) == math.ceil(0.95 * 10 - 1e-9)  # 16:00-16:10
    assert day.busy(95, 600.0, 10) == math.ceil(0.95 * 10 - 1e-9)  # the step that ends at the peak


def test_a_series_of_busy_servers_is_read_and_looped(tmp_path):
    path = tmp_path / "busy.csv"
    path.write_text("minute,busy\n0,1\n1,3\n3,2\n")
    series = read_series(path)
    assert series.minutes == (1, 3, 3, 2)
    assert series.busy(0, 120.0, 10) == 3
    assert series.busy(2, 120.0, 10) == 3  # minutes 4-5 loop back to minutes 0-1
    assert SeriesDemand((5,)).busy(0, 60.0, 2) == 2  # never more than the pool


@pytest.mark.parametrize(
    ("text", "message"),
    [("m,b\n0,1\n", "minute,busy"), ("minute,busy\nx,1\n", "must be numbers"), ("minute,busy\n", "no minutes")],
)
def test_a_bad_series_is_refused(tmp_path, text, message):
    path = tmp_path / "busy.csv"
    path.write_text(text)
    with pytest.raises(ValueError, match=message):
        read_series(path)


def test_bad_setups_are_refused():
    with pytest.raises(ValueError, match="deadline"):
        LoanSetup(2, deadline=700.0)
    with pytest.raises(ValueError, match="share"):
        ElasticSetup(share=1.5)
    with pytest.raises(ValueError, match="non-preemptive"):
        simulate_elastic(_jobs((0.0, 1.0, 1)), "tiresias-las", cluster=Cluster(1, 1))
