"""NVIDIA MPS control, one control daemon per shared GPU (issue #17): the interface, its real implementation and the
records that let a watchdog or the next agent stop what this one started.

Why one daemon per GPU: on Volta and later a fatal fault in one MPS client is reported to every client of that GPU,
and the server refuses new clients until they have all exited. A daemon that serves several GPUs ties them into one
fault domain (a fault on GPU 0 blocks new work on GPU 1); one daemon per GPU, each with ``CUDA_VISIBLE_DEVICES``
naming that GPU alone and its own ``CUDA_MPS_PIPE_DIRECTORY`` and ``CUDA_MPS_LOG_DIRECTORY``, keeps them apart.

What the agent never does: change a GPU's compute mode or MIG configuration (no ``nvidia-smi -c``/``-mig``). It
starts daemons lazily, at the first share order for a GPU, and stops every daemon it started (``quit``) when it
exits, when it fences itself, and through its watchdog when it cannot (:func:`stop_recorded`).

Two implementations share :class:`MpsControl`: :class:`RealMps` (this module: the only code that runs
``nvidia-cuda-mps-control``) and :class:`agent.mps_sim.SimulatedMps` (``--fake-gpus``, the demo and CI), as the
telemetry probes are NVML or simulated.

Long on purpose: the interface, the commands of the real daemon and the records the watchdog stops daemons by must
agree on paths and on what "stopped" means; they are read together here.
"""

from __future__ import annotations

import json
import logging
import os
import re
import signal
import subprocess
import time
from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from agent.job_user import JobUser
from agent.pid_records import AgentId
from agent.share import Share

log = logging.getLogger(__name__)

CONTROL = "nvidia-cuda-mps-control"
PID_FILE = "nvidia-cuda-mps-control.pid"
#: Seconds one control command may take; a wedged daemon must not hang the agent's loop for longer.
COMMAND_TIMEOUT = 5.0
#: A Unix socket path holds at most 107 bytes, and MPS puts its pipes under the pipe directory.
MAX_PIPE_DIR = 90
#: Lines of the control and server logs taken for a fault. MPS does not document a fixed wording for a client's fatal
#: exception, so this is deliberately wide; bench/mps_real_gpu.py records the real lines on a GPU.
_FAULT_LINE = re.compile(r"fatal|exception|\bfault|xid", re.IGNORECASE)
_CLIENT_PID = re.compile(r"client\s+(?:pid\s+)?(\d+)", re.IGNORECASE)


class MpsError(Exception):
    """A daemon could not be started, asked or stopped: a sentence for the log, or for a refused task."""


@dataclass(frozen=True, slots=True)
class MpsDaemon:
    """One GPU's control daemon: where its clients find it and where it logs."""

    gpu: int
    pipe_dir: Path
    log_dir: Path


@dataclass(frozen=True, slots=True)
class ServerFault:
    """A GPU's MPS server faulted: every client of that GPU got the fault. ``suspects``: client pids the MPS logs
    name, when they name any (MPS does not say reliably which client caused a fault)."""

    gpu: int
    detail: str
    suspects: frozenset[int] = frozenset()


class DaemonRecords:
    """``<run_dir>/mps/gpu<N>.json`` per daemon started, naming the agent that started it, outside the jobs' reach.

    The watchdog reads them to stop its agent's daemons once the lease has run out; the next agent reads them to stop
    a crashed predecessor's daemons before it starts its own.
    """

    def __init__(self, run_dir: Path, agent: AgentId | None = None) -> None:
        self.directory = run_dir / "mps"
        self.agent = agent or AgentId.current()

    def write(self, daemon: MpsDaemon, *, kind: str, control: str) -> None:
        body = {
            "gpu": daemon.gpu,
            "kind": kind,
            "control": control,
            "pipe_dir": str(daemon.pipe_dir),
            "log_dir": str(daemon.log_dir),
            "agent_pid": self.agent.pid,
            "agent_start_ticks": self.agent.start_ticks,
        }
        try:
            self.directory.mkdir(parents=True, exist_ok=True, mode=0o700)
            aside = self.directory / f".gpu{daemon.gpu}.json.tmp"
            aside.write_text(json.dumps(body))
            aside.replace(self.directory / f"gpu{daemon.gpu}.json")
        except OSError as exc:
            log.warning("cannot record the MPS daemon of GPU %d: %s", daemon.gpu, exc)

    def remove(self, gpu: int) -> None:
        (self.directory / f"gpu{gpu}.json").unlink(missing_ok=True)

    def read(self, *, agent: AgentId | None = None) -> list[dict[str, object]]:
        """The records on disk (of ``agent`` only, if given). Unreadable ones are skipped."""
        found = []
        try:
            paths = sorted(self.directory.glob("gpu*.json"))
        except OSError:
            return []
        for path in paths:
            try:
                data = json.loads(path.read_text())
                owner = AgentId(int(data["agent_pid"]), data.get("agent_start_ticks"))
            except (OSError, ValueError, KeyError, TypeError):
                continue
            if agent is None or owner == agent:
                found.append(data | {"path": str(path)})
        return found


