"""The heartbeat loop against a real HTTP peer playing the portal: one ``Agent.step()`` is one heartbeat."""

from __future__ import annotations

import os
import signal

import pytest

from agent.client import TaskKey


def test_registers_with_its_gpus_then_heartbeats(portal, make_agent) -> None:
    agent = make_agent(portal.url)
    assert agent.step() == portal.heartbeat_interval
    (registration,) = portal.registrations
    assert registration["hostname"] == "node-a" and registration["address"] == "127.0.0.1"
    assert registration["agent_version"]
    assert [gpu["uuid"] for gpu in registration["gpus"]] == ["GPU-test-0", "GPU-test-1"]
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
def test_register_again_stops_the_requeued_tasks_and_registers(status, portal, make_agent, step_until) -> None:
    portal.register_again_status = status
    agent = make_agent(portal.url)
    portal.add_task(12, "echo ready; sleep 30")
    step_until(agent, lambda: "ready" in portal.log(12))
    pid = portal.last(12)["pid"]
    portal.register_again = True
    step_until(agent, lambda: len(portal.registrations) == 2)
    assert not agent.runner.tasks
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        pass
    else:
        raise AssertionError("a task the portal requeued was left running")
    # The requeued attempt must never run again here, even if a stale start order for it arrives.
    portal.sticky_start = True
    agent.step()
    assert not agent.runner.tasks


def test_a_rejected_token_is_retried_not_fatal(portal, make_agent) -> None:
    agent = make_agent(portal.url, token="wrong")
    for _ in range(3):
        assert agent.step() > 0
    assert agent.registration is None and not portal.registrations
