"""The runner against real processes: exit codes, logs, environment, process groups, grace then SIGKILL."""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import pytest

from agent.client import StartOrder, TaskKey, TaskState
from agent.pid_records import AgentId
from agent.runner import Runner, Task

ROOT = os.geteuid() == 0


def order(job: int, command: str | tuple[str, ...], *, gpus=(0,), env=None, attempt: int = 1, rank: int = 0):
    return StartOrder(TaskKey(job, attempt, rank), command, tuple(gpus), env if env is not None else {})


def wait_exit(runner: Runner, task: Task, timeout: float = 5.0) -> int:
    deadline = time.monotonic() + timeout
    while task.alive:
        assert time.monotonic() < deadline, "task did not exit in time"
        runner.poll()
        time.sleep(0.01)
    assert task.exit_code is not None
    return task.exit_code


def wait_log(task: Task, text: str, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while text not in (task.log_path.read_text() if task.log_path.exists() else ""):
        assert time.monotonic() < deadline, f"{text!r} never appeared in the log"
        time.sleep(0.01)


def gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    # A zombie still answers kill(0); it is gone for our purposes once it is no longer running.
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"


@pytest.fixture
def runner(tmp_path: Path) -> Runner:
    return Runner(tmp_path / "work")


def test_exit_code_and_log_with_stderr(runner: Runner) -> None:
    task = runner.start(order(1, "echo hi; echo oops >&2; exit 3"))
    assert task.state is TaskState.RUNNING and task.pid
    assert wait_exit(runner, task) == 3
    assert task.state is TaskState.EXITED
    assert task.log_path == runner.jobs_dir / "1-1-0" / "output.log"
    assert task.log_path.read_text() == "hi\noops\n"
    chunk = runner.read_log(task, 0)
    assert (chunk.offset, chunk.text, chunk.size) == (0, "hi\noops\n", 8)
    assert runner.read_log(task, 3).text == "oops\n"


def test_cwd_is_task_dir_and_env_is_minimal_plus_portal(runner: Runner, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CORRAL_NODE_TOKEN", "must-not-leak")
    env = {"CUDA_VISIBLE_DEVICES": "2,3", "CORRAL_JOB_ID": "9", "WORLD_SIZE": "4", "RANK": "1"}
    task = runner.start(order(9, "pwd; env | sort", gpus=(2, 3), env=env, rank=1))
    assert wait_exit(runner, task) == 0
    lines = task.log_path.read_text().splitlines()
    assert lines[0] == str(runner.jobs_dir / "9-1-1")
    seen = dict(line.split("=", 1) for line in lines[1:] if "=" in line)
    assert seen["CUDA_VISIBLE_DEVICES"] == "2,3"
    assert seen["CORRAL_JOB_ID"] == "9"
    assert seen["WORLD_SIZE"] == "4" and seen["RANK"] == "1"
    assert seen["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID"
    assert {"PATH", "HOME", "LANG"} <= seen.keys()
    assert "CORRAL_NODE_TOKEN" not in seen


def test_visible_devices_default_from_gpus_and_empty_for_cpu_tasks(runner: Runner) -> None:
    gpu_task = runner.start(order(1, "echo [$CUDA_VISIBLE_DEVICES] $CORRAL_JOB_ID", gpus=(1, 3)))
    cpu_task = runner.start(order(2, "echo [$CUDA_VISIBLE_DEVICES]", gpus=()))
    wait_exit(runner, gpu_task)
    wait_exit(runner, cpu_task)
    assert gpu_task.log_path.read_text() == "[1,3] 1\n"
    assert cpu_task.log_path.read_text() == "[]\n"


def test_argv_command_runs_without_a_shell(runner: Runner) -> None:
    task = runner.start(order(1, ("/bin/echo", "a;b", "$HOME")))
    wait_exit(runner, task)
    assert task.log_path.read_text() == "a;b $HOME\n"


def test_start_is_idempotent_per_key(runner: Runner) -> None:
    first = runner.start(order(1, "sleep 5"))
    again = runner.start(order(1, "echo second"))
    assert again is first and len(runner.tasks) == 1
    runner.kill(first.key, 0.5)
    wait_exit(runner, first)


def test_sigterm_trapped_exits_with_its_own_code(runner: Runner) -> None:
    task = runner.start(order(1, "trap 'echo got TERM; exit 7' TERM; echo ready; while :; do sleep 0.02; done"))
    wait_log(task, "ready")
    runner.kill(task.key, grace=5.0)
    assert wait_exit(runner, task) == 7
    assert "got TERM" in task.log_path.read_text()


def test_sigterm_ignored_is_sigkilled_after_grace(runner: Runner) -> None:
    task = runner.start(order(1, "trap '' TERM; echo ready; while :; do sleep 0.02; done"))
    wait_log(task, "ready")
    started = time.monotonic()
    runner.kill(task.key, grace=0.3)
    assert wait_exit(runner, task) == -signal.SIGKILL
    assert time.monotonic() - started >= 0.3


def test_kill_reaches_children_in_the_group(runner: Runner) -> None:
    task = runner.start(order(1, "sleep 30 & echo $! > child.pid; echo ready; wait"))
    wait_log(task, "ready")
    child = int((task.directory / "child.pid").read_text())
    runner.kill(task.key, grace=2.0)
    assert wait_exit(runner, task) == -signal.SIGTERM
    deadline = time.monotonic() + 2
    while not gone(child):
        assert time.monotonic() < deadline, "the child survived its group's termination"
        time.sleep(0.01)


def test_leftover_children_die_when_the_leader_exits(runner: Runner) -> None:
    task = runner.start(order(1, "sleep 30 & echo $! > child.pid; exit 0"))
    assert wait_exit(runner, task) == 0
    child = int((task.directory / "child.pid").read_text())
    deadline = time.monotonic() + 2
    while not gone(child):
        assert time.monotonic() < deadline, "a background child outlived its task and would hold the GPUs"
        time.sleep(0.01)


def test_failed_to_start_when_the_directory_cannot_be_made(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    runner = Runner(blocker)
    task = runner.start(order(1, "echo never"))
    assert task.state is TaskState.FAILED_TO_START and task.pid is None
    chunk = runner.read_log(task, 0)
    assert "cannot start task 1:1:0" in chunk.text and chunk.size == len(chunk.text.encode())
    assert runner.poll() == []  # a failed task is never polled as running


def test_failed_to_start_for_an_unknown_user(tmp_path: Path) -> None:
    runner = Runner(tmp_path / "work", run_as="corral-no-such-user")
    task = runner.start(order(1, "echo never"))
    assert task.state is TaskState.FAILED_TO_START
    assert "no such user 'corral-no-such-user'" in runner.read_log(task, 0).text


def test_failed_to_start_for_a_missing_program(runner: Runner) -> None:
    task = runner.start(order(1, ("/nonexistent/train",)))
    assert task.state is TaskState.FAILED_TO_START
    assert "No such file" in runner.read_log(task, 0).text


@pytest.mark.skipif(not ROOT, reason="switching users needs root")
def test_root_agent_runs_jobs_as_the_run_as_user_without_root_groups(tmp_path: Path) -> None:
    runner = Runner(tmp_path / "work", run_as="nobody")
    task = runner.start(order(1, "id -u; id -G; echo $HOME; touch mine && echo wrote"))
    assert wait_exit(runner, task) == 0
    uid, groups, home, wrote = task.log_path.read_text().splitlines()
    import pwd

    nobody = pwd.getpwnam("nobody")
    assert int(uid) == nobody.pw_uid
    assert "0" not in groups.split()
    assert home == nobody.pw_dir
    assert wrote == "wrote"  # the task directory belongs to the job's user


def test_log_reads_are_bounded_and_split_on_character_boundaries(runner: Runner) -> None:
    # "é" is two bytes; a limit of 5 must not cut the third one in half.
    task = runner.start(order(1, "printf 'aééé'; printf '\\377\\000z'"))
    wait_exit(runner, task)
    data = task.log_path.read_bytes()
    assert len(data) == 10
    first = runner.read_log(task, 0, limit=4)
    assert first.text == "aé" and len(first.text.encode()) == 3
    rest = runner.read_log(task, 3, limit=64)
    assert rest.text == "éé??z"  # invalid byte and NUL become one "?" each: offsets stay byte-exact
    assert 3 + len(rest.text.encode()) == rest.size == 10


def test_a_job_cannot_make_the_agent_read_another_file_as_its_log(runner: Runner, tmp_path: Path) -> None:
    secret = tmp_path / "secret"
    secret.write_text("SECRET\n")
    task = runner.start(order(1, f"echo real; rm output.log; ln -s {secret} output.log"))
    wait_exit(runner, task)
    assert task.log_path.is_symlink()
    assert runner.read_log(task, 0).text == "real\n"


def test_terminate_all_stops_everything_within_grace(runner: Runner) -> None:
    polite = runner.start(order(1, "echo ready; sleep 30"))
    stubborn = runner.start(order(2, "trap '' TERM; echo ready; while :; do sleep 0.02; done"))
    wait_log(polite, "ready")
    wait_log(stubborn, "ready")
    started = time.monotonic()
    runner.terminate_all(grace=0.3)
    assert time.monotonic() - started < 2.0
    assert polite.exit_code == -signal.SIGTERM
    assert stubborn.exit_code == -signal.SIGKILL


def test_forget_drops_finished_tasks_and_stops_running_ones(runner: Runner) -> None:
    done = runner.start(order(1, "true"))
    wait_exit(runner, done)
    runner.forget(done.key, grace=1.0)
    assert done.key not in runner.tasks
    running = runner.start(order(2, "sleep 30"))
    runner.forget(running.key, grace=1.0)
    assert running.key in runner.tasks  # still reported until it has exited
    wait_exit(runner, running)
    assert running.key not in runner.tasks


def test_kill_with_no_grace_sends_sigkill_at_once(runner: Runner) -> None:
    task = runner.start(order(1, "trap 'echo got TERM' TERM; echo ready; while :; do sleep 0.02; done"))
    wait_log(task, "ready")
    started = time.monotonic()
    runner.kill(task.key, grace=0)
    assert wait_exit(runner, task) == -signal.SIGKILL
    assert time.monotonic() - started < 1.0
    assert "got TERM" not in task.log_path.read_text()  # no SIGTERM went first


def test_pid_records_name_the_agent_that_wrote_them(runner: Runner) -> None:
    task = runner.start(order(1, "sleep 30"))
    (record,) = runner.pid_records.read()
    data = json.loads((runner.run_dir / "1-1-0.json").read_text())
    assert data["pid"] == task.pid and data["agent_pid"] == os.getpid()
    assert record.agent == AgentId.current() and record.group_alive()
    runner.kill(task.key, 0)
    wait_exit(runner, task)
    runner.poll()
    assert not runner.pid_records.read()  # the record goes once the whole group is gone


def test_a_restarted_agent_sigkills_the_jobs_its_predecessor_left(tmp_path: Path) -> None:
    # Ref: #15. They were requeued by the portal: stale duplicates, killed at once and seen gone before registering.
    crashed = Runner(tmp_path / "work")
    task = crashed.start(order(1, "trap 'echo got TERM' TERM; echo ready; while :; do sleep 0.02; done"))
    wait_log(task, "ready")
    assert len(list((tmp_path / "work" / "run").glob("*.json"))) == 1
    # A record whose start time does not match (a recycled pid) must not be signalled.
    (tmp_path / "work" / "run" / "9-1-0.json").write_text(json.dumps({"pid": os.getpid(), "start_ticks": 1}))

    successor = Runner(tmp_path / "work")
    started = time.monotonic()
    sweep = successor.kill_orphans(wait=5.0)
    assert time.monotonic() - started < 2.0
    assert sweep.killed == (task.pid,) and sweep.survivors == () and sweep.clean
    assert task.process is not None
    assert task.process.wait(timeout=2) == -signal.SIGKILL
    assert "got TERM" not in task.log_path.read_text()
    assert not list((tmp_path / "work" / "run").glob("*.json"))


def test_the_children_a_dead_leader_left_are_found_through_its_group(tmp_path: Path) -> None:
    crashed = Runner(tmp_path / "work")
    task = crashed.start(order(1, "sleep 30 & echo $! > child.pid; echo ready; exit 0"))
    wait_log(task, "ready")
    assert task.process is not None
    assert task.process.wait(timeout=2) == 0  # the leader is gone and reaped; its child runs on in its group
    child = int((task.directory / "child.pid").read_text())
    assert not gone(child)

    sweep = Runner(tmp_path / "work").kill_orphans(wait=5.0)
    assert sweep.killed == (task.pid,) and sweep.clean
    assert gone(child)


def test_a_running_task_of_this_runner_is_not_an_orphan(runner: Runner) -> None:
    task = runner.start(order(1, "sleep 30"))
    sweep = runner.kill_orphans(wait=0.5)
    assert sweep.killed == () and sweep.clean
    assert task.alive and not gone(task.pid or 0)
    runner.kill(task.key, 0)
    wait_exit(runner, task)


def test_prune_deletes_old_untracked_directories_only(runner: Runner) -> None:
    tracked = runner.start(order(1, "true"))
    wait_exit(runner, tracked)
    old = runner.jobs_dir / "7-1-0"
    old.mkdir(parents=True)
    (old / "output.log").write_text("old")
    fresh = runner.jobs_dir / "8-1-0"
    fresh.mkdir()
    week_ago = time.time() - 8 * 86400
    for path in (old / "output.log", old, tracked.log_path, tracked.directory):
        os.utime(path, (week_ago, week_ago))
    assert runner.prune(7 * 86400) == 1
    assert not old.exists() and fresh.exists() and tracked.directory.exists()
