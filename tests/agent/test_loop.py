"""The heartbeat loop against a real HTTP peer playing the portal: one ``Agent.step()`` is one heartbeat."""

from __future__ import annotations

import logging
import os
import pwd
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from pathlib import Path

import pytest

from agent.client import PortalClient, StartOrder, TaskKey
from agent.loop import Agent, Backoff
from agent.pid_records import PidRecords
from agent.runner import Runner
from agent.watchdog import LeaseFile


def test_registers_with_its_gpus_then_heartbeats(portal, make_agent) -> None:
    agent = make_agent(portal.url)
    assert agent.step() == portal.heartbeat_interval
    (registration,) = portal.registrations
    assert registration["hostname"] == "node-a" and registration["address"] == "127.0.0.1"
    assert registration["agent_version"]
    assert [gpu["uuid"] for gpu in registration["gpus"]] == ["GPU-test-0", "GPU-test-1"]
    assert registration["clean"] is True  # nothing ran here before
    assert portal.heartbeats == [{"tasks": []}]


def test_starts_a_task_and_reports_it_running_then_exited_with_its_log(portal, make_agent, step_until) -> None:
    agent = make_agent(portal.url)
    portal.add_task(42, "echo started; sleep 0.3; echo bad >&2; exit 3", gpus=[1])
    step_until(agent, lambda: (portal.last(42) or {}).get("state") == "exited")
    report = portal.last(42)
    assert report["exit_code"] == 3
    assert "running" in portal.states(42)
    running = next(r for r in portal.reports["42:1:0"] if r["state"] == "running")
    assert running["pid"] > 0 and running["exit_code"] is None
    step_until(agent, lambda: portal.log(42) == "started\nbad\n")
    # Once the portal has the exit and the whole log it says forget; the agent then stops reporting the task.
    step_until(agent, lambda: portal.heartbeats[-1] == {"tasks": []})
    assert TaskKey(42, 1, 0) not in agent.runner.tasks


def test_repeated_start_orders_start_the_task_once(portal, make_agent, step_until, tmp_path) -> None:
    portal.sticky_start = True
    marker = tmp_path / "starts"
    agent = make_agent(portal.url)
    portal.add_task(7, f"echo x >> {marker}; sleep 0.2")
    step_until(agent, lambda: portal.states(7).count("running") >= 3 or "exited" in portal.states(7))
    step_until(agent, lambda: "exited" in portal.states(7))
    assert marker.read_text() == "x\n"


def test_kill_sends_sigterm_and_the_task_reports_its_exit(portal, make_agent, step_until) -> None:
    agent = make_agent(portal.url)
    portal.add_task(5, "trap 'echo stopping; exit 143' TERM; echo ready; while :; do sleep 0.02; done")
    step_until(agent, lambda: "ready" in portal.log(5))
    portal.kill(5, grace=5.0)
    step_until(agent, lambda: (portal.last(5) or {}).get("state") == "exited")
    assert portal.last(5)["exit_code"] == 143
    # dash also reports the foreground ``sleep`` killed by the same SIGTERM ("Terminated").
    step_until(agent, lambda: portal.log(5).startswith("ready\n") and portal.log(5).endswith("stopping\n"))


def test_kill_escalates_to_sigkill_after_the_grace_sent_by_the_portal(portal, make_agent, step_until) -> None:
    agent = make_agent(portal.url)
    portal.add_task(6, "trap '' TERM; echo ready; while :; do sleep 0.02; done")
    step_until(agent, lambda: "ready" in portal.log(6))
    portal.kill(6, grace=0.2)
    step_until(agent, lambda: (portal.last(6) or {}).get("state") == "exited")
    assert portal.last(6)["exit_code"] == -signal.SIGKILL


def test_kill_with_no_grace_sends_sigkill_at_once(portal, make_agent, step_until) -> None:
    agent = make_agent(portal.url, grace=5.0)
    portal.add_task(16, "trap 'echo got TERM' TERM; echo ready; while :; do sleep 0.02; done")
    step_until(agent, lambda: "ready" in portal.log(16))
    portal.kill(16, grace=0)
    started = time.monotonic()
    step_until(agent, lambda: (portal.last(16) or {}).get("state") == "exited")
    assert time.monotonic() - started < 1.0
    assert portal.last(16)["exit_code"] == -signal.SIGKILL
    step_until(agent, lambda: portal.log(16) == "ready\n")  # the whole log: no SIGTERM reached the job first