def stop_recorded(records: DaemonRecords, *, agent: AgentId | None = None) -> int:
    """Stop every daemon the records name (of ``agent`` only, if given) and remove their records. Returns a count.

    For the watchdog (its agent's lease ran out, or its agent died) and for an agent starting on a workdir whose
    previous agent crashed: neither holds the objects that started the daemons, only the records.
    """
    stopped = 0
    for data in records.read(agent=agent):
        daemon = MpsDaemon(int(str(data["gpu"])), Path(str(data["pipe_dir"])), Path(str(data["log_dir"])))
        try:
            if data.get("kind") == "simulated":
                (daemon.pipe_dir / SIMULATED_MARKER).unlink(missing_ok=True)
            else:
                _quit(str(data.get("control") or CONTROL), daemon)
        except MpsError as exc:
            log.error("cannot stop the MPS daemon of GPU %d: %s", daemon.gpu, exc)
            continue
        Path(str(data["path"])).unlink(missing_ok=True)
        log.warning("stopped the MPS control daemon of GPU %d (%s)", daemon.gpu, daemon.pipe_dir)
        stopped += 1
    return stopped


#: The simulated daemon's stand-in for a running process (see agent.mps_sim).
SIMULATED_MARKER = "simulated-daemon"


class MpsControl(ABC):
    """One control daemon per shared GPU, started on demand, under ``state_dir/gpu<N>/{pipe,log}``."""

    kind = "abstract"

    def __init__(self, state_dir: Path, records: DaemonRecords, *, owner: JobUser | None = None) -> None:
        self.state_dir = state_dir
        self.records = records
        #: The account jobs run as (when the agent is root): its MPS server creates pipes and logs in these dirs.
        self.owner = owner
        self._daemons: dict[int, MpsDaemon] = {}

    def daemons(self) -> dict[int, MpsDaemon]:
        """The daemons this object started and has not stopped, by GPU."""
        return dict(self._daemons)

    def start(self, gpu: int) -> MpsDaemon:
        """The GPU's daemon, started first if it is not running. ``MpsError`` if it cannot be."""
        daemon = self._daemons.get(gpu)
        if daemon is not None and self.running(daemon):
            return daemon
        daemon = MpsDaemon(gpu, self.state_dir / f"gpu{gpu}" / "pipe", self.state_dir / f"gpu{gpu}" / "log")
        for directory in (daemon.pipe_dir, daemon.log_dir):
            try:
                directory.mkdir(parents=True, exist_ok=True, mode=0o700)
                if self.owner is not None:
                    os.chown(directory, self.owner.uid, self.owner.gid)
            except OSError as exc:
                raise MpsError(f"cannot prepare {directory}: {exc.strerror}") from exc
        self._launch(daemon)
        self._daemons[gpu] = daemon
        self.records.write(daemon, kind=self.kind, control=self.control_name)
        log.info("started the MPS control daemon of GPU %d (%s)", gpu, daemon.pipe_dir)
        return daemon

    def stop(self, gpu: int) -> None:
        """``quit`` the GPU's daemon (if this object started it); errors are logged, the record goes either way."""
        daemon = self._daemons.pop(gpu, None)
        if daemon is None:
            return
        try:
            self._quit(daemon)
            log.info("stopped the MPS control daemon of GPU %d", gpu)
        except MpsError as exc:
            log.error("cannot stop the MPS control daemon of GPU %d: %s", gpu, exc)
        self.records.remove(gpu)

    def stop_all(self) -> None:
        for gpu in sorted(self._daemons):
            self.stop(gpu)

    def restart(self, gpu: int) -> MpsDaemon:
        """A fresh daemon (and so a fresh server) for the GPU, once the faulted server's clients are all gone."""
        self.stop(gpu)
        return self.start(gpu)

    @property
    def control_name(self) -> str:
        return ""

    # --- what each implementation provides -----------------------------------------------------------------------
    @abstractmethod
    def running(self, daemon: MpsDaemon) -> bool:
        """Whether the daemon still runs."""

    @abstractmethod
    def fault(self, gpu: int) -> ServerFault | None:
        """The GPU's server state: a fault since the last look, or None. ``MpsError`` if the daemon cannot be asked."""

    @abstractmethod
    def client_started(self, gpu: int, pid: int, share: Share) -> None:
        """A client process of the GPU's server has been started (its limits are in its environment)."""

    @abstractmethod
    def client_exited(self, gpu: int, pid: int) -> None:
        """That client has exited."""

    @abstractmethod
    def _launch(self, daemon: MpsDaemon) -> None: ...

    @abstractmethod
    def _quit(self, daemon: MpsDaemon) -> None: ...


