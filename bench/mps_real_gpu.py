"""Shared GPUs on a real NVIDIA GPU (issue #17): MPS limits, interference, eviction and a fault, measured.

    python3.12 bench/mps_real_gpu.py --gpu 0 --seconds 20 --json-out /tmp/mps_real_gpu.json

For a machine with an NVIDIA GPU (written for an H100), Python 3.12 and PyTorch. Not run yet: the session that wrote
it had no GPU; it is only import- and syntax-checked (``tests/agent/test_mps.py``). What it does, each phase
recorded in one JSON report (stdout, and ``--json-out``):

1. ``alone``: an online latency loop (a fixed bf16 "request", timed with a synchronize) as an MPS client with its
   compute share, p50/p99 per request; and an offline bf16 matmul loop alone, TFLOP/s.
2. ``shared``: both at once on the same GPU, each with its share: the online p50/p99 beside the neighbour, the
   offline TFLOP/s. The online slowdown is ``shared.p99 / alone.p99``.
3. ``memory``: a client with ``CUDA_MPS_PINNED_DEVICE_MEM_LIMIT="0=2048M"`` allocates 1 GiB, then 3 GiB more; the
   second must fail with CUDA out-of-memory.
4. ``fault``: an offline neighbour runs while another client launches a kernel that writes to an illegal address
   (a hand-written PTX kernel through the driver API, no compiler needed): what the crashing client gets, what
   the neighbour gets and when, the daemon's log lines (to check the agent's fault patterns), and how long until
   the server takes a new client again.
5. ``agent`` (when the agent package imports: it needs ``httpx``): the agent's own code on the real GPU: a Runner
   with :class:`agent.mps.RealMps` and :class:`agent.share_guard.ShareGuard` starts an online job that reports a
   p99 over its ``latency_slo_ms`` and an offline neighbour; the guard must evict the neighbour (SIGUSR1, then
   stop). Then a crashing client: the guard must see the fault and mark the neighbour.

It starts its own MPS control daemons (own pipe and log directories under a temporary directory,
``CUDA_VISIBLE_DEVICES`` naming the one GPU) and always quits them: in ``finally`` blocks, with SIGTERM and SIGINT
turned into an exception so those run too. It never changes the compute mode or MIG (it reads both before and after,
with ``nvidia-smi --query-gpu``, and reports them).
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from types import FrameType
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
CONTROL = "nvidia-cuda-mps-control"
PID_FILE = "nvidia-cuda-mps-control.pid"
CUDA_ERROR_ILLEGAL_ADDRESS = 700

#: A kernel that stores to an address no allocation has: the GPU raises an illegal-address fault (XID 31).
CRASH_PTX = b"""
.version 6.0
.target sm_70
.address_size 64
.visible .entry corral_crash()
{
    .reg .u64 %rd<2>;
    .reg .u32 %r<2>;
    mov.u64 %rd1, 0xdead00000000;
    mov.u32 %r1, 1;
    st.global.u32 [%rd1], %r1;
    ret;
}
"""


# --- the MPS daemon this script owns -------------------------------------------------------------------------------
class Daemon:
    """One MPS control daemon for one GPU, with its own directories. :func:`owned_daemon` starts and stops it."""

    def __init__(self, gpu: str, base: Path, control: str = CONTROL) -> None:
        self.gpu = gpu
        self.pipe_dir = base / "pipe"
        self.log_dir = base / "log"
        self.control = control

    @property
    def env(self) -> dict[str, str]:
        return {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "CUDA_DEVICE_ORDER": "PCI_BUS_ID",
            "CUDA_VISIBLE_DEVICES": self.gpu,
            "CUDA_MPS_PIPE_DIRECTORY": str(self.pipe_dir),
            "CUDA_MPS_LOG_DIRECTORY": str(self.log_dir),
        }

    def client_env(self, percent: int, memory_mib: int | None = None, **extra: str) -> dict[str, str]:
        """A client's environment: the server remaps the daemon's one GPU to device 0."""
        env = {key: value for key, value in os.environ.items() if not key.startswith("CUDA_")}
        env |= {
            "CUDA_MPS_PIPE_DIRECTORY": str(self.pipe_dir),
            "CUDA_VISIBLE_DEVICES": "0",
            "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": str(percent),
        }
        if memory_mib is not None:
            env["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] = f"0={memory_mib}M"
        return env | extra

    def start(self) -> None:
        for directory in (self.pipe_dir, self.log_dir):
            directory.mkdir(parents=True, exist_ok=True)
        subprocess.run([self.control, "-d"], env=self.env, check=True, timeout=30, stdin=subprocess.DEVNULL)
        deadline = time.monotonic() + 10
        while self.pid() is None:
            if time.monotonic() > deadline:
                raise RuntimeError(f"{self.control} -d wrote no pid file in {self.pipe_dir}")
            time.sleep(0.05)

    def pid(self) -> int | None:
        try:
            pid = int((self.pipe_dir / PID_FILE).read_text())
            os.kill(pid, 0)
        except (OSError, ValueError):
            return None
        return pid

    def command(self, text: str) -> str:
        done = subprocess.run(
            [self.control], input=f"{text}\n", env=self.env, capture_output=True, text=True, timeout=30, check=False
        )
        return (done.stdout + done.stderr).strip()

    def stop(self) -> str:
        """``quit``, then wait for the daemon to go (SIGTERM after 30 s). Says what happened."""
        pid = self.pid()
        if pid is None:
            return "not running"
        self.command("quit")
        deadline = time.monotonic() + 30
        while self.pid() is not None:
            if time.monotonic() > deadline:
                os.kill(pid, signal.SIGTERM)
                return "ignored quit; SIGTERM sent"
            time.sleep(0.05)
        return "quit"

    def logs(self) -> dict[str, list[str]]:
        found = {}
        for name in ("control.log", "server.log"):
            path = self.log_dir / name
            found[name] = path.read_text(errors="replace").splitlines()[-60:] if path.exists() else []
        return found


class Interrupted(Exception):
    """SIGTERM or SIGINT: raised so every ``finally`` (the daemons' quit) runs."""


def _interrupt(signum: int, _frame: FrameType | None) -> None:
    raise Interrupted(signal.Signals(signum).name)


@contextlib.contextmanager
def owned_daemon(gpu: str, base: Path, report: dict[str, Any]) -> Iterator[Daemon]:
    daemon = Daemon(gpu, base)
    daemon.start()
    try:
        yield daemon
    finally:
        report.setdefault("daemon_stops", []).append(daemon.stop())


# --- the clients (run as children of this script: --child ROLE) ----------------------------------------------------
def child_online(out: Path, seconds: float) -> None:
    """Requests of fixed size, each timed to completion; writes its p99 to $CORRAL_LATENCY_FILE as it goes."""
    import torch

    a = torch.randn(2048, 2048, device="cuda", dtype=torch.bfloat16)
    latencies: list[float] = []
    latency_file = os.environ.get("CORRAL_LATENCY_FILE")
    end = time.monotonic() + seconds
    next_report = time.monotonic()
    stop = {"now": False}
    signal.signal(signal.SIGTERM, lambda *_: stop.update(now=True))
    while time.monotonic() < end and not stop["now"]:
        began = time.perf_counter()
        for _ in range(8):
            a = torch.tanh(a @ a)
        torch.cuda.synchronize()
        latencies.append((time.perf_counter() - began) * 1000.0)
        if latency_file and time.monotonic() >= next_report:
            recent = sorted(latencies[-200:])
            Path(latency_file + ".tmp").write_text(f"{recent[int(0.99 * (len(recent) - 1))]:.3f}\n")
            os.replace(latency_file + ".tmp", latency_file)
            next_report = time.monotonic() + 0.5
        time.sleep(0.002)  # an inference service between requests, not a busy loop
    out.write_text(json.dumps(_percentiles(latencies)))


def child_offline(out: Path, seconds: float) -> None:
    """bf16 4096² matmuls back to back; TFLOP/s. SIGUSR1 is noted (a checkpoint); SIGTERM ends it cleanly."""
    import torch

    events: list[str] = []
    began = time.monotonic()
    stop = {"now": False}
    signal.signal(signal.SIGUSR1, lambda *_: events.append(f"SIGUSR1 at {time.monotonic() - began:.2f}s"))
    signal.signal(signal.SIGTERM, lambda *_: stop.update(now=True))
    n = 4096
    a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    done, error = 0, None
    try:
        while time.monotonic() - began < seconds and not stop["now"]:
            for _ in range(20):
                a @ b
            torch.cuda.synchronize()
            done += 20
    except RuntimeError as exc:  # a fault of the server reaches every client as an error
        error = f"{exc}"[:500]
    elapsed = time.monotonic() - began
    result = {"tflops": 2 * n**3 * done / elapsed / 1e12, "seconds": elapsed, "events": events, "error": error}
    result["stopped_by"] = "SIGTERM" if stop["now"] else None
    out.write_text(json.dumps(result))
    sys.exit(3 if error else (143 if stop["now"] else 0))


def child_memory(out: Path, _seconds: float) -> None:
    """Under a 2 GiB limit: 1 GiB must fit, 3 GiB more must not."""
    import torch

    result: dict[str, Any] = {"limit": os.environ.get("CUDA_MPS_PINNED_DEVICE_MEM_LIMIT")}
    first = torch.empty(2**30, dtype=torch.uint8, device="cuda")
    torch.cuda.synchronize()
    result["first_1GiB"] = "allocated"
    try:
        second = torch.empty(3 * 2**30, dtype=torch.uint8, device="cuda")
        torch.cuda.synchronize()
        result["then_3GiB"] = "allocated (the limit was NOT enforced)"
        del second
    except torch.cuda.OutOfMemoryError as exc:
        result["then_3GiB"] = f"refused: {exc}"[:400]
    del first
    out.write_text(json.dumps(result))


def child_crash(out: Path, _seconds: float) -> None:
    """Launch the illegal-address kernel in this client's context; report the driver's answers."""
    import torch

    torch.zeros(1, device="cuda")
    torch.cuda.synchronize()  # the primary context is current on this thread now
    cuda = ctypes.CDLL("libcuda.so.1")
    cuda.cuLaunchKernel.argtypes = [ctypes.c_void_p] + [ctypes.c_uint] * 7 + [ctypes.c_void_p] * 3
    module, function = ctypes.c_void_p(), ctypes.c_void_p()
    result = {"load": cuda.cuModuleLoadData(ctypes.byref(module), ctypes.c_char_p(CRASH_PTX))}
    result["get_function"] = cuda.cuModuleGetFunction(ctypes.byref(function), module, b"corral_crash")
    result["launch"] = cuda.cuLaunchKernel(function, 1, 1, 1, 1, 1, 1, 0, None, None, None)
    result["synchronize"] = cuda.cuCtxSynchronize()
    result["illegal_address"] = result["synchronize"] == CUDA_ERROR_ILLEGAL_ADDRESS
    out.write_text(json.dumps(result))


def child_probe(out: Path, _seconds: float) -> None:
    """A new client: does the server take it?"""
    import torch

    x = torch.ones(1024, device="cuda")
    torch.cuda.synchronize()
    out.write_text(json.dumps({"ok": float(x.sum().item()) == 1024.0}))


CHILDREN = {
    "online": child_online,
    "offline": child_offline,
    "memory": child_memory,
    "crash": child_crash,
    "probe": child_probe,
}


# --- the phases ----------------------------------------------------------------------------------------------------
def spawn(role: str, out: Path, seconds: float, env: dict[str, str]) -> subprocess.Popen[bytes]:
    argv = [
        sys.executable,
        str(Path(__file__).resolve()),
        "--child",
        role,
        "--out",
        str(out),
        "--seconds",
        str(seconds),
    ]
    return subprocess.Popen(argv, env=env, stderr=subprocess.PIPE)


def finish(process: subprocess.Popen[bytes], out: Path, timeout: float) -> dict[str, Any]:
    try:
        _, stderr = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        _, stderr = process.communicate()
    result: dict[str, Any] = json.loads(out.read_text()) if out.exists() else {}
    result["exit_code"] = process.returncode
    if process.returncode:
        result["stderr_tail"] = stderr.decode(errors="replace")[-800:]
    return result


def phase_interference(daemon: Daemon, work: Path, seconds: float, online_pct: int, offline_pct: int) -> dict:
    report: dict[str, Any] = {"online_percent": online_pct, "offline_percent": offline_pct}
    online = spawn("online", work / "online-alone.json", seconds, daemon.client_env(online_pct))
    report["online_alone"] = finish(online, work / "online-alone.json", seconds + 120)
    offline = spawn("offline", work / "offline-alone.json", seconds, daemon.client_env(offline_pct))
    report["offline_alone"] = finish(offline, work / "offline-alone.json", seconds + 120)
    offline = spawn("offline", work / "offline-shared.json", seconds + 5, daemon.client_env(offline_pct))
    time.sleep(3)  # the neighbour is up to speed
    online = spawn("online", work / "online-shared.json", seconds, daemon.client_env(online_pct))
    report["online_shared"] = finish(online, work / "online-shared.json", seconds + 120)
    report["offline_shared"] = finish(offline, work / "offline-shared.json", seconds + 120)
    alone, shared = report["online_alone"].get("p99_ms"), report["online_shared"].get("p99_ms")
    if alone and shared:
        report["online_p99_slowdown"] = shared / alone
    return report


def phase_memory(daemon: Daemon, work: Path) -> dict:
    process = spawn("memory", work / "memory.json", 0, daemon.client_env(100, memory_mib=2048))
    return finish(process, work / "memory.json", 120)


def phase_fault(daemon: Daemon, work: Path, seconds: float) -> dict:
    report: dict[str, Any] = {}
    neighbour = spawn("offline", work / "neighbour.json", seconds + 30, daemon.client_env(50))
    time.sleep(5)
    crashed_at = time.monotonic()
    crash = spawn("crash", work / "crash.json", 0, daemon.client_env(50))
    report["crashing_client"] = finish(crash, work / "crash.json", 60)
    report["neighbour"] = finish(neighbour, work / "neighbour.json", 60)
    report["neighbour_ended_after_s"] = time.monotonic() - crashed_at
    report["server_list"] = daemon.command("get_server_list")
    report["server_status"] = [daemon.command(f"get_server_status {pid}") for pid in report["server_list"].split()]
    report["logs"] = daemon.logs()
    began = time.monotonic()
    for attempt in range(30):  # the server takes new clients once every old one has gone
        out = work / f"probe{attempt}.json"
        probe = finish(spawn("probe", out, 0, daemon.client_env(10)), out, 60)
        if probe.get("ok"):
            report["new_client_accepted_after_s"] = time.monotonic() - began
            break
        time.sleep(1)
    return report


def phase_agent(gpu: str, work: Path, seconds: float) -> dict:
    """The agent's RealMps and ShareGuard on the real GPU (skipped when the agent package does not import)."""
    sys.path.insert(0, str(ROOT))
    try:
        from agent.client import StartOrder, TaskKey
        from agent.mps import DaemonRecords, RealMps
        from agent.runner import Runner
        from agent.share import Share, WorkloadClass
        from agent.share_guard import GuardLimits, ShareGuard
    except ImportError as exc:
        return {"skipped": f"the agent package does not import here: {exc}"}
    runner = Runner(work / "agent")
    mps = RealMps(
        work / "agent-mps", DaemonRecords(runner.run_dir), uuids={int(gpu): _uuid(gpu)} if gpu.isdigit() else {}
    )
    limits = GuardLimits(memory_percent=None, sustain_seconds=1.0, evict_grace=3.0, check_every=1.0)
    guard = ShareGuard(runner, mps, limits=limits, stop_grace=5.0)
    index = int(gpu) if gpu.isdigit() else 0
    me = f"{sys.executable} {Path(__file__).resolve()} --seconds {seconds}"

    def order(job: int, role: str, share: Share) -> StartOrder:
        return StartOrder(TaskKey(job, 1, 0), f"{me} --child {role} --out {role}.json", (index,), {}, share=share)

    report: dict[str, Any] = {}
    try:
        # An online job whose every request is over its 1 µs target: its neighbour must be evicted.
        online = runner.start(order(1, "online", Share(50, None, WorkloadClass.ONLINE, latency_slo_ms=0.001)))
        offline = runner.start(order(2, "offline", Share(50, None)))
        began = time.monotonic()
        while offline.alive and time.monotonic() - began < seconds + 30:
            runner.poll()
            guard.check()
            time.sleep(0.1)
        report["eviction"] = offline.eviction
        report["evicted_after_s"] = time.monotonic() - began
        report["offline_exit"] = offline.exit_code
        report["offline_log_tail"] = offline.log_path.read_text(errors="replace")[-600:]
        neighbour = runner.start(order(3, "offline", Share(50, None)))
        time.sleep(5)
        crash = runner.start(order(4, "crash", Share(50, None)))
        began = time.monotonic()
        while (neighbour.alive or crash.alive) and time.monotonic() - began < 60:
            runner.poll()
            guard.check(force=guard.exit_pending())
            time.sleep(0.1)
        report["neighbour_mps_fault"] = neighbour.mps_fault
        report["crash_mps_fault"] = crash.mps_fault
        report["fault_counts"] = dict(guard.fault_counts)
        runner.poll()
        guard.check(force=True)  # restarts the daemon once every client is gone
        report["takes_shares_again"] = guard.accepts(order(5, "probe", Share(10)))
        report["online_alive_at_end"] = online.alive
    finally:
        runner.terminate_all(5.0)
        guard.stop_daemons()
    return report


# --- glue ----------------------------------------------------------------------------------------------------------
def _percentiles(values: list[float]) -> dict[str, Any]:
    if not values:
        return {"requests": 0}
    ordered = sorted(values)
    return {
        "requests": len(ordered),
        "p50_ms": statistics.median(ordered),
        "p99_ms": ordered[int(0.99 * (len(ordered) - 1))],
        "mean_ms": statistics.fmean(ordered),
    }


def _smi(gpu: str, fields: str) -> str:
    """A read-only ``nvidia-smi --query-gpu``; never a setting."""
    try:
        done = subprocess.run(
            ["nvidia-smi", f"--id={gpu}", f"--query-gpu={fields}", "--format=csv,noheader"],
            capture_output=True, text=True, timeout=30, check=False,
        )  # fmt: skip
    except (OSError, subprocess.SubprocessError) as exc:
        return f"nvidia-smi failed: {exc}"
    return done.stdout.strip() or done.stderr.strip()


def _uuid(gpu: str) -> str:
    answer = _smi(gpu, "uuid")
    return answer if answer.startswith("GPU-") else gpu


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gpu", default="0", help="the GPU (index or UUID) to share")
    parser.add_argument("--seconds", type=float, default=20.0, help="length of each timed loop")
    parser.add_argument("--online-percent", type=int, default=50)
    parser.add_argument("--offline-percent", type=int, default=50)
    parser.add_argument("--json-out", type=Path, default=None)
    parser.add_argument("--skip-agent", action="store_true", help="leave out the agent's own code (phase 5)")
    parser.add_argument("--child", choices=sorted(CHILDREN), help=argparse.SUPPRESS)
    parser.add_argument("--out", type=Path, help=argparse.SUPPRESS)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.child:
        CHILDREN[args.child](args.out, args.seconds)
        return 0
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, _interrupt)
    fields = "name,driver_version,compute_mode,mig.mode.current"
    report: dict[str, Any] = {"gpu": args.gpu, "before": _smi(args.gpu, fields)}
    with tempfile.TemporaryDirectory(prefix="mps-") as tmp:  # short: MPS puts Unix sockets in the pipe dir
        work = Path(tmp)
        try:
            with owned_daemon(_uuid(args.gpu), work / "d", report) as daemon:
                report["interference"] = phase_interference(
                    daemon, work, args.seconds, args.online_percent, args.offline_percent
                )
                report["memory"] = phase_memory(daemon, work)
                report["fault"] = phase_fault(daemon, work, args.seconds)
            if not args.skip_agent:
                report["agent"] = phase_agent(args.gpu, work, args.seconds)
        except Interrupted as exc:
            report["interrupted"] = str(exc)
        finally:
            report["after"] = _smi(args.gpu, fields)
            report["compute_mode_and_mig_unchanged"] = report["after"] == report["before"]
            text = json.dumps(report, indent=2, default=str)
            print(text)
            if args.json_out is not None:
                args.json_out.write_text(text)
    return 0 if "interrupted" not in report else 1


if __name__ == "__main__":
    raise SystemExit(main())
