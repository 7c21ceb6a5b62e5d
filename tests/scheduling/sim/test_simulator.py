"""The simulator: the published anchor, preemption costs, determinism, and agreement with ``decide``."""

from __future__ import annotations

import statistics
from pathlib import Path

import pytest

from scheduling.core import JobState, JobView, NodeView, Snapshot, decide, resolve_policy
from scheduling.core.model import FinishedJob
from scheduling.core.policies.las import TiresiasLas
from scheduling.core.preemption import PreemptionCost
from scheduling.sim.simulator import Cluster, simulate
from scheduling.sim.trace import TraceJob, parse_trace

SHARED = Path(__file__).resolve().parents[4] / "shared" / "traces"
TIRESIAS_60 = SHARED / "tiresias_60job.csv"


def jobs(*rows: tuple[float, float, int]) -> list[TraceJob]:
    return [TraceJob(job_id=f"j{i}", submit_time=s, duration=d, gpus=g) for i, (s, d, g) in enumerate(rows)]


def avg_jct(result) -> float:
    return statistics.mean(o.jct for o in result.outcomes)


@pytest.mark.skipif(not TIRESIAS_60.exists(), reason="shared traces not present")
@pytest.mark.parametrize(("nodes", "gpus"), [(2, 4), (1, 8)])
def test_anchor_tiresias_60_jobs_fifo_average_jct(nodes, gpus):
    from scheduling.sim.trace import read_trace

    result = simulate(read_trace(TIRESIAS_60), "fifo", cluster=Cluster(nodes, gpus), placement="count")
    assert len(result.outcomes) == 60
    assert round(avg_jct(result), 2) == 1556.48


def test_strict_fifo_blocks_and_backfill_does_not():
    trace = jobs((0, 100, 2), (1, 50, 4), (2, 10, 1))
    fifo = {o.job_id: (o.first_start, o.finish) for o in simulate(trace, "fifo", cluster=Cluster(1, 4)).outcomes}
    backfill = {o.job_id: o.first_start for o in simulate(trace, "fifo-backfill", cluster=Cluster(1, 4)).outcomes}
    assert fifo == {"j0": (0, 100), "j1": (100, 150), "j2": (150, 160)}
    assert backfill == {"j0": 0, "j1": 100, "j2": 2}


def test_preempted_job_pays_restore_overhead_on_resume():
    trace = jobs((0, 100, 1), (50, 10, 1))
    result = simulate(trace, "srtf", cluster=Cluster(1, 1), overhead=PreemptionCost.helios())
    by_id = {o.job_id: o for o in result.outcomes}
    assert by_id["j1"].finish == 60
    assert by_id["j0"].finish == 60 + 50 + 7  # 50 s left plus the 1-GPU restore overhead
    assert by_id["j0"].preemptions == 1 and result.preemptions == 1
    assert by_id["j0"].held == 107


def test_minimum_quantum_delays_preemption():
    trace = jobs((0, 100, 1), (10, 5, 1))
    policy = resolve_policy("srtf")
    policy.min_quantum = 30.0
    result = simulate(trace, policy, cluster=Cluster(1, 1))
    assert {o.job_id: o.finish for o in result.outcomes} == {"j1": 35, "j0": 105}


def test_las_demotes_at_threshold_and_serves_the_newcomer():
    # Job 0 crosses 50 GPU-s at t=25 (2 GPUs); job 1 arrives at t=30 into the top queue and preempts it.
    trace = jobs((0, 100, 2), (30, 10, 2))
    result = simulate(trace, TiresiasLas(thresholds=(50.0,)), cluster=Cluster(1, 2))
    by_id = {o.job_id: o for o in result.outcomes}
    assert by_id["j1"].first_start == 30 and by_id["j1"].finish == 40
    assert by_id["j0"].finish == 110


def test_jobs_bigger_than_the_cluster_are_skipped_not_stuck():
    result = simulate(jobs((0, 10, 1), (0, 10, 16)), "fifo", cluster=Cluster(1, 8))
    assert result.skipped == ("j1",)
    assert [o.job_id for o in result.outcomes] == ["j0"]


def test_same_inputs_same_result():
    trace = jobs(*[(i * 7 % 50, 20 + (i * 13) % 90, 1 + i % 4) for i in range(40)])
    a = simulate(trace, "tiresias-gittins", cluster=Cluster(2, 4), placement="topology")
    b = simulate(trace, "tiresias-gittins", cluster=Cluster(2, 4), placement="topology")
    assert a == b


def test_trace_reader_ignores_unknown_columns_and_sorts_by_submit():
    text = "job_id,submit_time,duration,num_gpus,user,vc,mystery\nb,5,10,2,u1,v1,x\na,1,3,1,,,y\n"
    trace = parse_trace(text.splitlines(keepends=True))
    assert [(j.job_id, j.submit_time, j.gpus, j.user, j.tenant) for j in trace] == [
        ("a", 1.0, 1, "", ""),
        ("b", 5.0, 2, "u1", "v1"),
    ]


# -- the simulator agrees with a naive replay that rebuilds a Snapshot and calls decide() at every event --------


