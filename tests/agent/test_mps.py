"""Shared GPUs under MPS (issue #17): the share's environment, one daemon per GPU, whole-GPU orders unchanged, bad
shares refused, and the real MPS implementation's command lines against a stand-in ``nvidia-cuda-mps-control``.

The simulated MPS is the hardware fake (as the simulated probe is for NVML); the job processes are real. The real
implementation runs a shell script in place of the NVIDIA binary: it records its arguments, environment and stdin,
and keeps a ``sleep`` as the daemon process.
"""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import stat
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from types import ModuleType

import pytest

from agent.client import StartOrder, TaskKey, TaskReport, TaskState, parse_heartbeat_reply
from agent.main import main
from agent.mps import SIMULATED_MARKER, DaemonRecords, RealMps, stop_recorded
from agent.mps_sim import SimulatedMps
from agent.pid_records import AgentId
from agent.runner import Runner, Task
from agent.share import Share, WorkloadClass, parse_share
from agent.share_guard import ShareGuard
from agent.watchdog import LeaseFile, Watchdog

GIB = 2**30


def order(job: int, command: str, *, gpu: int = 0, share: Share | None = None, env=None) -> StartOrder:
    return StartOrder(TaskKey(job, 1, 0), command, (gpu,), env if env is not None else {}, share=share)


def wait_exit(runner: Runner, task: Task, timeout: float = 5.0) -> int:
    deadline = time.monotonic() + timeout
    while task.alive:
        assert time.monotonic() < deadline, "task did not exit in time"
        runner.poll()
        time.sleep(0.01)
    assert task.exit_code is not None
    return task.exit_code


def env_of(task: Task) -> dict[str, str]:
    return dict(line.split("=", 1) for line in task.log_path.read_text().splitlines() if "=" in line)


@pytest.fixture
def shared(tmp_path: Path) -> tuple[Runner, SimulatedMps, ShareGuard]:
    runner = Runner(tmp_path / "work")
    mps = SimulatedMps(tmp_path / "work" / "mps", DaemonRecords(runner.run_dir), gpus=4)
    guard = ShareGuard(runner, mps, stop_grace=0.5)
    yield runner, mps, guard
    runner.terminate_all(0.5)
    guard.stop_daemons()


