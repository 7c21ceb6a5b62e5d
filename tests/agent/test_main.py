"""``corral-agent`` as a real process: input checking, start-up without a portal, jobs, telemetry, SIGTERM."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from agent.main import main


def agent_command(*args: str) -> list[str]:
    return [sys.executable, "-m", "agent.main", *args]


def clean_env(**extra: str) -> dict[str, str]:
    env = {key: value for key, value in os.environ.items() if not key.startswith("CORRAL_")}
    env.update(extra)
    return env


def running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ((), "must be an http:// or https:// URL"),
        (("--server", "http://127.0.0.1:1"), "a node token is required"),
        (("--server", "http://127.0.0.1:1", "--token-file", "/nonexistent/token"), "cannot read the token file"),
        (("--server", "http://127.0.0.1:1", "--token", "t", "--fake-gpus", "0"), "--fake-gpus must be at least 1"),
        (("--server", "http://127.0.0.1:1", "--token", "t", "--grace", "soon"), "invalid float value"),
        (("--server", "http://127.0.0.1:1", "--token", "t", "--token-file", "x"), "not allowed with"),
    ],
)
def test_bad_input_is_one_line_on_stderr(args, message, tmp_path, monkeypatch, capsys) -> None:
    monkeypatch.chdir(tmp_path)
    for name in ("CORRAL_SERVER", "CORRAL_NODE_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    with pytest.raises(SystemExit) as exit_info:
        main(list(args))
    assert exit_info.value.code == 2
    stderr = capsys.readouterr().err
    assert stderr.count("\n") == 1 and message in stderr
    assert stderr.startswith("corral-agent: error: ")


@pytest.mark.skipif(os.geteuid() != 0, reason="--run-as is only checked when the agent runs as root")
def test_unknown_run_as_user_is_bad_input(tmp_path, monkeypatch, capsys) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as exit_info:
        main(["--server", "http://127.0.0.1:1", "--token", "t", "--run-as", "corral-no-such-user"])
    assert exit_info.value.code == 2 and "no such user" in capsys.readouterr().err
    assert not (tmp_path / "var").exists()  # nothing is created before the input is known to be good


def test_agent_process_end_to_end(portal, tmp_path: Path, wait_for) -> None:
    """Starts before the portal, registers once it answers, runs a job with its GPUs, ships telemetry, and on
    SIGTERM stops its job and exits 0."""
    portal.down()  # nothing listens on the port yet
    token_file = tmp_path / "node.token"
    token_file.write_text(portal.token + "\n")
    token_file.chmod(0o600)
    log_file = (tmp_path / "agent.log").open("w")
    agent = subprocess.Popen(
        agent_command(
            "--token-file", str(token_file), "--name", "sim-1", "--fake-gpus", "2", "--grace", "1",
            "--sample-interval", "0.1", "--workdir", str(tmp_path / "work"), "--allow-root",
        ),
        env=clean_env(CORRAL_SERVER=portal.url),
        cwd=tmp_path,
        stderr=log_file,
    )  # fmt: skip
    agent_log = tmp_path / "agent.log"
    try:
        portal.add_task(21, "echo gpus=$CUDA_VISIBLE_DEVICES job=$CORRAL_JOB_ID; sleep 60", gpus=[1])
        wait_for(lambda: "cannot register with the portal" in agent_log.read_text(), timeout=10)
        assert agent.poll() is None  # no portal yet: the agent warns and retries
        portal.serve()
        wait_for(lambda: "gpus=1 job=21" in portal.log(21), timeout=10)
        (registration,) = portal.registrations
        assert registration["hostname"] == "sim-1" and len(registration["gpus"]) == 2
        pid = portal.last(21)["pid"]
        assert running(pid)
        assert Path(tmp_path / "work" / "jobs" / "21-1-0" / "output.log").exists()

        def busy_sample() -> bool:
            with portal.lock:
                samples = [s for post in portal.sample_posts for s in post["samples"] if s["index"] == 1]
            return any(p[0] == pid for s in samples for p in s["processes"])

        wait_for(busy_sample, timeout=5)
        agent.send_signal(signal.SIGTERM)
        agent.wait(timeout=10)
    finally:
        if agent.poll() is None:
            agent.kill()
            agent.wait()
        log_file.close()
    assert agent.returncode == 0
    assert "Traceback" not in agent_log.read_text()
    assert not running(pid)


def watchdog_of(agent_pid: int) -> int | None:
    """The pid of the agent's watchdog (its child running ``agent.watchdog``), if it runs."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            command = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if int(stat.rsplit(")", 1)[1].split()[1]) == agent_pid and b"agent.watchdog" in command:
            return int(entry.name)
    return None


def test_a_stopped_agents_jobs_die_at_lease_expiry_and_it_registers_clean_after(
    portal, tmp_path: Path, wait_for
) -> None:
    """SIGSTOP the agent: it cannot kill anything, so its watchdog SIGKILLs the job once the lease (0.5 s) has run
    out. Resumed, the agent sees its lease expired, never reports the killed job, and registers clean. On SIGTERM
    it stops its watchdog and exits 0. Ref: #15"""
    portal.lease_seconds = 0.5
    log_file = (tmp_path / "agent.log").open("w")
    agent = subprocess.Popen(
        agent_command(
            "--server", portal.url, "--token", portal.token, "--name", "sim-2", "--fake-gpus", "1",
            "--workdir", str(tmp_path / "work"), "--allow-root", "--grace", "5",
        ),
        env=clean_env(),
        cwd=tmp_path,
        stderr=log_file,
    )  # fmt: skip
    watchdog = None
    try:
        portal.add_task(22, "trap '' TERM; echo ready > ready; sleep 60", gpus=[0])
        wait_for(lambda: "running" in portal.states(22), timeout=10)
        wait_for((tmp_path / "work" / "jobs" / "22-1-0" / "ready").exists, timeout=5)
        job = portal.last(22)["pid"]
        watchdog = watchdog_of(agent.pid)
        assert watchdog is not None and running(watchdog)
        agent.send_signal(signal.SIGSTOP)
        stopped = time.monotonic()
        wait_for(lambda: not running(job), timeout=5)
        assert time.monotonic() - stopped < 2.0
        agent.send_signal(signal.SIGCONT)
        wait_for(lambda: len(portal.registrations) == 2, timeout=10)
        assert portal.registrations[1]["clean"] is True
        assert "exited" not in portal.states(22)  # the killed duplicate was never reported as a failed job
        agent.send_signal(signal.SIGTERM)
        agent.wait(timeout=10)
    finally:
        if agent.poll() is None:
            agent.send_signal(signal.SIGCONT)
            agent.kill()
            agent.wait()
        log_file.close()
        if watchdog is not None and running(watchdog):
            os.kill(watchdog, signal.SIGKILL)
    assert agent.returncode == 0
    text = (tmp_path / "agent.log").read_text()
    assert "Traceback" not in text and "lease of agent" in text
    assert watchdog is not None and not running(watchdog)  # stopped with its agent
    assert not list((tmp_path / "work" / "run").iterdir())  # no record, no lease file left behind