class RealMps(MpsControl):
    """``nvidia-cuda-mps-control``, one daemon per GPU. ``uuids`` name the GPUs (index → UUID) so a daemon's
    ``CUDA_VISIBLE_DEVICES`` does not depend on how CUDA orders devices; without one the index is used, with
    ``CUDA_DEVICE_ORDER=PCI_BUS_ID`` (NVML's order, which the portal's indices follow)."""

    kind = "real"

    def __init__(
        self,
        state_dir: Path,
        records: DaemonRecords,
        *,
        uuids: Mapping[int, str] | None = None,
        owner: JobUser | None = None,
        control: str = CONTROL,
        timeout: float = COMMAND_TIMEOUT,
    ) -> None:
        super().__init__(state_dir, records, owner=owner)
        self.uuids = dict(uuids or {})
        self.control = control
        self.timeout = timeout
        self._log_offsets: dict[Path, int] = {}

    @property
    def control_name(self) -> str:
        return self.control

    def running(self, daemon: MpsDaemon) -> bool:
        pid = _daemon_pid(daemon)
        return pid is not None and _alive(pid)

    def fault(self, gpu: int) -> ServerFault | None:
        daemon = self._daemons.get(gpu)
        if daemon is None:
            return None
        if not self.running(daemon):
            return ServerFault(gpu, "the MPS control daemon is gone")
        for name in ("control.log", "server.log"):
            for line in self._new_lines(daemon.log_dir / name):
                if _FAULT_LINE.search(line):
                    suspects = frozenset(int(pid) for pid in _CLIENT_PID.findall(line))
                    return ServerFault(gpu, f"{name}: {line.strip()[:300]}", suspects)
        for pid in _pids(_command(self.control, daemon, "get_server_list", self._env(daemon), self.timeout)):
            status = _command(self.control, daemon, f"get_server_status {pid}", self._env(daemon), self.timeout)
            if "FAULT" in status.upper():
                return ServerFault(gpu, f"MPS server {pid}: {status.strip()[:200]}")
        return None

    def client_started(self, gpu: int, pid: int, share: Share) -> None:
        pass  # a real client connects to its server by itself when it initialises CUDA

    def client_exited(self, gpu: int, pid: int) -> None:
        pass

    def _env(self, daemon: MpsDaemon) -> dict[str, str]:
        return {
            "PATH": os.environ.get("PATH") or "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
            "CUDA_DEVICE_ORDER": "PCI_BUS_ID",
            "CUDA_VISIBLE_DEVICES": self.uuids.get(daemon.gpu) or str(daemon.gpu),
            "CUDA_MPS_PIPE_DIRECTORY": str(daemon.pipe_dir),
            "CUDA_MPS_LOG_DIRECTORY": str(daemon.log_dir),
        }

    def _launch(self, daemon: MpsDaemon) -> None:
        if len(str(daemon.pipe_dir)) > MAX_PIPE_DIR:
            raise MpsError(f"the MPS pipe directory {daemon.pipe_dir} is too long for a Unix socket; pass --mps-dir")
        (daemon.pipe_dir / PID_FILE).unlink(missing_ok=True)
        # Output to a file, not a pipe: a daemon that keeps an inherited pipe open would hang the call.
        try:
            with open(daemon.log_dir / "daemon-start.out", "ab") as out:
                done = subprocess.run(  # noqa: S603 - the MPS control binary, by the admin's name for it
                    [self.control, "-d"],
                    stdin=subprocess.DEVNULL,
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    env=self._env(daemon),
                    timeout=self.timeout,
                    check=False,
                    start_new_session=True,
                )
        except (OSError, subprocess.SubprocessError) as exc:
            raise MpsError(f"cannot run {self.control} -d: {exc}") from exc
        if done.returncode != 0:
            raise MpsError(f"{self.control} -d exited with {done.returncode} (see {daemon.log_dir})")
        deadline = time.monotonic() + self.timeout
        while not self.running(daemon):
            if time.monotonic() > deadline:
                raise MpsError(f"the MPS control daemon of GPU {daemon.gpu} wrote no live pid in {daemon.pipe_dir}")
            time.sleep(0.02)
        for name in ("control.log", "server.log"):  # faults are what happens from now on
            path = daemon.log_dir / name
            self._log_offsets[path] = path.stat().st_size if path.exists() else 0

    def _quit(self, daemon: MpsDaemon) -> None:
        _quit(self.control, daemon, env=self._env(daemon), timeout=self.timeout)

    def _new_lines(self, path: Path) -> list[str]:
        """Lines appended to a log since the last look (from the start again if it was truncated or rotated)."""
        offset = self._log_offsets.get(path, 0)
        try:
            with open(path, "rb") as handle:
                size = os.fstat(handle.fileno()).st_size
                if size < offset:
                    offset = 0
                handle.seek(offset)
                data = handle.read(1 << 20)
        except OSError:
            return []
        complete = data.rfind(b"\n") + 1  # a line still being written is read next time
        self._log_offsets[path] = offset + complete
        return data[:complete].decode(errors="replace").splitlines()