def test_a_share_task_gets_its_gpus_mps_daemon_and_limits_in_its_environment(shared) -> None:
    runner, mps, _guard = shared
    share = Share(25, 2 * GIB, WorkloadClass.ONLINE)
    # The portal names the node's GPU 3; under the GPU's own MPS server the job sees it as device 0.
    task = runner.start(order(5, "env; sleep 0.3", gpu=3, share=share, env={"CUDA_VISIBLE_DEVICES": "3"}))
    assert wait_exit(runner, task) == 0
    env = env_of(task)
    daemon = mps.daemons()[3]
    assert env["CUDA_MPS_PIPE_DIRECTORY"] == str(daemon.pipe_dir)
    assert (daemon.pipe_dir / SIMULATED_MARKER).exists()
    assert env["CUDA_VISIBLE_DEVICES"] == "0"
    assert env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] == "25"
    assert env["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] == "0=2048M"
    assert env["CORRAL_WORKLOAD_CLASS"] == "online"
    assert env["CORRAL_LATENCY_FILE"] == str(task.directory / "latency_p99_ms")
    assert env["CORRAL_JOB_ID"] == "5" and env["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID"
    offline = runner.start(order(6, "env", gpu=3, share=Share(50, None)))
    assert wait_exit(runner, offline) == 0
    env = env_of(offline)
    assert env["CORRAL_WORKLOAD_CLASS"] == "offline" and "CORRAL_LATENCY_FILE" not in env
    assert "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT" not in env  # no limit asked, none set


def test_the_simulated_server_records_its_clients_while_they_run(shared) -> None:
    runner, mps, _guard = shared
    share = Share(40, GIB)
    task = runner.start(order(1, "sleep 5", gpu=2, share=share))
    assert mps.clients[2] == {task.pid: share}
    runner.kill(task.key, 0.2)
    wait_exit(runner, task)
    assert mps.clients[2] == {}


def test_one_daemon_per_gpu_started_once_and_stopped_when_the_agent_stops(portal, make_agent, step_until) -> None:
    agent = make_agent(portal.url)
    mps = SimulatedMps(agent.runner.workdir / "mps", DaemonRecords(agent.runner.run_dir), gpus=2)
    agent.guard = ShareGuard(agent.runner, mps, stop_grace=0.5)
    for job, gpu in ((1, 0), (2, 0), (3, 1)):
        portal.add_task(job, "sleep 30", gpus=[gpu])
        portal.orders[f"{job}:1:0"]["share"] = {"compute_percent": 30, "memory_limit_bytes": GIB}
    step_until(agent, lambda: all("running" in portal.states(job) for job in (1, 2, 3)))
    assert mps.starts == {0: 1, 1: 1}
    markers = [daemon.pipe_dir / SIMULATED_MARKER for daemon in mps.daemons().values()]
    assert all(marker.exists() for marker in markers)
    assert len(list((agent.runner.run_dir / "mps").glob("gpu*.json"))) == 2
    agent.shutdown()
    assert mps.stops == {0: 1, 1: 1} and mps.daemons() == {}
    assert not any(marker.exists() for marker in markers)
    assert not list((agent.runner.run_dir / "mps").glob("gpu*.json"))


def test_the_agent_fencing_itself_stops_its_daemons(portal, make_agent, step_until) -> None:
    agent = make_agent(portal.url)
    mps = SimulatedMps(agent.runner.workdir / "mps", DaemonRecords(agent.runner.run_dir), gpus=2)
    agent.guard = ShareGuard(agent.runner, mps)
    portal.add_task(1, "sleep 30", gpus=[1])
    portal.orders["1:1:0"]["share"] = {"compute_percent": 30}
    step_until(agent, lambda: "running" in portal.states(1))
    agent.lose_session()
    assert mps.stops == {1: 1} and mps.daemons() == {}


def test_whole_gpu_orders_and_reports_are_unchanged(shared, tmp_path: Path) -> None:
    runner, mps, _guard = shared
    plain = Runner(tmp_path / "plain")
    env = {"CUDA_VISIBLE_DEVICES": "1", "CORRAL_JOB_ID": "8"}
    with_guard = runner.start(order(8, "env | sort", gpu=1, env=env))
    without = plain.start(order(8, "env | sort", gpu=1, env=env))
    wait_exit(runner, with_guard)
    wait_exit(plain, without)
    assert env_of(with_guard) | {"PWD": ""} == env_of(without) | {"PWD": ""}  # the shell's PWD names its directory
    assert mps.daemons() == {} and mps.starts == {}
    parsed = parse_heartbeat_reply({"start": [{"job": 8, "attempt": 1, "command": "true", "gpus": [1], "env": env}]})
    assert parsed.start[0].share is None and parsed.start[0].share_error is None
    report = TaskReport(TaskKey(8, 1, 0), TaskState.RUNNING, 10, None, 0, "", 0)
    assert set(report.to_json()) == {
        "job", "attempt", "rank", "state", "pid", "exit_code", "log_offset", "log", "log_end", "log_size",
    }  # fmt: skip


@pytest.mark.parametrize(
    ("share", "gpus", "message"),
    [
        ({"compute_percent": 0}, [0], "share.compute_percent must be an integer from 1 to 100"),
        ({"compute_percent": 101}, [0], "compute_percent"),
        ({"compute_percent": True}, [0], "compute_percent"),
        ({"compute_percent": "25"}, [0], "compute_percent"),
        ({"compute_percent": 25, "memory_limit_bytes": 1000}, [0], "share.memory_limit_bytes"),
        ({"compute_percent": 25, "memory_limit_bytes": -1}, [0], "share.memory_limit_bytes"),
        ({"compute_percent": 25, "workload_class": "x"}, [0], "share.workload_class must be 'online' or 'offline'"),
        ({"compute_percent": 25, "latency_slo_ms": -3}, [0], "share.latency_slo_ms"),
        ({"compute_percent": 25, "latency_slo_ms": float("nan")}, [0], "share.latency_slo_ms"),
        ({"compute_percent": 25}, [0, 1], "exactly one GPU"),
        ({"compute_percent": 25}, [], "exactly one GPU"),
        ("25%", [0], "share must be an object"),
    ],
)
def test_a_bad_share_refuses_the_task_with_a_reason(share, gpus, message, shared) -> None:
    runner, mps, _guard = shared
    item = {"job": 4, "attempt": 1, "command": "echo ran", "gpus": gpus, "env": {}, "share": share}
    (start,) = parse_heartbeat_reply({"start": [item]}).start
    assert start.share is None and message in (start.share_error or "")
    task = runner.start(start)
    assert task.state is TaskState.FAILED_TO_START and task.process is None
    assert message in runner.read_log(task, 0).text
    assert mps.daemons() == {}


def test_a_good_share_parses_and_unknown_keys_are_ignored() -> None:
    raw = {"compute_percent": 25, "memory_limit_bytes": 16 * GIB, "workload_class": "online", "future": 1}
    assert parse_share(raw, (0,)) == Share(25, 16 * GIB, WorkloadClass.ONLINE)
    assert parse_share({"compute_percent": 100}, (3,)) == Share(100, None, WorkloadClass.OFFLINE)


def test_a_bad_share_reaches_the_portal_as_failed_to_start(portal, make_agent, step_until) -> None:
    agent = make_agent(portal.url)
    portal.add_task(9, "echo never", gpus=[0])
    portal.orders["9:1:0"]["share"] = {"compute_percent": 250}
    step_until(agent, lambda: "failed_to_start" in portal.states(9))
    step_until(agent, lambda: "bad share" in portal.log(9))
    assert "compute_percent" in portal.log(9)


def test_a_share_on_a_node_without_shared_gpus_is_refused(tmp_path: Path) -> None:
    runner = Runner(tmp_path / "work")
    task = runner.start(order(3, "echo never", share=Share(50)))
    assert task.state is TaskState.FAILED_TO_START
    assert "runs no shared GPUs" in runner.read_log(task, 0).text


def test_a_gpu_the_node_lacks_refuses_the_share_not_the_agent(shared) -> None:
    runner, _mps, _guard = shared
    task = runner.start(order(3, "echo never", gpu=7, share=Share(50)))
    assert task.state is TaskState.FAILED_TO_START
    assert "no GPU 7" in runner.read_log(task, 0).text


def test_the_watchdog_stops_its_agents_daemons_when_the_lease_runs_out(tmp_path: Path) -> None:
    runner = Runner(tmp_path / "work")
    mps = SimulatedMps(tmp_path / "work" / "mps", DaemonRecords(runner.run_dir), gpus=2)
    daemon = mps.start(1)
    lease = LeaseFile(runner.run_dir / "agent.lease")
    lease.renew(-5.0, 2.0)  # ran out five seconds ago
    Watchdog(runner.run_dir, lease, AgentId.current()).check()
    assert not (daemon.pipe_dir / SIMULATED_MARKER).exists()
    assert not list((runner.run_dir / "mps").glob("gpu*.json"))


# --- the real implementation against a stand-in for the NVIDIA binary ----------------------------------------------
FAKE_CONTROL = textwrap.dedent(
    """\
    #!/bin/sh
    # Stand-in for nvidia-cuda-mps-control: records each call next to the pipe directory.
    calls="$CUDA_MPS_PIPE_DIRECTORY/../calls"
    echo "argv=$* pipe=$CUDA_MPS_PIPE_DIRECTORY log=$CUDA_MPS_LOG_DIRECTORY visible=$CUDA_VISIBLE_DEVICES" >> "$calls"
    if [ "$1" = "-d" ]; then
        sleep 300 >/dev/null 2>&1 </dev/null &
        echo $! > "$CUDA_MPS_PIPE_DIRECTORY/nvidia-cuda-mps-control.pid"
        echo "[control] daemon started" >> "$CUDA_MPS_LOG_DIRECTORY/control.log"
        exit 0
    fi
    while read -r line; do
        echo "stdin=$line" >> "$calls"
        case "$line" in
            get_server_list) cat "$CUDA_MPS_PIPE_DIRECTORY/servers" 2>/dev/null || true ;;
            get_server_status*) cat "$CUDA_MPS_PIPE_DIRECTORY/status" 2>/dev/null || echo ACTIVE ;;
            quit) kill "$(cat "$CUDA_MPS_PIPE_DIRECTORY/nvidia-cuda-mps-control.pid")" ;;
        esac
    done
    """
)


@pytest.fixture
def fake_control(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """``nvidia-cuda-mps-control`` on PATH: the script above. Its daemons (``sleep``) are killed at teardown."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    script = bin_dir / "nvidia-cuda-mps-control"
    script.write_text(FAKE_CONTROL)
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}")
    yield
    for pid_file in tmp_path.glob("**/nvidia-cuda-mps-control.pid"):
        try:
            os.kill(int(pid_file.read_text()), signal.SIGKILL)
        except (ValueError, ProcessLookupError):
            pass


def calls(state: Path, gpu: int) -> list[str]:
    path = state / f"gpu{gpu}" / "calls"
    return path.read_text().splitlines() if path.exists() else []


def launches(state: Path, gpu: int) -> list[str]:
    """The daemon starts (``-d``) the stand-in saw for that GPU's directory."""
    return [line for line in calls(state, gpu) if line.startswith("argv=-d ")]


def said(state: Path, gpu: int) -> list[str]:
    """The commands sent on that GPU's control pipe, in order."""
    return [line.removeprefix("stdin=") for line in calls(state, gpu) if line.startswith("stdin=")]


def test_real_mps_runs_one_daemon_per_gpu_with_its_own_dirs_and_gpu(fake_control, tmp_path: Path) -> None:
    state = tmp_path / "mps"
    records = DaemonRecords(tmp_path / "run")
    mps = RealMps(state, records, uuids={0: "GPU-aaaa", 1: "GPU-bbbb"})
    first = mps.start(0)
    assert mps.start(0) == first  # running: not started twice
    mps.start(1)
    assert launches(state, 0) == [f"argv=-d pipe={state}/gpu0/pipe log={state}/gpu0/log visible=GPU-aaaa"]
    assert launches(state, 1) == [f"argv=-d pipe={state}/gpu1/pipe log={state}/gpu1/log visible=GPU-bbbb"]
    recorded = {json.loads(path.read_text())["gpu"] for path in (tmp_path / "run" / "mps").glob("gpu*.json")}
    assert recorded == {0, 1}
    assert mps.fault(0) is None
    assert said(state, 0) == ["get_server_list"]

    # A server in FAULT, as get_server_status reports it.
    (first.pipe_dir / "servers").write_text("4242\n")
    (first.pipe_dir / "status").write_text("FAULT\n")
    fault = mps.fault(0)
    assert fault is not None and fault.gpu == 0 and "4242" in fault.detail
    assert said(state, 0)[-2:] == ["get_server_list", "get_server_status 4242"]
    # Every call for GPU 0 went to GPU 0's daemon, with GPU 0 alone visible; none went to GPU 1's.
    environments = {line.split(" ", 1)[1] for line in calls(state, 0) if line.startswith("argv=")}
    assert environments == {f"pipe={state}/gpu0/pipe log={state}/gpu0/log visible=GPU-aaaa"}
    assert said(state, 1) == []

    # A fatal exception in the server log, naming a client: that client is the suspect; GPU 0 is not touched.
    with open(state / "gpu1" / "log" / "server.log", "a") as log:
        log.write("[2026-11-27 07:00:00.000 Server 99] Client 777 encountered a fatal GPU exception\n")
    fault = mps.fault(1)
    assert fault is not None and fault.suspects == frozenset({777}) and "server.log" in fault.detail
    assert mps.fault(1) is None  # that line has been read; the server itself says ACTIVE

    mps.restart(0)
    assert said(state, 0)[-1] == "quit" and len(launches(state, 0)) == 2
    assert calls(state, 0)[-1].startswith("argv=-d ")  # quit first, then a fresh daemon
    pids = [int((state / f"gpu{gpu}" / "pipe" / "nvidia-cuda-mps-control.pid").read_text()) for gpu in (0, 1)]
    mps.stop_all()
    assert said(state, 0)[-1] == "quit" and said(state, 1)[-1] == "quit"
    assert not any(_runs(pid) for pid in pids)
    assert not list((tmp_path / "run" / "mps").glob("gpu*.json"))


def test_real_mps_daemon_that_died_is_a_fault(fake_control, tmp_path: Path) -> None:
    mps = RealMps(tmp_path / "mps", DaemonRecords(tmp_path / "run"))
    daemon = mps.start(2)
    assert launches(tmp_path / "mps", 2)[0].endswith("visible=2")  # no UUID known: the index (PCI bus order)
    os.kill(int((daemon.pipe_dir / "nvidia-cuda-mps-control.pid").read_text()), signal.SIGKILL)
    deadline = time.monotonic() + 5
    while mps.running(daemon):
        assert time.monotonic() < deadline
        time.sleep(0.02)
    fault = mps.fault(2)
    assert fault is not None and "gone" in fault.detail


def test_recorded_real_daemons_are_stopped_by_whoever_finds_the_records(fake_control, tmp_path: Path) -> None:
    records = DaemonRecords(tmp_path / "run")
    mps = RealMps(tmp_path / "mps", records)
    daemon = mps.start(0)
    pid = int((daemon.pipe_dir / "nvidia-cuda-mps-control.pid").read_text())
    # The watchdog, or the next agent, knows only the records.
    assert stop_recorded(DaemonRecords(tmp_path / "run"), agent=records.agent) == 1
    assert said(tmp_path / "mps", 0)[-1] == "quit"
    assert not _runs(pid)
    assert stop_recorded(DaemonRecords(tmp_path / "run")) == 0


def test_a_missing_mps_binary_refuses_the_share_with_the_reason(tmp_path: Path) -> None:
    runner = Runner(tmp_path / "work")
    mps = RealMps(tmp_path / "mps", DaemonRecords(runner.run_dir), control=str(tmp_path / "no-such-binary"))
    ShareGuard(runner, mps)
    task = runner.start(order(1, "echo never", share=Share(50)))
    assert task.state is TaskState.FAILED_TO_START
    assert "cannot run" in runner.read_log(task, 0).text


def _runs(pid: int) -> bool:
    try:
        os.kill(pid, 0)
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (ProcessLookupError, FileNotFoundError):
        return False
    return state not in ("Z", "X")


# --- corral-agent as a real process ---------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("flag", "value", "message"),
    [
        ("--share-memory-limit", "150", "--share-memory-limit must be a percentage from 0 (off) to 100"),
        ("--share-util-limit", "-1", "--share-util-limit must be a percentage"),
        ("--evict-grace", "-2", "--evict-grace must not be negative"),
        ("--share-check-every", "0", "--share-check-every must be positive"),
        ("--share-p99-ms", "fast", "invalid float value"),
    ],
)
def test_bad_share_flags_are_one_line_on_stderr(flag, value, message, tmp_path, monkeypatch, capsys) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as exit_info:
        main(["--server", "http://127.0.0.1:1", "--token", "t", flag, value])
    assert exit_info.value.code == 2
    stderr = capsys.readouterr().err
    assert stderr.count("\n") == 1 and message in stderr and stderr.startswith("corral-agent: error: ")


def test_the_agent_process_runs_a_share_on_simulated_mps_and_stops_its_daemon_on_sigterm(portal, tmp_path, wait_for):
    token_file = tmp_path / "node.token"
    token_file.write_text(portal.token)
    token_file.chmod(0o600)
    portal.add_task(31, "echo pipe=$CUDA_MPS_PIPE_DIRECTORY pct=$CUDA_MPS_ACTIVE_THREAD_PERCENTAGE; sleep 60", gpus=[1])
    portal.orders["31:1:0"]["share"] = {"compute_percent": 30, "memory_limit_bytes": 4 * GIB}
    env = {key: value for key, value in os.environ.items() if not key.startswith("CORRAL_")}
    with (tmp_path / "agent.log").open("w") as log_file:
        agent = subprocess.Popen(
            [
                sys.executable, "-m", "agent.main", "--server", portal.url, "--token-file", str(token_file),
                "--name", "sim-mps", "--fake-gpus", "2", "--grace", "1", "--workdir", str(tmp_path / "work"),
                "--allow-root",
            ],
            env=env,
            cwd=tmp_path,
            stderr=log_file,
        )  # fmt: skip
        try:
            pipe = tmp_path / "work" / "mps" / "gpu1" / "pipe"
            wait_for(lambda: f"pipe={pipe} pct=30" in portal.log(31), timeout=10)
            assert (pipe / SIMULATED_MARKER).exists()
            assert list((tmp_path / "work" / "run" / "mps").glob("gpu*.json"))
            agent.send_signal(signal.SIGTERM)
            agent.wait(timeout=10)
        finally:
            if agent.poll() is None:
                agent.kill()
                agent.wait()
    assert agent.returncode == 0
    assert "Traceback" not in (tmp_path / "agent.log").read_text()
    assert not (pipe / SIMULATED_MARKER).exists()
    assert not list((tmp_path / "work" / "run" / "mps").glob("gpu*.json"))


# --- bench/mps_real_gpu.py, for a session with a GPU: importable, and its daemon is always stopped --------------------
def _real_gpu_bench() -> ModuleType:
    path = Path(__file__).resolve().parents[2] / "bench" / "mps_real_gpu.py"
    spec = importlib.util.spec_from_file_location("mps_real_gpu", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_real_gpu_bench_imports_without_torch_and_parses_its_arguments() -> None:
    had_torch = "torch" in sys.modules
    bench = _real_gpu_bench()
    assert ("torch" in sys.modules) == had_torch  # torch only in the children, on the GPU machine
    args = bench.parse_args(["--gpu", "1", "--seconds", "5"])
    assert (args.gpu, args.seconds, args.child) == ("1", 5.0, None)
    assert set(bench.CHILDREN) == {"online", "offline", "memory", "crash", "probe"}
    assert b"st.global.u32" in bench.CRASH_PTX


def test_the_real_gpu_bench_always_quits_the_daemon_it_started(fake_control, tmp_path: Path) -> None:
    bench = _real_gpu_bench()
    report: dict[str, object] = {}
    with pytest.raises(RuntimeError), bench.owned_daemon("GPU-cccc", tmp_path / "d", report) as daemon:
        pid = daemon.pid()
        assert pid is not None and _runs(pid)
        env = daemon.client_env(30, memory_mib=2048)
        assert env["CUDA_VISIBLE_DEVICES"] == "0" and env["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] == "0=2048M"
        raise RuntimeError("a phase failed")
    assert report["daemon_stops"] == ["quit"]
    assert not _runs(pid)
    assert "stdin=quit" in (tmp_path / "d" / "calls").read_text().splitlines()
