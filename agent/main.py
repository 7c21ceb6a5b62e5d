"""``corral-agent``: parse the command line, check it, wire probe, runner, loop and shipper, run until signalled.

Every mistake a person can make on the command line (no server, no token, unknown user, unwritable workdir) ends
as one ``corral-agent: error: ...`` line on stderr with exit status 2, never a traceback: the agent usually runs
under systemd, where the first line of the journal is all anyone reads.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import socket
import stat
import sys
import threading
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import NoReturn
from urllib.parse import urlsplit

from agent.client import PortalClient
from agent.log_shipper import LogShipper
from agent.loop import Agent
from agent.mps import CONTROL, DaemonRecords, MpsControl, RealMps, stop_recorded
from agent.mps_sim import SimulatedMps
from agent.runner import JobUser, Runner
from agent.share_guard import GuardLimits, ShareGuard
from agent.telemetry_shipper import ProbeGate, TelemetryShipper, gpu_descriptors
from agent.watchdog import LeaseFile, start_watchdog, stop_watchdog
from telemetry.probe import GpuProbe, SimulatedProbe, open_probe

log = logging.getLogger("agent")


class UsageError(Exception):
    """Bad input: reported as one line, exit status 2."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise UsageError(message)


@dataclass(frozen=True)
class Config:
    server: str
    token: Callable[[], str]
    name: str
    address: str
    fake_gpus: int | None
    workdir: Path
    grace: float
    sample_interval: float | None
    run_as: str | None  # None: jobs run as the agent's own user
    retention_days: float
    mps_control: str = CONTROL
    mps_dir: Path | None = None  # None: <workdir>/mps
    share_limits: GuardLimits = GuardLimits()


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="corral-agent", description="Corral node agent: runs a GPU node's jobs for the portal.")
    parser.add_argument("--server", default=os.environ.get("CORRAL_SERVER"), help="portal URL (env CORRAL_SERVER)")
    token = parser.add_mutually_exclusive_group()
    token.add_argument("--token", help="node token (env CORRAL_NODE_TOKEN); prefer --token-file, argv is public")
    token.add_argument("--token-file", type=Path, help="file holding the node token (re-read on every call)")
    parser.add_argument("--name", default=None, help="node name (default: the hostname)")
    parser.add_argument("--address", default=None, help="address other nodes reach this one at (MASTER_ADDR)")
    parser.add_argument("--fake-gpus", type=int, default=None, metavar="N", help="simulate N GPUs instead of NVML")
    parser.add_argument("--workdir", type=Path, default=None, help="job directories (default ./var/agent-<name>)")
    parser.add_argument("--grace", type=float, default=10.0, metavar="SECONDS", help="SIGTERM to SIGKILL delay")
    parser.add_argument("--sample-interval", type=float, default=None, metavar="S", help="override the portal's")
    parser.add_argument("--run-as", default=None, metavar="USER", help="user for jobs when run as root (nobody)")
    parser.add_argument("--allow-root", action="store_true", help="when run as root, run jobs as root too")
    parser.add_argument("--retention-days", type=float, default=7.0, help="keep finished job directories this long")
    share = parser.add_argument_group("shared GPUs (MPS, issue #17)")
    share.add_argument("--mps-control", default=CONTROL, metavar="PATH", help="the MPS control binary")
    share.add_argument("--mps-dir", type=Path, default=None, help="MPS pipe and log dirs (default <workdir>/mps)")
    share.add_argument("--share-memory-limit", type=float, default=95.0, metavar="PCT", help="evict over (0: off)")
    share.add_argument("--share-util-limit", type=float, default=0.0, metavar="PCT", help="evict over (0: off)")
    share.add_argument("--share-p99-ms", type=float, default=0.0, metavar="MS", help="online p99 limit (0: off)")
    share.add_argument("--share-sustain", type=float, default=3.0, metavar="S", help="a limit must hold this long")
    share.add_argument("--evict-grace", type=float, default=10.0, metavar="S", help="SIGUSR1 to stop, on eviction")
    share.add_argument("--share-check-every", type=float, default=1.0, metavar="S", help="how often to look")
    parser.add_argument(
        "--log-level", default="INFO", type=str.upper, choices=["DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"]
    )
    return parser


