"""The shared-GPU guard (issue #17) on real child processes: evictions to protect online work (which client, which
signals, in what order, on which GPU) and MPS server faults (every client of that GPU hit, no other GPU's, the
server restarted, faults counted per job). The MPS server and the GPU readings are the simulated hardware."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import pytest

from agent.client import StartOrder, TaskKey, TaskState
from agent.mps import DaemonRecords
from agent.mps_sim import SimulatedMps
from agent.runner import Runner, Task
from agent.share import Share, WorkloadClass
from agent.share_guard import GuardLimits, ShareGuard, read_latency
from agent.telemetry_shipper import ProbeGate
from telemetry.probe import SimulatedProbe

#: An offline job that checkpoints on SIGUSR1 and exits on SIGTERM, saying so in its log.
OFFLINE = "trap 'echo checkpoint' USR1; trap 'echo stopped; exit 143' TERM; while :; do sleep 0.05; done"
#: An online job that reports a p99 of 80 ms.
ONLINE_SLOW = 'echo 80 > "$CORRAL_LATENCY_FILE"; trap "exit 0" TERM; while :; do sleep 0.05; done'


def share_order(
    job: int, command: str, *, gpu: int, online: bool = False, slo: float | None = None, memory_gib: int = 1
) -> StartOrder:
    klass = WorkloadClass.ONLINE if online else WorkloadClass.OFFLINE
    share = Share(50 if online else 25, memory_gib * 2**30, klass, slo)
    return StartOrder(TaskKey(job, 1, 0), command, (gpu,), {}, share=share)


def until(runner: Runner, done: Callable[[], object], timeout: float = 5.0, guard: ShareGuard | None = None) -> None:
    deadline = time.monotonic() + timeout
    while not done():
        assert time.monotonic() < deadline, "condition not reached in time"
        runner.poll()
        if guard is not None:
            guard.check()
        time.sleep(0.02)


def log_of(task: Task) -> str:
    return task.log_path.read_text() if task.log_path.exists() else ""


def said(task: Task) -> list[str]:
    """What the offline job's traps wrote, in order (the shell may add a "Terminated" line for its sleep)."""
    return [line for line in log_of(task).splitlines() if line in ("checkpoint", "stopped")]


@pytest.fixture
def node(tmp_path: Path):
    """A runner with simulated MPS on 2 simulated GPUs, its guard looking at every call."""
    probe = SimulatedProbe(2)
    gate = ProbeGate(probe)
    runner = Runner(tmp_path / "work", on_gpus=gate.mark)
    mps = SimulatedMps(tmp_path / "work" / "mps", DaemonRecords(runner.run_dir), gpus=2)
    made: list[ShareGuard] = []

    def guard(**limits: float | None) -> ShareGuard:
        settings = {"memory_percent": None, "sustain_seconds": 0.0, "evict_grace": 0.3, "check_every": 0.0}
        made.append(ShareGuard(runner, mps, gate=gate, limits=GuardLimits(**settings | limits), stop_grace=1.0))
        return made[-1]

    yield runner, mps, guard
    runner.terminate_all(0.5)
    for made_guard in made:
        made_guard.stop_daemons()


def test_offline_clients_are_evicted_newest_first_with_sigusr1_then_stopped(node) -> None:
    runner, _mps, make_guard = node
    guard = make_guard()
    online = runner.start(share_order(1, ONLINE_SLOW, gpu=0, online=True, slo=50.0))
    older = runner.start(share_order(2, OFFLINE, gpu=0))
    time.sleep(0.05)
    newer = runner.start(share_order(3, OFFLINE, gpu=0))
    elsewhere = runner.start(share_order(4, OFFLINE, gpu=1))  # GPU 1 has no online work to protect
    until(runner, lambda: (online.directory / "latency_p99_ms").exists())
    time.sleep(0.1)  # the offline jobs have installed their traps

    guard.check()
    assert newer.eviction == {
        "gpu": 0,
        "reason": "evicted to protect online work on GPU 0",
        "cause": "online job 1 reports p99 80 ms, over its 50 ms",
    }
    assert older.eviction is None and elsewhere.eviction is None and online.eviction is None
    until(runner, lambda: "checkpoint" in log_of(newer))
    assert newer.alive  # SIGUSR1 only asks for a checkpoint; the stop follows after the grace

    until(runner, lambda: not newer.alive, guard=guard)  # grace over: SIGTERM
    assert said(newer) == ["checkpoint", "stopped"] and newer.exit_code == 143
    # One at a time: only once the first victim is gone does the still-slow online job cost the next one its place.
    until(runner, lambda: older.eviction is not None, guard=guard)
    until(runner, lambda: not older.alive, guard=guard)
    assert said(older) == ["checkpoint", "stopped"]
    assert online.alive and elsewhere.alive and elsewhere.eviction is None
    assert "checkpoint" not in log_of(elsewhere) and online.signalled == set()