def test_signal_orders_reach_the_job_once_without_stopping_it(portal, make_agent, step_until) -> None:
    agent = make_agent(portal.url)
    portal.add_task(4, "trap 'echo checkpoint' USR1; echo ready; while :; do sleep 0.02; done")
    step_until(agent, lambda: "ready" in portal.log(4))
    portal.signals[(4, 1)] = "SIGUSR1"  # repeated in every reply from now on
    step_until(agent, lambda: "checkpoint" in portal.log(4))
    for _ in range(5):
        agent.step()
    assert portal.log(4).count("checkpoint") == 1
    assert portal.last(4)["state"] == "running"


def test_forget_is_honoured_and_a_failed_start_is_reported_with_its_error(portal, make_agent, step_until) -> None:
    agent = make_agent(portal.url, run_as="corral-no-such-user")
    portal.add_task(3, "echo never")
    step_until(agent, lambda: (portal.last(3) or {}).get("state") == "failed_to_start")
    assert "no such user" in portal.log(3)
    step_until(agent, lambda: (3, 1) in portal.forgotten and not agent.runner.tasks)
    agent.step()
    assert portal.heartbeats[-1] == {"tasks": []}


def test_log_is_resent_from_the_offset_the_portal_holds(portal, make_agent, step_until) -> None:
    portal.auto_forget = False
    agent = make_agent(portal.url)
    portal.lose_next_chunk.add("8:1:0")
    portal.add_task(8, "echo line one; echo line two")
    step_until(agent, lambda: portal.log(8) == "line one\nline two\n")
    sent_from_zero = [r for r in portal.reports["8:1:0"] if r["log_offset"] == 0 and r["log"]]
    assert len(sent_from_zero) == 2  # the lost chunk and its resend


def test_long_log_arrives_whole_in_bounded_chunks(portal, make_agent, step_until) -> None:
    portal.auto_forget = False
    agent = make_agent(portal.url)
    # 150,000 two-byte characters: three chunk boundaries, each in danger of splitting a character.
    portal.add_task(9, ["python3", "-c", "import sys; sys.stdout.write('é' * 150000)"])
    step_until(agent, lambda: len(portal.log(9)) == 150000, timeout=10)
    assert portal.log(9) == "é" * 150000
    assert max(len(r["log"].encode()) for r in portal.reports["9:1:0"]) <= 64 * 1024


def test_log_bytes_per_heartbeat_are_capped_and_shared_between_tasks(portal, make_agent, step_until) -> None:
    portal.auto_forget = False
    agent = make_agent(portal.url)
    for job in range(20, 26):
        portal.add_task(job, ["python3", "-c", "import sys; sys.stdout.write('x' * 100000)"])
    step_until(agent, lambda: all(portal.log(job) == "x" * 100000 for job in range(20, 26)), timeout=10)
    for beat in portal.heartbeats:
        assert sum(len(task["log"].encode()) for task in beat["tasks"]) <= 256 * 1024
        assert all(task["log_end"] == task["log_offset"] + len(task["log"].encode()) for task in beat["tasks"])


def test_survives_the_portal_going_away_and_catches_up(portal, make_agent, step_until) -> None:
    agent = make_agent(portal.url)
    portal.auto_forget = False
    portal.add_task(11, "echo before; sleep 0.4; echo after; exit 4")
    step_until(agent, lambda: "running" in portal.states(11))
    portal.down()
    for _ in range(5):
        assert agent.step() > 0  # warns and backs off, never raises
    portal.serve()
    step_until(agent, lambda: (portal.last(11) or {}).get("state") == "exited")
    step_until(agent, lambda: portal.log(11) == "before\nafter\n")
    assert portal.last(11)["exit_code"] == 4
    assert len(portal.registrations) == 1


def test_starts_before_the_portal_is_up(portal, make_agent, step_until) -> None:
    portal.down()
    agent = make_agent(portal.url)
    for _ in range(3):
        assert agent.step() > 0
    assert agent.registration is None
    portal.serve()
    step_until(agent, lambda: portal.heartbeats)
    assert len(portal.registrations) == 1


