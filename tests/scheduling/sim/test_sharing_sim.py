"""The sharing replay (issue #17) on small generated traces: everything finishes, nothing fails, evictions requeue."""

from __future__ import annotations

import json
import random

import pytest
import typer
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from scheduling.core.sharing import GIB, SharedGpu, SharingPolicy, WorkloadClass, violations
from scheduling.sim import cli
from scheduling.sim.share_metrics import measure_sharing
from scheduling.sim.share_trace import ShareTask, read_share_trace
from scheduling.sim.sharing import OnlineLoad, simulate_sharing

ONLINE, OFFLINE = WorkloadClass.ONLINE, WorkloadClass.OFFLINE


def generated(n: int = 120, seed: int = 0) -> list[ShareTask]:
    rng = random.Random(seed)
    t = 0.0
    out = []
    for i in range(n):
        t += rng.expovariate(1 / 60)
        cls = ONLINE if rng.random() < 0.25 else OFFLINE
        out.append(ShareTask(f"t{i}", t, rng.uniform(300, 3000), rng.choice([0.1, 0.25, 0.3, 0.5, 0.8]), cls))
    return out


def cluster(n: int = 4) -> list[SharedGpu]:
    return [SharedGpu("n", i, 32 * GIB) for i in range(n)]


@pytest.mark.parametrize("placer", ["first-fit", "best-fit", "matching"])
def test_every_task_finishes_and_sharing_beats_whole_gpus_on_a_busy_cluster(placer):
    tasks = generated()
    whole = measure_sharing(simulate_sharing(tasks, cluster(), sharing=False))
    shared = measure_sharing(simulate_sharing(tasks, cluster(), placer=placer))
    assert whole.tasks == shared.tasks == len(tasks)
    assert whole.online_slowdown_max == 0.0 and whole.evictions == 0
    assert shared.utilization_allocated > whole.utilization_allocated
    assert shared.offline_queue_mean < whole.offline_queue_mean
    assert shared.online_slowdown_max <= 0.05 + 1e-9  # the default budget


def test_a_rising_online_load_evicts_offline_work_which_is_requeued_and_finishes():
    """One GPU: an online service asking 0.9 whose load swings over the day, and offline work that fits only
    while it is quiet. Evicted offline tasks come back and finish; none is lost."""
    policy = SharingPolicy(slowdown_budget=1.0, headroom=0.0)
    tasks = [ShareTask("svc", 0.0, 2 * 86400, 0.9, ONLINE, gpu_memory_bytes=4 * GIB)]
    tasks += [ShareTask(f"b{i}", 60.0 * i, 4 * 3600, 0.4, OFFLINE, 4 * GIB) for i in range(1, 6)]
    result = simulate_sharing(
        tasks, cluster(1), policy=policy, online_load=OnlineLoad(mid=0.5, amp=0.5), tick=600, restart_overhead=30
    )
    records = {r.task_id: r for r in result.records}
    assert set(records) == {t.task_id for t in tasks}
    assert result.evictions > 0
    evicted = [r for r in records.values() if r.evictions]
    assert evicted and all(r.workload_class == OFFLINE for r in evicted)
    assert all(r.finish_time >= r.start_time + 4 * 3600 for r in records.values() if r.workload_class == OFFLINE)


def test_shares_never_go_to_a_gpu_without_sharing_except_as_a_whole_gpu():
    gpus = [SharedGpu("old", 0, 16 * GIB, sharing=False)]
    tasks = [ShareTask("a", 0.0, 100.0, 0.2), ShareTask("b", 0.0, 100.0, 0.2)]
    result = simulate_sharing(tasks, gpus, placer="matching")
    a, b = sorted(result.records, key=lambda r: r.task_id)
    assert b.start_time >= a.finish_time  # one at a time: the GPU takes no shares
    assert result.evictions == 0


def test_the_shared_schema_reader_takes_single_gpu_rows_with_their_share(tmp_path):
    path = tmp_path / "t.csv"
    path.write_text(
        "job_id,user,vc,submit_time,duration,num_gpus,gpu_milli\na,u,LS,0,10,1,250\nb,u,,5,10,1,\nc,u,BE,1,10,2,\n",
        encoding="utf-8",
    )
    tasks = read_share_trace(path)
    assert [(t.task_id, t.gpu_fraction, t.workload_class) for t in tasks] == [
        ("a", 0.25, ONLINE),
        ("b", 1.0, OFFLINE),
    ]