def test_no_eviction_while_the_online_job_meets_its_latency_or_reports_none(node) -> None:
    runner, _mps, make_guard = node
    guard = make_guard(p99_ms=100.0)
    fast = runner.start(share_order(1, 'echo 12.5 > "$CORRAL_LATENCY_FILE"; sleep 30', gpu=0, online=True))
    silent = runner.start(share_order(2, "sleep 30", gpu=1, online=True))
    offline = [runner.start(share_order(job, OFFLINE, gpu=job - 3)) for job in (3, 4)]
    until(runner, lambda: (fast.directory / "latency_p99_ms").exists())
    for _ in range(5):
        guard.check()
    assert all(task.eviction is None for task in offline) and fast.alive and silent.alive


def test_memory_pressure_evicts_an_offline_client(node) -> None:
    runner, _mps, make_guard = node
    # Three clients on simulated GPU 0 with 24 GiB limits hold 3 × 18,000 MiB of 81,559: 67 %.
    guard = make_guard(memory_percent=60.0, sustain_seconds=0.2)
    runner.start(share_order(1, "sleep 30", gpu=0, online=True, memory_gib=24))
    offline = [runner.start(share_order(job, OFFLINE, gpu=0, memory_gib=24)) for job in (2, 3)]
    guard.check()
    assert all(task.eviction is None for task in offline)  # it must hold for sustain_seconds first
    until(runner, lambda: any(task.eviction for task in offline), guard=guard)
    (evicted,) = [task for task in offline if task.eviction]
    assert evicted.eviction is not None and "GPU memory 67% used, limit 60%" in evicted.eviction["cause"]


def test_utilization_limit_is_off_unless_asked(node) -> None:
    runner, _mps, make_guard = node
    guard = make_guard()
    runner.start(share_order(1, "sleep 30", gpu=0, online=True))
    offline = runner.start(share_order(2, OFFLINE, gpu=0))
    guard.check()
    assert offline.eviction is None  # the simulated busy GPU shows 72-98 % utilisation
    guard.limits = GuardLimits(util_percent=50.0, sustain_seconds=0.0, evict_grace=0.3, check_every=0.0)
    guard.check()
    assert offline.eviction is not None and "GPU utilization" in offline.eviction["cause"]


def test_a_server_fault_hits_every_client_of_its_gpu_and_no_other(node) -> None:
    runner, mps, make_guard = node
    guard = make_guard()
    online = runner.start(share_order(1, "trap 'exit 1' TERM; while :; do sleep 0.05; done", gpu=0, online=True))
    culprit = runner.start(share_order(2, OFFLINE, gpu=0))
    neighbour = runner.start(share_order(3, OFFLINE, gpu=1))
    guard.check()
    assert culprit.pid is not None
    mps.inject_fault(0, culprit=culprit.pid)

    guard.check()
    assert online.mps_fault is not None and culprit.mps_fault is not None
    assert online.mps_fault["action"] == "restart" and culprit.mps_fault["action"] == "requeue"
    assert culprit.mps_fault["suspect"] is True and online.mps_fault["suspect"] is False
    assert online.mps_fault["gpu"] == 0 and online.mps_fault["faults"] == 1
    assert neighbour.mps_fault is None
    # While the faulted server waits for its clients, no new share goes to that GPU; GPU 1 takes them.
    assert not guard.accepts(share_order(9, "true", gpu=0)) and guard.accepts(share_order(9, "true", gpu=1))
    until(runner, lambda: not online.alive and not culprit.alive)
    assert neighbour.alive
    guard.check()  # every client is gone: a fresh daemon, a fresh server
    assert mps.starts == {0: 2, 1: 1} and mps.fault(0) is None
    assert guard.accepts(share_order(9, "true", gpu=0))

    # The same job faulting a server again is counted again: the portal marks a repeat culprit.
    again = runner.start(StartOrder(TaskKey(2, 2, 0), OFFLINE, (0,), {}, share=Share(25)))
    guard.check()
    assert again.pid is not None
    mps.inject_fault(0, culprit=again.pid)
    guard.check()
    assert again.mps_fault is not None
    assert (again.mps_fault["faults"], again.mps_fault["suspect_faults"]) == (2, 2)
    assert guard.fault_counts == {1: 1, 2: 2}  # job 3, on GPU 1, was never hit