def check_args(args: argparse.Namespace) -> Config:
    """Check everything up front, so a mistake fails at start-up and not at the first job."""
    server = (args.server or "").strip()
    parts = urlsplit(server)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise UsageError("--server (or CORRAL_SERVER) must be an http:// or https:// URL")
    token = _token_source(args.token, args.token_file)
    name = args.name or socket.gethostname()
    if not name.strip():
        raise UsageError("--name must not be empty")
    if args.fake_gpus is not None and args.fake_gpus < 1:
        raise UsageError("--fake-gpus must be at least 1")
    if args.grace < 0:
        raise UsageError("--grace must not be negative")
    if args.sample_interval is not None and not args.sample_interval > 0:
        raise UsageError("--sample-interval must be positive")
    if not args.retention_days > 0:
        raise UsageError("--retention-days must be positive")
    run_as = _run_as(args.run_as, args.allow_root)
    limits = _share_limits(args)
    workdir = (args.workdir or Path("var") / f"agent-{name}").resolve()
    try:
        (workdir / "jobs").mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UsageError(f"cannot create the workdir {workdir}: {exc.strerror}") from exc
    return Config(
        server=server,
        token=token,
        name=name,
        address=args.address or _local_address(parts.hostname, parts.port or (443 if parts.scheme == "https" else 80)),
        fake_gpus=args.fake_gpus,
        workdir=workdir,
        grace=args.grace,
        sample_interval=args.sample_interval,
        run_as=run_as,
        retention_days=args.retention_days,
        mps_control=args.mps_control,
        mps_dir=args.mps_dir.resolve() if args.mps_dir is not None else None,
        share_limits=limits,
    )


def _share_limits(args: argparse.Namespace) -> GuardLimits:
    """The shared-GPU guard's limits; a percentage outside 0..100 or a negative time is a usage error."""
    for flag in ("share_memory_limit", "share_util_limit"):
        if not 0 <= getattr(args, flag) <= 100:
            raise UsageError(f"--{flag.replace('_', '-')} must be a percentage from 0 (off) to 100")
    for flag in ("share_p99_ms", "share_sustain", "evict_grace"):
        if not getattr(args, flag) >= 0:
            raise UsageError(f"--{flag.replace('_', '-')} must not be negative")
    if not args.share_check_every > 0:
        raise UsageError("--share-check-every must be positive")
    return GuardLimits(
        memory_percent=args.share_memory_limit or None,
        util_percent=args.share_util_limit or None,
        p99_ms=args.share_p99_ms or None,
        sustain_seconds=args.share_sustain,
        evict_grace=args.evict_grace,
        check_every=args.share_check_every,
    )


def _token_source(token: str | None, token_file: Path | None) -> Callable[[], str]:
    if token_file is not None:
        try:
            mode = token_file.stat().st_mode
            first = token_file.read_text().strip()
        except OSError as exc:
            raise UsageError(f"cannot read the token file {token_file}: {exc.strerror}") from exc
        if not first:
            raise UsageError(f"the token file {token_file} is empty")
        if mode & (stat.S_IRWXG | stat.S_IRWXO):
            log.warning("token file %s is readable by others; chmod 600 it", token_file)
        return lambda: token_file.read_text().strip()
    value = (token or os.environ.get("CORRAL_NODE_TOKEN") or "").strip()
    if not value:
        raise UsageError("a node token is required: --token-file PATH, --token TOKEN or CORRAL_NODE_TOKEN")
    return lambda: value


def _run_as(run_as: str | None, allow_root: bool) -> str | None:
    """Whom jobs run as. Only root can switch users; as root, jobs never run as root unless ``--allow-root``."""
    if os.geteuid() != 0:
        if run_as is not None:
            log.warning("--run-as %s ignored: the agent is not root, so jobs run as its own user", run_as)
        return None
    if allow_root:
        if run_as is not None:
            log.warning("--run-as %s ignored: --allow-root runs jobs as root", run_as)
        return None
    name = run_as or "nobody"
    try:
        user = JobUser.lookup(name)
    except KeyError:
        raise UsageError(f"--run-as: no such user {name!r}") from None
    if user.uid == 0:
        raise UsageError(f"--run-as {name} is root; pass --allow-root to run jobs as root")
    return user.name


def _local_address(host: str, port: int) -> str:
    """The address of the interface that routes to the portal: what other nodes of a gang can reach us at.
    A UDP ``connect`` only picks a route; it sends nothing."""
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
            probe.connect((host, port))
            return str(probe.getsockname()[0])
    except OSError:
        return socket.gethostname()