@pytest.mark.parametrize("status", [401, 409])
def test_register_again_sigkills_the_requeued_tasks_and_registers_clean(
    status, portal, make_agent, step_until, running
) -> None:
    # Ref: #15. The portal has requeued them: stale duplicates, killed at once (no grace), seen gone, then clean.
    portal.register_again_status = status
    agent = make_agent(portal.url, grace=5.0)
    portal.add_task(12, "trap 'echo got TERM' TERM; echo ready; while :; do sleep 0.02; done")
    step_until(agent, lambda: "ready" in portal.log(12))
    pid = portal.last(12)["pid"]
    portal.register_again = True
    started = time.monotonic()
    step_until(agent, lambda: len(portal.registrations) == 2)
    assert time.monotonic() - started < 2.0  # far less than the 5 s grace
    assert not agent.runner.tasks
    assert not running(pid), "a task the portal requeued was left running"
    assert portal.registrations[1]["clean"] is True
    assert "got TERM" not in (agent.runner.jobs_dir / "12-1-0" / "output.log").read_text()
    # The requeued attempt must never run again here, even if a stale start order for it arrives.
    portal.sticky_start = True
    agent.step()
    assert not agent.runner.tasks


def test_jobs_a_crashed_agent_left_are_sigkilled_before_registering_clean(portal, make_agent, tmp_path) -> None:
    # Ref: #15. The first agent's runner plays a predecessor that died without stopping its job.
    crashed = Runner(tmp_path / "work0")  # the workdir make_agent gives its first agent
    command = "trap 'echo got TERM' TERM; while :; do sleep 0.02; done"
    task = crashed.start(StartOrder(TaskKey(3, 1, 0), command, (0,), {}))
    agent = make_agent(portal.url, grace=5.0)
    agent.step()
    assert portal.registrations[0]["clean"] is True
    assert task.process is not None and task.process.wait(timeout=1) == -signal.SIGKILL
    assert "got TERM" not in task.log_path.read_text()
    assert not list(agent.runner.run_dir.glob("*.json"))


def test_lease_expiry_sigkills_every_task_and_registers_again(portal, make_agent, step_until, fake_clock) -> None:
    # Ref: #15. No heartbeat through for the lease, counted from when the last good one was sent: fence.
    portal.lease_seconds = 5.0
    agent = make_agent(portal.url, grace=5.0, clock=fake_clock)
    portal.add_task(30, "trap 'echo got TERM' TERM; echo ready; while :; do sleep 0.02; done")
    step_until(agent, lambda: "ready" in portal.log(30))
    task = agent.runner.tasks[TaskKey(30, 1, 0)]
    portal.down()
    fake_clock.advance(4.9)
    for _ in range(3):
        agent.step()  # heartbeats fail, the lease has not run out yet
    assert task.alive and agent.registration is not None
    fake_clock.advance(0.1)
    agent.step()
    assert task.process is not None and task.process.wait(timeout=1) == -signal.SIGKILL
    assert not agent.runner.tasks and TaskKey(30, 1, 0) in agent.finished
    assert "got TERM" not in task.log_path.read_text()
    assert "exited" not in portal.states(30)  # a killed duplicate is never reported as a failed job
    portal.serve()
    portal.sticky_start = True  # a stale start order for the fenced attempt must not run it again
    step_until(agent, lambda: len(portal.registrations) == 2 and portal.heartbeats[-1] == {"tasks": []})
    assert portal.registrations[1]["clean"] is True
    assert not agent.runner.tasks


def test_a_heartbeat_answered_after_the_lease_ran_out_does_not_renew_it(portal, make_agent, step_until, fake_clock):
    portal.lease_seconds = 5.0
    agent = make_agent(portal.url, clock=fake_clock)
    portal.add_task(31, "echo ready; sleep 30")
    step_until(agent, lambda: "ready" in portal.log(31))
    task = agent.runner.tasks[TaskKey(31, 1, 0)]
    portal.before_heartbeat_reply = lambda: fake_clock.advance(6.0)  # the answer takes longer than the lease
    agent.step()
    assert task.process is not None and task.process.wait(timeout=1) == -signal.SIGKILL
    assert agent.registration is None and not agent.runner.tasks