def test_a_client_that_died_of_the_fault_is_reported_with_it(node) -> None:
    runner, mps, make_guard = node
    guard = make_guard()
    dying = runner.start(share_order(1, "sleep 0.3; exit 1", gpu=1))
    guard.check()  # seen alive
    until(runner, lambda: not dying.alive)
    assert guard.exit_pending()  # the loop looks again before it reports this exit
    mps.inject_fault(1)
    guard.check(force=True)
    assert dying.mps_fault is not None and dying.mps_fault["action"] == "requeue"
    assert dying.state is TaskState.EXITED and not guard.exit_pending()


def test_the_fault_travels_in_the_heartbeat_and_starts_wait_for_the_restart(portal, make_agent, step_until) -> None:
    agent = make_agent(portal.url)
    mps = SimulatedMps(agent.runner.workdir / "mps", DaemonRecords(agent.runner.run_dir), gpus=2)
    agent.guard = ShareGuard(agent.runner, mps, limits=GuardLimits(check_every=0.0), stop_grace=0.5)
    portal.add_task(1, "sleep 30", gpus=[0])
    portal.orders["1:1:0"]["share"] = {"compute_percent": 50, "workload_class": "online"}
    step_until(agent, lambda: "running" in portal.states(1))
    mps.inject_fault(0)
    portal.add_task(2, "sleep 30", gpus=[0])
    portal.orders["2:1:0"]["share"] = {"compute_percent": 50}
    step_until(agent, lambda: (portal.last(1) or {}).get("state") == "exited")
    exit_report = portal.last(1)
    assert exit_report is not None and exit_report["mps_fault"]["action"] == "restart"
    assert exit_report["mps_fault"]["gpu"] == 0 and "simulated fault" in exit_report["mps_fault"]["detail"]
    # Job 2's start was held back while the server recovered, then started on the fresh server.
    step_until(agent, lambda: "running" in portal.states(2))
    assert mps.starts[0] == 2
    assert "mps_fault" not in portal.last(2) and "eviction" not in portal.last(2)


def test_latency_file_reading_is_defensive(tmp_path: Path) -> None:
    path = tmp_path / "latency_p99_ms"
    now = time.time()
    assert read_latency(path, now, 10.0) is None
    path.write_text("42.5\n")
    assert read_latency(path, now, 10.0) == 42.5
    assert read_latency(path, now + 60, 10.0) is None  # stale
    for bad in ("", "fast", "-1", "nan", "inf"):
        path.write_text(bad)
        assert read_latency(path, now, 10.0) is None, bad
    link = tmp_path / "link"
    link.symlink_to(path)
    path.write_text("5")
    assert read_latency(link, now, 10.0) is None  # never through a symlink the job planted


def test_the_guards_readings_take_nothing_from_the_shipped_samples() -> None:
    from telemetry.probe.simulated import XidFault

    probe = SimulatedProbe(2)
    gate = ProbeGate(probe)
    probe.sample(1000.0)
    probe.inject(1, XidFault(31))
    peeked = gate.peek(1001.0)  # the guard looks first and sees the XID in its reading...
    assert [sample.xid for sample in peeked] == [0, 31]
    samples, events = gate.sample(1002.0)  # ...and the shipped sample still carries it, and the event
    assert [sample.xid for sample in samples] == [0, 31]
    assert [event.xid for event in events] == [31]
    samples, _ = gate.sample(1003.0)
    assert [sample.xid for sample in samples] == [0, 0]