def _quit(control: str, daemon: MpsDaemon, *, env: Mapping[str, str] | None = None, timeout: float = COMMAND_TIMEOUT):
    """``echo quit | nvidia-cuda-mps-control`` for this daemon, then wait (bounded) for its process to go."""
    pid = _daemon_pid(daemon)
    if pid is None or not _alive(pid):
        return
    environment = dict(env) if env is not None else {
        "PATH": os.environ.get("PATH", ""),
        "CUDA_MPS_PIPE_DIRECTORY": str(daemon.pipe_dir),
        "CUDA_MPS_LOG_DIRECTORY": str(daemon.log_dir),
    }  # fmt: skip
    _command(control, daemon, "quit", environment, timeout)
    deadline = time.monotonic() + timeout
    while _alive(pid):
        if time.monotonic() > deadline:
            # quit waits for the servers' clients; ours are gone by now, so a daemon still here is wedged.
            log.error("MPS control daemon %d of GPU %d ignored quit; sending SIGTERM", pid, daemon.gpu)
            _signal(pid, signal.SIGTERM)
            return
        time.sleep(0.02)


def _command(control: str, daemon: MpsDaemon, text: str, env: Mapping[str, str], timeout: float) -> str:
    """One command on the daemon's control pipe; its answer. ``MpsError`` if it cannot be run or times out."""
    try:
        done = subprocess.run(  # noqa: S603 - the MPS control binary
            [control],
            input=f"{text}\n",
            capture_output=True,
            text=True,
            env=dict(env),
            timeout=timeout,
            check=False,
        )
    except (OSError, subprocess.SubprocessError) as exc:
        raise MpsError(f"{control}: {text!r} on GPU {daemon.gpu} failed: {exc}") from exc
    if done.returncode != 0:
        raise MpsError(f"{control}: {text!r} on GPU {daemon.gpu} exited with {done.returncode}: {done.stderr[:200]}")
    return done.stdout


def _pids(text: str) -> list[int]:
    return [int(word) for word in text.split() if word.isdigit()]


def _daemon_pid(daemon: MpsDaemon) -> int | None:
    try:
        return int((daemon.pipe_dir / PID_FILE).read_text().strip())
    except (OSError, ValueError):
        return None


def _alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie does not)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    except OSError:
        return True  # no /proc: the kernel still knows the pid, which is all that can be said
    return stat[stat.rfind(")") + 2 :].split()[0] not in ("Z", "X")


def _signal(pid: int, signum: signal.Signals) -> None:
    try:
        os.kill(pid, signum)
    except (ProcessLookupError, PermissionError):
        pass