def test_good_heartbeats_renew_the_lease_file_the_watchdog_reads(portal, make_agent, fake_clock, tmp_path) -> None:
    lease_file = LeaseFile(tmp_path / "agent.lease")
    agent = make_agent(portal.url, clock=fake_clock, lease_file=lease_file)
    agent.step()
    assert lease_file.read() is None  # no lease granted, none written
    portal.lease_seconds = 5.0
    portal.register_again = True
    agent.step()  # told to register again: the next registration carries the lease
    agent.step()
    lease = lease_file.read()
    assert lease is not None and lease.seconds == 5.0
    assert lease.deadline == pytest.approx(time.monotonic() + 5.0, abs=0.5)  # on CLOCK_MONOTONIC, not the agent's
    fake_clock.advance(2.0)
    agent.step()
    renewed = lease_file.read()  # 5 s from the good heartbeat just sent
    assert renewed is not None and renewed.deadline == pytest.approx(time.monotonic() + 5.0, abs=0.5)
    portal.down()
    fake_clock.advance(2.0)
    agent.step()  # a failed heartbeat renews nothing
    assert lease_file.read() == renewed


def test_without_a_lease_an_outage_stops_nothing(portal, make_agent, step_until, fake_clock) -> None:
    agent = make_agent(portal.url, clock=fake_clock)  # an older portal grants no lease
    portal.add_task(32, "echo ready; sleep 30")
    step_until(agent, lambda: "ready" in portal.log(32))
    portal.down()
    fake_clock.advance(3600)
    agent.step()
    assert agent.runner.tasks[TaskKey(32, 1, 0)].alive


def test_the_lease_is_enforced_between_heartbeats_during_a_long_backoff(portal, make_agent, wait_for, running):
    portal.lease_seconds = 0.5
    agent = make_agent(portal.url)
    agent.backoff = Backoff(60.0, 60.0)  # after the first failed heartbeat the next is a minute away
    portal.add_task(33, "echo ready; sleep 30")
    stop = threading.Event()
    loop = threading.Thread(target=agent.run, args=(stop,), kwargs={"tick": 0.05})
    loop.start()
    try:
        wait_for(lambda: "ready" in portal.log(33))
        pid = portal.last(33)["pid"]
        portal.down()
        went_down = time.monotonic()
        wait_for(lambda: not running(pid), timeout=3)
        assert time.monotonic() - went_down < 1.5  # the lease (0.5 s) plus a tick, not the minute of backoff
    finally:
        stop.set()
        loop.join(timeout=5)


def test_a_rejected_token_is_retried_not_fatal(portal, make_agent) -> None:
    agent = make_agent(portal.url, token="wrong")
    for _ in range(3):
        assert agent.step() > 0
    assert agent.registration is None and not portal.registrations


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root, to run an agent as an account that cannot kill the job")
def test_a_group_that_outlives_sigkill_makes_the_registration_unclean(portal) -> None:
    """Ref: #15. A job process the agent cannot make go away (one stuck in state D; here, a root process that an
    agent running as ``nobody`` may not signal stands in for it) must not be vouched for: the agent waits its
    bounded time, logs an ERROR naming the group, and registers ``clean: false``."""
    nobody = pwd.getpwnam("nobody")
    workdir = Path(tempfile.mkdtemp(prefix="corral-unclean-"))
    workdir.chmod(0o755)
    stuck = subprocess.Popen(["sleep", "30"], start_new_session=True)
    try:
        PidRecords(workdir / "run").write(TaskKey(5, 1, 0), stuck.pid)
        (workdir / "run").chmod(0o755)
        read_end, write_end = os.pipe()
        child = os.fork()
        if child == 0:  # the agent, as nobody: a forked copy of this process, so it needs no access to the venv
            status = 1
            try:
                os.close(read_end)
                os.setgroups([])
                os.setgid(nobody.pw_gid)
                os.setuid(nobody.pw_uid)
                handler = logging.StreamHandler(os.fdopen(write_end, "w"))
                logging.getLogger("agent").addHandler(handler)
                client = PortalClient(portal.url, lambda: portal.token, timeout=2.0)
                agent = Agent(client, Runner(workdir), hostname="node-a", address="127.0.0.1", gpus=[], kill_wait=0.3)
                status = 0 if agent.register() else 2
                handler.flush()
            finally:
                os._exit(status)
        os.close(write_end)
        with os.fdopen(read_end) as pipe:
            output = pipe.read()
        assert os.waitpid(child, 0)[1] == 0, output
        assert stuck.poll() is None
        (registration,) = portal.registrations
        assert registration["clean"] is False
        assert f"process group(s) {stuck.pid} survived SIGKILL" in output
    finally:
        stuck.kill()
        stuck.wait()
        shutil.rmtree(workdir)
