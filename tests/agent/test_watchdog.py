"""The lease watchdog as a real process: it kills its agent's recorded jobs once the lease has run out, never
another agent's, and outlives a dead agent only until that agent's jobs are gone. Ref: #15"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from agent.client import StartOrder, TaskKey
from agent.pid_records import AgentId, PidRecords
from agent.process_group import start_ticks
from agent.runner import Runner
from agent.watchdog import LeaseFile, start_watchdog, stop_watchdog

REPO = Path(__file__).resolve().parents[2]


def order(job: int, command: str) -> StartOrder:
    return StartOrder(TaskKey(job, 1, 0), command, (0,), {})


def test_kills_its_agents_jobs_after_the_lease_expires_and_no_one_elses(tmp_path: Path, wait_for, running) -> None:
    """This test process plays an agent that stops renewing its lease (as a SIGSTOPped one would)."""
    runner = Runner(tmp_path / "work")
    mine = runner.start(order(1, "trap '' TERM; sleep 30"))
    # A job recorded by another agent (a live process of its own) in the same run directory.
    other_agent = subprocess.Popen(["sleep", "30"])
    other_job = subprocess.Popen(["sleep", "30"], start_new_session=True)
    PidRecords(runner.run_dir, agent=AgentId(other_agent.pid, start_ticks(other_agent.pid))).write(
        TaskKey(2, 1, 0), other_job.pid
    )
    lease = LeaseFile(runner.run_dir / "agent.lease")
    lease.renew(0.5, 0.5)
    granted = time.monotonic()
    watchdog = start_watchdog(runner.run_dir, lease, runner.pid_records.agent, log_level="DEBUG")
    try:
        time.sleep(0.2)
        assert mine.pid is not None and running(mine.pid)  # within the lease: left alone
        wait_for(lambda: not running(mine.pid or 0), timeout=5)
        assert time.monotonic() - granted >= 0.5
        runner.poll()
        assert mine.exit_code == -signal.SIGKILL
        time.sleep(0.3)
        assert other_job.poll() is None  # another agent's job is not this watchdog's business
        # A renewed lease stops the killing: a job started now runs on.
        lease.renew(5.0, 5.0)
        time.sleep(0.3)  # the watchdog has seen the new lease
        fresh = runner.start(order(3, "sleep 30"))
        time.sleep(0.5)
        assert fresh.alive and runner.poll() == []
        assert watchdog.poll() is None
    finally:
        stop_watchdog(watchdog)
        runner.terminate_all(0)
        for process in (other_job, other_agent):
            process.kill()
            process.wait()
    assert watchdog.returncode == 0


def test_the_watchdog_of_a_killed_agent_kills_its_jobs_at_lease_expiry_then_exits(tmp_path: Path, wait_for, running):
    """A real agent-like process records a job, grants itself a lease, starts its watchdog, and dies (SIGKILL)."""
    script = f"""
import os, signal, sys
from pathlib import Path
from agent.client import StartOrder, TaskKey
from agent.runner import Runner
from agent.watchdog import LeaseFile, start_watchdog
runner = Runner(Path({str(tmp_path / "work")!r}))
task = runner.start(StartOrder(TaskKey(1, 1, 0), "sleep 30", (0,), {{}}))
lease = LeaseFile(runner.run_dir / "agent.lease")
lease.renew(1.0, 1.0)
watchdog = start_watchdog(runner.run_dir, lease, runner.pid_records.agent)
print(task.pid, watchdog.pid, flush=True)
os.kill(os.getpid(), signal.SIGKILL)
"""
    with (tmp_path / "agent.log").open("w") as log:  # the watchdog writes here too: no pipe to wait on
        argv = [sys.executable, "-c", script]
        agent = subprocess.Popen(argv, cwd=REPO, stdout=subprocess.PIPE, stderr=log, text=True)
        assert agent.stdout is not None
        line = agent.stdout.readline()
        assert agent.wait(timeout=10) == -signal.SIGKILL, (tmp_path / "agent.log").read_text()
        agent.stdout.close()
    job, watchdog = (int(word) for word in line.split())
    died = time.monotonic()
    try:
        assert running(job) and running(watchdog)
        wait_for(lambda: not running(job), timeout=5)
        wait_for(lambda: not running(watchdog), timeout=5)  # none of its agent's jobs left: it exits
        assert time.monotonic() - died < 4.0
    finally:
        for pid in (job, watchdog):
            if running(pid):
                os.kill(pid, signal.SIGKILL)
    run_dir = tmp_path / "work" / "run"
    assert not list(run_dir.glob("*.json")) and not (run_dir / "agent.lease").exists()
