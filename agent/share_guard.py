"""Shared GPUs on the node (issue #17): start a share's task under its GPU's MPS daemon, protect online work at the
GPU level, and handle MPS server faults.

**Protection, GPU level.** The MPS limits protect each client at the workload level (compute share, memory limit),
but not from interference: an offline neighbour's kernels still compete for memory bandwidth and caches. So every
``check_every`` seconds (1 s) the guard looks at each shared GPU that has an online client and an offline one:

- the online jobs' own latency, where they report one: the p99 in milliseconds in ``$CORRAL_LATENCY_FILE`` (above
  the share's ``latency_slo_ms``, or ``--share-p99-ms``);
- the GPU's memory use (``--share-memory-limit`` percent, 95 by default) and, if asked, its utilisation
  (``--share-util-limit``; off by default: under MPS one busy offline client alone keeps NVML's utilisation at
  100 %, which says nothing about the online side), read through the telemetry probe like every other reading.

A condition that holds for ``sustain_seconds`` evicts one offline client: SIGUSR1 (checkpoint now), then, after
``evict_grace`` seconds, the usual stop (SIGTERM, the agent's grace, SIGKILL). The victim is the offline client
holding the most GPU memory when memory is the cause, otherwise the one that started last (it has lost least work).
One eviction at a time per GPU: the next needs the condition to hold again, for as long, once the last victim is
gone. The task's reports then carry ``eviction`` with the reason "evicted to protect online work on GPU N"; the
portal requeues it.

**Mixed error handling.** A fatal fault in one MPS client is reported to every client of that GPU, and the server
takes no new client until they have all exited. When a GPU's server reports a fault (:meth:`MpsControl.fault`), the
guard marks every client of that GPU (those alive, and those that died since the last look, usually *of* the fault)
with ``mps_fault``, online ones to be restarted and offline ones requeued, stops those still running, holds back new
shares for that GPU, and restarts its daemon once they are all gone. It counts, per job, the faults the job was a
client at and those where the MPS logs named its process, so the portal can tell a repeat culprit.
"""

from __future__ import annotations

import logging
import math
import os
import signal
import stat
import time
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from agent.client import StartOrder, TaskKey, TaskState
from agent.mps import MpsControl, MpsError, ServerFault
from agent.runner import Runner, Task
from agent.share import LATENCY_FILE_NAME, ShareRefused, share_env
from agent.telemetry_shipper import ProbeGate
from telemetry.sample import GpuSample

log = logging.getLogger(__name__)

EVICTION_REASON = "evicted to protect online work on GPU {gpu}"
CHECKPOINT_SIGNAL = signal.SIGUSR1


@dataclass(frozen=True, slots=True)
class GuardLimits:
    """When offline work is evicted. A limit of None is off."""

    memory_percent: float | None = 95.0
    util_percent: float | None = None
    p99_ms: float | None = None  # for online jobs whose share names no latency_slo_ms
    sustain_seconds: float = 3.0
    evict_grace: float = 10.0  # SIGUSR1 → stop
    check_every: float = 1.0
    latency_stale_seconds: float = 10.0  # an older latency file is no report


@dataclass(frozen=True, slots=True)
class Pressure:
    kind: str  # latency | memory | utilization
    text: str