def replay_with_decide(trace: list[TraceJob], policy_name: str, nodes: int, gpus: int, placement: str) -> dict:
    """The simplest possible simulator over the public ``decide``: what the live loop does, event by event."""
    policy = resolve_policy(policy_name)
    free = {f"n{i}": set(range(i * gpus, (i + 1) * gpus)) for i in range(nodes)}
    views = {}
    remaining = {j.job_id: j.duration for j in trace}
    started_at: dict[str, float] = {}
    finish: dict[str, float] = {}
    now = 0.0
    arrivals = sorted({j.submit_time for j in trace})
    while len(finish) < len(trace):
        for j in trace:
            if j.submit_time <= now and j.job_id not in views and j.job_id not in finish:
                views[j.job_id] = JobView(
                    id=j.job_id,
                    tenant="",
                    user="",
                    gpus=j.gpus,
                    submit_time=j.submit_time,
                    last_queued=j.submit_time,
                    duration=j.duration,
                )
        nodes_view = tuple(NodeView(n, gpus, tuple(sorted(ids))) for n, ids in free.items())
        order = sorted(views.values(), key=lambda v: trace.index(next(t for t in trace if t.job_id == v.id)))
        decision = decide(Snapshot(nodes_view, tuple(order)), now=now, policy=policy, placement=placement)
        for job_id in decision.preempt:
            v = views[job_id]
            ran = now - started_at[job_id]
            remaining[job_id] -= ran
            for s in v.allocation:
                free[s.node].add(s.gpu)
            views[job_id] = JobView(
                id=v.id,
                tenant="",
                user="",
                gpus=v.gpus,
                submit_time=v.submit_time,
                attained_service=v.attained_service + v.gpus * ran,
                executed_time=v.executed_time + ran,
                last_queued=now,
                duration=v.duration,
            )
        for p in decision.start:
            v = views[p.job_id]
            for s in p.slots:
                free[s.node].remove(s.gpu)
            started_at[p.job_id] = now
            views[p.job_id] = JobView(
                id=v.id,
                tenant="",
                user="",
                gpus=v.gpus,
                submit_time=v.submit_time,
                state=JobState.RUNNING,
                allocation=p.slots,
                last_started=now,
                service_at=now,
                attained_service=v.attained_service,
                executed_time=v.executed_time,
                last_queued=v.last_queued,
                duration=v.duration,
            )
        # Next instant: an arrival, a completion, or a change of some running job's priority.
        candidates = [t for t in arrivals if t > now]
        for job_id, v in views.items():
            if v.state == JobState.RUNNING:
                candidates.append(started_at[job_id] + remaining[job_id])
                expiry = policy.key_expiry(v, now)
                if now < expiry < float("inf"):
                    candidates.append(expiry)
        now = min(candidates)
        for job_id, v in list(views.items()):
            if v.state == JobState.RUNNING and started_at[job_id] + remaining[job_id] <= now:
                finish[job_id] = now
                for s in v.allocation:
                    free[s.node].add(s.gpu)
                del views[job_id]
                policy.observe_finished(
                    FinishedJob(job_id, "", "", v.gpus, v.submit_time, now, v.executed_time + now - started_at[job_id])
                )
    return finish


@pytest.mark.parametrize("policy", ["fifo", "fifo-backfill", "sjf", "srsf", "tiresias-las", "qssf"])
@pytest.mark.parametrize("placement", ["count", "consolidate"])
def test_simulator_matches_a_replay_through_decide(policy, placement):
    trace = jobs(*[(i * 11 % 97, 30 + (i * 37) % 200, (1, 2, 4, 1, 8)[i % 5]) for i in range(30)])
    las = TiresiasLas(thresholds=(100.0, 400.0)) if policy == "tiresias-las" else policy
    expected = replay_with_decide(trace, policy, 2, 4, placement) if policy != "tiresias-las" else None
    result = simulate(trace, las, cluster=Cluster(2, 4), placement=placement)
    got = {o.job_id: o.finish for o in result.outcomes}
    if expected is None:  # LAS with custom thresholds: replay the same object configuration
        import scheduling.core.policies as registry

        registry.POLICIES["_test-las"] = lambda: TiresiasLas(thresholds=(100.0, 400.0))
        try:
            expected = replay_with_decide(trace, "_test-las", 2, 4, placement)
        finally:
            del registry.POLICIES["_test-las"]
    assert got == expected


def test_a_laid_out_cluster_has_exactly_its_nodes():
    cluster = Cluster.of_nodes([(8, "r1"), (2, "r1"), (4, "r2")])
    assert (cluster.nodes, cluster.gpus_per_node, cluster.racks, cluster.total_gpus) == (3, 8, 2, 14)
    assert cluster.describe() == "3 nodes, 14 GPUs"
    pool = cluster.free_pool()
    assert pool.names == ["n0", "n1", "n2"] and pool.racks == ["r1", "r1", "r2"]
    assert pool.free == [list(range(8)), [8, 9], [10, 11, 12, 13]]  # ids count on from node to node
    assert Cluster(2, 4).describe() == "2 x 4 GPUs" and Cluster(2, 4).total_gpus == 8
    for bad in ([], [(4, "r1"), (0, "r1")]):
        with pytest.raises(ValueError, match="at least one"):
            Cluster.of_nodes(bad)


def test_a_mixed_cluster_runs_what_its_uniform_approximation_cannot():
    # One 8-GPU node and two 2-GPU nodes. The uniform cluster nearest to it (three nodes of the most common size)
    # has 6 GPUs and must skip an 8-GPU job; the copy runs it on its big node once that node is free, with
    # consolidating placement never splitting it.
    trace = jobs((0, 100, 2), (0, 100, 2), (0, 100, 2), (1, 50, 8))
    mixed = simulate(trace, "fifo", cluster=Cluster.of_nodes([(8, ""), (2, ""), (2, "")]), placement="consolidate")
    assert mixed.skipped == () and {o.job_id: o.first_start for o in mixed.outcomes}["j3"] == 100
    assert simulate(trace, "fifo", cluster=Cluster(3, 2), placement="consolidate").skipped == ("j3",)