def run(config: Config) -> int:
    """Wire the parts and run until SIGTERM/SIGINT; then stop every task (grace, SIGKILL) and return 0."""
    who = config.run_as or f"uid {os.geteuid()}"
    if config.run_as is None and os.geteuid() == 0:
        log.warning("jobs run as root (--allow-root): any job can take over this node")
    log.info("corral-agent %s for %s: workdir %s, jobs run as %s", config.name, config.server, config.workdir, who)
    # Seeded by node name so simulated nodes get distinct GPU UUIDs (the portal upserts GPUs by UUID).
    probe = open_probe(config.fake_gpus, seed=zlib.crc32(config.name.encode()))
    gate = ProbeGate(probe)
    runner = Runner(config.workdir, run_as=config.run_as, on_gpus=gate.mark)
    mps = _mps(config, probe, runner)
    guard = ShareGuard(runner, mps, gate=gate, limits=config.share_limits, stop_grace=config.grace)
    # Jobs a previous agent left running (it crashed or was SIGKILLed) are SIGKILLed before every registration,
    # the first one included (Agent.register), so the portal hears whether they are gone.
    lease_file = LeaseFile(runner.run_dir / f"agent-{os.getpid()}.lease")
    lease_file.clear()  # a file left from before a reboot: a monotonic deadline of another boot means nothing
    loop_client = PortalClient(config.server, config.token)
    telemetry_client = PortalClient(config.server, config.token)
    shipper = TelemetryShipper(gate, telemetry_client, interval=config.sample_interval)
    agent = Agent(
        loop_client,
        runner,
        hostname=config.name,
        address=config.address,
        gpus=gpu_descriptors(probe),
        grace=config.grace,
        retention_seconds=config.retention_days * 86400.0,
        flush_xids=shipper.flush_xids,  # a dying job's XIDs reach the portal before its exit does (issue #4)
        lease_file=lease_file,
        guard=guard,
    )
    agent.on_registered.append(shipper.on_registered)
    log_client = PortalClient(config.server, config.token)
    log_shipper = agent.log_shipper = LogShipper(log_client)  # task output beside the heartbeat (issue #15)

    stop = threading.Event()

    def on_signal(signum: int, _frame: FrameType | None) -> None:
        log.info("received %s; stopping tasks and exiting", signal.Signals(signum).name)
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    shipping = threading.Thread(target=shipper.run, args=(stop,), name="telemetry", daemon=True)
    shipping.start()
    logs = threading.Thread(target=log_shipper.run, args=(stop,), name="logs", daemon=True)
    logs.start()
    watchdog = None
    try:
        if runner.pid_records.supported:
            # Before any job starts: it kills them if this process is stopped or killed past its lease.
            level = logging.getLevelName(logging.getLogger().getEffectiveLevel())
            watchdog = start_watchdog(runner.run_dir, lease_file, runner.pid_records.agent, log_level=level)
        else:
            log.warning("no /proc: no pid records and no lease watchdog; a stopped agent's jobs would run on")
        agent.run(stop)
    finally:
        stop.set()
        shipping.join(timeout=5.0)
        logs.join(timeout=5.0)
        log_client.close()
        loop_client.close()
        telemetry_client.close()
        guard.stop_daemons()  # every MPS daemon this agent started (agent.run's shutdown has done it unless it failed)
        gate.close()
        if watchdog is not None:
            if any(task.alive for task in runner.tasks.values()):
                log.warning("leaving the lease watchdog (pid %d) to kill the jobs still running", watchdog.pid)
            else:
                stop_watchdog(watchdog)
                lease_file.clear()
    return 0


def _mps(config: Config, probe: GpuProbe, runner: Runner) -> MpsControl:
    """Real MPS for real GPUs, simulated MPS for simulated ones (``--fake-gpus``, or NVML's fallback). Daemons a
    crashed predecessor left on this workdir are stopped first: their servers' clients are being killed anyway."""
    records = DaemonRecords(runner.run_dir, runner.pid_records.agent)
    if stop_recorded(records):
        log.warning("stopped MPS control daemons an earlier agent left running")
    state_dir = config.mps_dir or config.workdir / "mps"
    owner = JobUser.lookup(config.run_as) if config.run_as is not None else None
    if isinstance(probe, SimulatedProbe):
        return SimulatedMps(state_dir, records, len(probe.inventory()), owner=owner)
    uuids = {gpu.index: gpu.uuid for gpu in probe.inventory()}
    return RealMps(state_dir, records, uuids=uuids, owner=owner, control=config.mps_control)


def main(argv: Sequence[str] | None = None) -> None:
    try:
        args = build_parser().parse_args(argv)
        logging.basicConfig(level=args.log_level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
        if args.log_level != "DEBUG":
            logging.getLogger("httpx").setLevel(logging.WARNING)  # one INFO line per heartbeat is noise
        config = check_args(args)
    except UsageError as exc:
        print(f"corral-agent: error: {exc}", file=sys.stderr)
        raise SystemExit(2) from None
    server = urlsplit(config.server)
    if server.scheme == "http" and server.hostname not in ("localhost", "127.0.0.1", "::1"):
        log.warning("the node token travels in clear text over http://; use https:// outside a trusted network")
    raise SystemExit(run(config))


if __name__ == "__main__":
    main()