class ShareGuard:
    """The runner's :class:`~agent.runner.ShareHooks` and the watcher of the node's shared GPUs.

    Only the loop thread calls it (as it does the runner). Attaching it to ``runner`` makes the runner run shares.
    """

    def __init__(
        self,
        runner: Runner,
        mps: MpsControl,
        *,
        gate: ProbeGate | None = None,
        limits: GuardLimits | None = None,
        stop_grace: float = 10.0,
        clock: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], float] = time.time,
    ) -> None:
        self.runner = runner
        self.mps = mps
        self.gate = gate
        self.limits = limits or GuardLimits()
        self.stop_grace = stop_grace
        self.clock = clock
        self.wall_clock = wall_clock
        runner.shares = self
        #: Faults each job was a client at on this node, and those where the MPS logs named its process.
        self.fault_counts: Counter[int] = Counter()
        self.suspect_counts: Counter[int] = Counter()
        self._next_check = clock()
        self._pressure_since: dict[int, float] = {}
        self._stop_at: dict[TaskKey, float] = {}  # evicted tasks not yet told to stop: when to
        self._started_at: dict[TaskKey, float] = {}
        self._recovering: dict[int, ServerFault] = {}  # GPUs whose faulted server waits for its clients to go
        self._seen: dict[int, set[TaskKey]] = {}  # each GPU's live clients at the last look
        self._exits_seen: set[TaskKey] = set()  # share tasks whose exit a look has followed

    # --- the runner's hooks --------------------------------------------------------------------------------------
    def prepare(self, order: StartOrder, directory: Path) -> Mapping[str, str]:
        assert order.share is not None
        gpu = order.gpus[0]
        if gpu in self._recovering:
            raise ShareRefused(f"the MPS server of GPU {gpu} is recovering from a fault")
        try:
            daemon = self.mps.start(gpu)
        except MpsError as exc:
            raise ShareRefused(str(exc)) from exc
        return share_env(order.share, pipe_dir=daemon.pipe_dir, task_dir=directory)

    def started(self, task: Task) -> None:
        assert task.share is not None and task.pid is not None
        self._started_at[task.key] = self.clock()
        self.mps.client_started(task.gpus[0], task.pid, task.share)

    def ended(self, task: Task) -> None:
        self._started_at.pop(task.key, None)
        if task.pid is not None:
            self.mps.client_exited(task.gpus[0], task.pid)

    def accepts(self, order: StartOrder) -> bool:
        """Whether to start a share now: not while its GPU's server recovers (the portal repeats the order)."""
        return order.share is None or not order.gpus or order.gpus[0] not in self._recovering

    def stop_daemons(self) -> None:
        """Quit every MPS daemon started here (agent exit, self-fence). They start again with the next share."""
        self.mps.stop_all()
        self._recovering.clear()

    # --- the watcher ---------------------------------------------------------------------------------------------
    def check(self, *, force: bool = False) -> None:
        """One look at every shared GPU, at most every ``check_every`` seconds unless ``force``d."""
        now = self.clock()
        if not force and now < self._next_check:
            return
        self._next_check = now + self.limits.check_every
        clients = self._clients()
        self._stop_overdue(now)
        self._check_faults(clients)
        self._finish_recoveries(clients)
        self._protect(clients, now)
        self._seen = {gpu: {task.key for task in tasks} for gpu, tasks in self._clients().items()}
        self._exits_seen = {key for key, task in self.runner.tasks.items() if task.share and not task.alive}

    def exit_pending(self) -> bool:
        """Whether a share's task has exited non-zero since the last look: its server may have faulted, so the loop
        looks again before it reports that exit."""
        return any(
            task.share is not None
            and task.state is TaskState.EXITED
            and task.exit_code != 0
            and key not in self._exits_seen
            for key, task in self.runner.tasks.items()
        )

    def _clients(self) -> dict[int, list[Task]]:
        found: dict[int, list[Task]] = {gpu: [] for gpu in self.mps.daemons()}
        for task in self.runner.tasks.values():
            if task.share is not None and task.alive and task.gpus:
                found.setdefault(task.gpus[0], []).append(task)
        return found

    def _stop_overdue(self, now: float) -> None:
        for key, when in list(self._stop_at.items()):
            task = self.runner.tasks.get(key)
            if task is None or not task.alive:
                del self._stop_at[key]
            elif now >= when:
                del self._stop_at[key]
                log.warning("stopping evicted task %s (its checkpoint grace is over)", key.wire)
                self.runner.kill(key, self.stop_grace)

    # --- mixed error handling ------------------------------------------------------------------------------------
    def _check_faults(self, clients: dict[int, list[Task]]) -> None:
        for gpu in sorted(self.mps.daemons()):
            if gpu in self._recovering:
                continue
            try:
                fault = self.mps.fault(gpu)
            except MpsError as exc:
                log.warning("cannot ask the MPS daemon of GPU %d for its state: %s", gpu, exc)
                continue
            if fault is not None:
                self._on_fault(fault, clients.get(gpu, []))

    def _on_fault(self, fault: ServerFault, alive: list[Task]) -> None:
        gpu = fault.gpu
        died = [
            task
            for key in self._seen.get(gpu, set())
            if (task := self.runner.tasks.get(key)) is not None and not task.alive and task.mps_fault is None
        ]
        hit = sorted(alive + died, key=lambda task: (not task.share or not task.share.online, task.key))
        log.error(
            "the MPS server of GPU %d faulted (%s): stopping its %d client(s) %s and restarting it",
            gpu,
            fault.detail,
            len(hit),
            ", ".join(task.key.wire for task in hit) or "-",
        )
        self._recovering[gpu] = fault
        for task in hit:
            job = task.key.job
            suspect = any(_in_group(pid, task) for pid in fault.suspects)
            self.fault_counts[job] += 1
            self.suspect_counts[job] += suspect
            online = task.share is not None and task.share.online
            task.mps_fault = {
                "gpu": gpu,
                "detail": fault.detail,
                "action": "restart" if online else "requeue",
                "faults": self.fault_counts[job],
                "suspect": suspect,
                "suspect_faults": self.suspect_counts[job],
            }
            self._stop_at.pop(task.key, None)
            if task.alive:
                self.runner.kill(task.key, self.stop_grace)

    def _finish_recoveries(self, clients: dict[int, list[Task]]) -> None:
        for gpu in sorted(self._recovering):
            if clients.get(gpu):
                continue  # the server recovers only once every client has exited
            try:
                self.mps.restart(gpu)
            except MpsError as exc:
                log.error("cannot restart the MPS daemon of GPU %d (trying again): %s", gpu, exc)
                continue
            del self._recovering[gpu]
            log.warning("restarted the MPS daemon of GPU %d after its fault; it takes shares again", gpu)

    # --- protection ----------------------------------------------------------------------------------------------
    def _protect(self, clients: dict[int, list[Task]], now: float) -> None:
        candidates = {  # GPUs with online work to protect and offline work that could make way
            gpu
            for gpu, tasks in clients.items()
            if gpu not in self._recovering
            and any(t.share and t.share.online for t in tasks)
            and any(t.share and not t.share.online and t.eviction is None for t in tasks)
        }
        samples: dict[int, GpuSample] = {}
        if candidates and self.gate is not None:
            samples = {sample.index: sample for sample in self.gate.peek(self.wall_clock())}
        for gpu, tasks in clients.items():
            online = [task for task in tasks if task.share is not None and task.share.online]
            offline = [task for task in tasks if task.share is not None and not task.share.online]
            waiting = [task for task in offline if task.eviction is None]
            pressure = None
            if gpu in candidates and waiting:
                pressure = self._pressure(samples.get(gpu), online)
            if pressure is None or len(waiting) < len(offline):  # none, or a victim is still on its way out
                self._pressure_since.pop(gpu, None)
                continue
            since = self._pressure_since.setdefault(gpu, now)
            if now - since < self.limits.sustain_seconds:
                continue
            self._pressure_since.pop(gpu, None)
            self._evict(self._victim(waiting, pressure, samples.get(gpu)), gpu, pressure, now)

    def _pressure(self, sample: GpuSample | None, online: list[Task]) -> Pressure | None:
        limits = self.limits
        for task in online:
            assert task.share is not None
            slo = task.share.latency_slo_ms or limits.p99_ms
            if slo is None:
                continue
            p99 = read_latency(task.directory / LATENCY_FILE_NAME, self.wall_clock(), limits.latency_stale_seconds)
            if p99 is not None and p99 > slo:
                return Pressure("latency", f"online job {task.key.job} reports p99 {p99:g} ms, over its {slo:g} ms")
        if sample is None or sample.lost:
            return None
        if limits.memory_percent is not None and sample.mem_used_mb is not None and sample.mem_total_mb:
            used = 100.0 * sample.mem_used_mb / sample.mem_total_mb
            if used >= limits.memory_percent:
                return Pressure("memory", f"GPU memory {used:.0f}% used, limit {limits.memory_percent:g}%")
        if limits.util_percent is not None and sample.gpu_util is not None and sample.gpu_util >= limits.util_percent:
            return Pressure("utilization", f"GPU utilization {sample.gpu_util:g}%, limit {limits.util_percent:g}%")
        return None

    def _victim(self, offline: list[Task], pressure: Pressure, sample: GpuSample | None) -> Task:
        def newest(task: Task) -> float:
            return self._started_at.get(task.key, 0.0)

        if pressure.kind == "memory" and sample is not None:
            return max(offline, key=lambda task: (_memory_mb(task, sample), newest(task)))
        return max(offline, key=newest)

    def _evict(self, task: Task, gpu: int, pressure: Pressure, now: float) -> None:
        reason = EVICTION_REASON.format(gpu=gpu)
        task.eviction = {"gpu": gpu, "reason": reason, "cause": pressure.text}
        log.warning("%s: task %s (%s); SIGUSR1 now, stop in %.1fs", reason, task.key.wire, pressure.text,
                    self.limits.evict_grace)  # fmt: skip
        if self.limits.evict_grace <= 0:
            self.runner.kill(task.key, self.stop_grace)
            return
        self.runner.signal(task.key, CHECKPOINT_SIGNAL)
        self._stop_at[task.key] = now + self.limits.evict_grace


def read_latency(path: Path, now: float, stale_seconds: float) -> float | None:
    """The p99 latency (ms) an online job wrote, or None: no file, not a plain file, older than ``stale_seconds``,
    or not a non-negative number. The job owns its directory, so the file is opened without following a symlink
    and without blocking (a FIFO), and only its first 64 bytes are read."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or now - info.st_mtime > stale_seconds:
            return None
        data = os.read(fd, 64)
    except OSError:
        return None
    finally:
        os.close(fd)
    try:
        value = float(data.split()[0])
    except (ValueError, IndexError):
        return None
    return value if math.isfinite(value) and value >= 0 else None


def _in_group(pid: int, task: Task) -> bool:
    """Whether process ``pid`` is the task's leader or in its process group."""
    if task.pid is None:
        return False
    if pid == task.pid:
        return True
    try:
        return os.getpgid(pid) == task.pid
    except (ProcessLookupError, PermissionError):
        return False


def _memory_mb(task: Task, sample: GpuSample) -> int:
    return sum(mb for pid, mb in sample.processes if _in_group(pid, task))