@pytest.fixture
def app() -> typer.Typer:
    app = typer.Typer()
    cli.register(app)

    @app.command("noop")
    def noop() -> None:  # a second command keeps typer from collapsing the app into ``simulate`` itself
        """Nothing."""

    return app


def test_corral_simulate_sharing_on_prints_the_baseline_and_each_placer(app, tmp_path):
    path = tmp_path / "t.csv"
    rows = [
        f"t{i},u,{'LS' if i % 4 == 0 else 'BE'},{i * 20},{300 + 40 * i},1,{(250, 300, 500)[i % 3]}" for i in range(12)
    ]
    path.write_text("job_id,user,vc,submit_time,duration,num_gpus,gpu_milli\n" + "\n".join(rows) + "\n")
    args = ["simulate", "--trace", str(path), "--policy", "fifo", "--nodes", "1", "--gpus-per-node", "2"]
    out = CliRunner().invoke(app, [*args, "--sharing", "on", "--share-placer", "matching", "--json"])
    assert out.exit_code == 0, out.output
    modes = json.loads(out.output)["sharing"]
    assert list(modes) == ["whole-gpu", "matching"]
    assert modes["matching"]["tasks"] == 12 and modes["matching"]["online_slowdown_max"] <= 0.05 + 1e-9
    table = CliRunner().invoke(app, [*args, "--sharing", "on"])
    assert table.exit_code == 0 and "best-fit" in table.output and "first-fit" in table.output


def test_corral_simulate_sharing_refuses_a_bad_share_in_one_line(app, tmp_path):
    path = tmp_path / "t.csv"
    path.write_text("job_id,user,vc,submit_time,duration,num_gpus,gpu_milli\na,u,BE,0,10,1,1500\n")
    args = ["simulate", "--trace", str(path), "--policy", "fifo", "--nodes", "1", "--gpus-per-node", "2"]
    out = CliRunner().invoke(app, [*args, "--sharing", "on"])
    assert out.exit_code == 2
    assert "gpu_milli must be in (0, 1000]" in out.output and "Traceback" not in out.output


@settings(max_examples=40, deadline=None)
@given(
    seed=st.integers(0, 10_000),
    placer=st.sampled_from(["first-fit", "best-fit", "matching"]),
    budget=st.sampled_from([0.05, 0.3, 1.0]),
    memory_gib=st.sampled_from([None, 1]),
)
def test_replays_keep_the_rule_at_every_instant_and_evictions_requeue(seed, placer, budget, memory_gib):
    """Random small traces, online loads swinging from 0 to their whole share: at every instant each GPU obeys the
    rule (guaranteed compute and memory within the GPU, one online client at most, nothing beside a whole-GPU job);
    every task finishes; only offline tasks are evicted, and each eviction shows in its task's record."""
    rng = random.Random(seed)
    memory = None if memory_gib is None else memory_gib * GIB
    tasks = [
        ShareTask(
            f"t{i}",
            rng.uniform(0, 4000),
            rng.uniform(100, 5000),
            rng.choice([0.1, 0.3, 0.5, 0.8, 1.0]),
            ONLINE if rng.random() < 0.3 else OFFLINE,
            memory,
        )  # fmt: skip
        for i in range(rng.randint(1, 25))
    ]
    tasks.sort(key=lambda t: t.submit_time)
    policy = SharingPolicy(slowdown_budget=budget, headroom=0.05)
    gpus = [SharedGpu("n", i, 24 * GIB, sharing=i != 2, max_clients=4) for i in range(3)]

    def audit(states):
        for g in states:
            assert violations(g, policy) == []
            assert sum(t.memory_bytes for t in g.tenants) + g.gpu.reserve_bytes <= g.gpu.memory_bytes
            assert sum(t.fraction for t in g.tenants if t.is_guaranteed) <= 1 + 1e-9
            assert sum(t.is_online for t in g.tenants) <= 1
            assert not (g.tenants and (g.whole_holder is not None or not g.gpu.sharing))

    result = simulate_sharing(
        tasks, gpus, placer=placer, policy=policy, online_load=OnlineLoad(0.5, 0.5), tick=300, audit=audit
    )
    assert sorted(r.task_id for r in result.records) == sorted(t.task_id for t in tasks)
    assert result.skipped == 0
    assert sum(r.evictions for r in result.records) == result.evictions
    assert all(r.workload_class == OFFLINE for r in result.records if r.evictions)
    assert all(r.max_slowdown <= budget + 1e-9 for r in result.records)
