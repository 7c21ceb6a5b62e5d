"""Job processes on the node: start each task as its own process group, watch it, stop it, read its log.

The runner keeps the tasks and their life cycle; the rest is beside it, one job each: process groups and exit
detection (:mod:`agent.process_group`), the records that let the next agent, or this one's lease watchdog, kill
what this one left running (:mod:`agent.pid_records`), the account jobs run as (:mod:`agent.job_user`) and
byte-exact log chunks (:mod:`agent.task_log`).

Only the loop thread calls a :class:`Runner`; it is not thread-safe and does not need to be.
"""

from __future__ import annotations

import logging
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from agent.client import LOG_CHUNK_BYTES, StartOrder, TaskKey, TaskState
from agent.job_user import JobUser, identity, job_user, own_home
from agent.pid_records import KILL_WAIT_SECONDS, PidRecord, PidRecords, Sweep
from agent.process_group import leader_exited, signal_group
from agent.share import Share, ShareRefused
from agent.task_log import LOG_NAME, LogChunk, read_chunk

__all__ = ["DEFAULT_PATH", "JobUser", "LogChunk", "Runner", "Task"]

log = logging.getLogger(__name__)

DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


@dataclass(eq=False)
class Task:
    """One task the agent tracks, from start until the portal says ``forget``."""

    key: TaskKey
    directory: Path
    gpus: tuple[int, ...]
    process: subprocess.Popen[bytes] | None = None
    exit_code: int | None = None
    error: str | None = None  # set when the task failed to start; it is then the task's whole log
    term_deadline: float | None = None  # monotonic time after which SIGKILL follows the SIGTERM already sent
    forget_pending: bool = False
    log_fd: int | None = None  # the agent's read descriptor of output.log
    signalled: set[int] = field(default_factory=set)  # advisory signals already delivered (each at most once)
    record: PidRecord | None = None  # its pid record, once written
    share: Share | None = None  # a share of its one GPU under MPS (issue #17); None: whole GPUs
    eviction: Mapping[str, Any] | None = None  # why the agent evicted it (reported), once it has
    mps_fault: Mapping[str, Any] | None = None  # the MPS server fault that hit it (reported), once one has

    @property
    def state(self) -> TaskState:
        if self.error is not None:
            return TaskState.FAILED_TO_START
        return TaskState.RUNNING if self.exit_code is None else TaskState.EXITED

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process is not None else None

    @property
    def log_path(self) -> Path:
        return self.directory / LOG_NAME

    @property
    def alive(self) -> bool:
        return self.state is TaskState.RUNNING


class ShareHooks(Protocol):
    """What the runner asks of the node's MPS sharing (:class:`agent.share_guard.ShareGuard`) for a share's task."""

    def prepare(self, order: StartOrder, directory: Path) -> Mapping[str, str]:
        """The MPS variables of the task's environment, its GPU's daemon started first. ``ShareRefused`` if not."""
        ...

    def started(self, task: Task) -> None: ...

    def ended(self, task: Task) -> None: ...


class Runner:
    """Starts, watches and stops the node's tasks under ``<workdir>/jobs/<job>-<attempt>-<rank>/``.

    ``run_as`` names the account jobs run as (None: the agent's own). It is looked up at every start, so an
    account that disappears later fails that task (``failed_to_start``) instead of the agent.
    ``on_gpus(gpus, busy, pid, memory_limit_mib)`` is told when a task's GPUs become busy or idle, so a simulated
    probe can show utilisation (and a share's memory within its MPS limit). ``shares`` runs the tasks that get a
    share of a GPU (None: such an order is refused).
    """

    def __init__(
        self,
        workdir: Path,
        *,
        run_as: str | None = None,
        on_gpus: Callable[[tuple[int, ...], bool, int | None, int | None], None] | None = None,
        clock: Callable[[], float] = time.monotonic,
        shares: ShareHooks | None = None,
    ) -> None:
        self.workdir = workdir
        self.shares = shares
        self.jobs_dir = workdir / "jobs"
        # Pid records live outside the job directories: a job can write its own directory, and must not be able
        # to point the agent's next start-up at someone else's process.
        self.run_dir = workdir / "run"
        self.pid_records = PidRecords(self.run_dir, clock=clock)
        self.run_as = run_as
        self.on_gpus = on_gpus
        self.clock = clock
        self.tasks: dict[TaskKey, Task] = {}
        #: Records of exited tasks whose group still had a process when the leader was reaped; removed once it is gone.
        self._lingering: list[PidRecord] = []
        #: Leaders of dropped tasks not yet reaped (they were SIGKILLed, and are reaped as soon as they are zombies).
        self._stragglers: list[subprocess.Popen[bytes]] = []

    # --- starting ----------------------------------------------------------------------------------------------
    def task_env(self, order: StartOrder, home: str) -> dict[str, str]:
        """A minimal environment plus the portal's: nothing of the agent's own (tokens, proxies) leaks into jobs.

        ``CUDA_DEVICE_ORDER=PCI_BUS_ID`` makes CUDA number GPUs the way NVML does, so the indices the portal
        hands out in ``CUDA_VISIBLE_DEVICES`` name the GPUs the agent registered. ``CUDA_VISIBLE_DEVICES`` and
        ``CORRAL_JOB_ID`` are filled in from the order if the portal left them out, so a CPU-only task
        (``gpus=[]``) sees no GPU rather than all of them.
        """
        env = {
            "PATH": os.environ.get("PATH") or DEFAULT_PATH,
            "HOME": home,
            "LANG": os.environ.get("LANG") or "C.UTF-8",
            "CUDA_DEVICE_ORDER": "PCI_BUS_ID",
            "PYTHONUNBUFFERED": "1",  # so a Python job's log reaches the portal while it runs, not at exit
        }
        env.update(order.env)
        env.setdefault("CUDA_VISIBLE_DEVICES", ",".join(str(gpu) for gpu in order.gpus))
        env.setdefault("CORRAL_JOB_ID", str(order.key.job))
        return env

    def start(self, order: StartOrder) -> Task:
        """Start a task, or return the one already tracked under that key (``start`` is repeated by the portal).

        Never raises for a problem of the task itself: the task is then ``failed_to_start`` with the reason.
        """
        existing = self.tasks.get(order.key)
        if existing is not None:
            return existing
        key = order.key
        task = Task(key=key, directory=self.jobs_dir / f"{key.job}-{key.attempt}-{key.rank}", gpus=order.gpus)
        task.share = order.share
        self.tasks[key] = task
        argv = ["/bin/sh", "-c", order.command] if isinstance(order.command, str) else list(order.command)
        try:
            if order.share_error is not None:
                raise ShareRefused(order.share_error)
            user = job_user(self.run_as)
            self._prepare_directory(task.directory, user)
            env = self.task_env(order, user.home if user else own_home())
            if order.share is not None:
                if self.shares is None:
                    raise ShareRefused("this node runs no shared GPUs")
                env.update(self.shares.prepare(order, task.directory))  # after the portal's: these must win
            flags = os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC | os.O_NOFOLLOW
            fd = os.open(task.log_path, os.O_WRONLY | flags, 0o640)
            # The agent reads the log through its own descriptor, opened before the job runs: the job owns its
            # directory and could swap output.log for a symlink to a root-only file, which a root agent reading
            # by path would then ship to the portal.
            task.log_fd = os.open(task.log_path, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW)
            try:
                task.process = subprocess.Popen(  # noqa: S603 - running user jobs is this module's purpose
                    argv,
                    cwd=task.directory,
                    stdin=subprocess.DEVNULL,
                    stdout=fd,
                    stderr=subprocess.STDOUT,
                    env=env,
                    start_new_session=True,
                    close_fds=True,
                    **identity(user),
                )
            finally:
                os.close(fd)
        except (OSError, subprocess.SubprocessError, ValueError, LookupError, ShareRefused) as exc:
            _close_log(task)
            task.error = f"corral-agent: cannot start task {key.wire}: {exc}\n"
            log.error("task %s failed to start: %s", key.wire, exc)
            return task
        assert task.process is not None  # started above; a failure to start has returned
        task.record = self.pid_records.write(key, task.process.pid)
        log.info("started task %s as pid %d on GPUs %s", key.wire, task.pid, list(order.gpus))
        self._notify_gpus(task, busy=True)
        return task

    @staticmethod
    def _prepare_directory(directory: Path, user: JobUser | None) -> None:
        directory.mkdir(parents=True, exist_ok=True, mode=0o700)
        if user is not None:
            os.chown(directory, user.uid, user.gid)

    # --- watching ----------------------------------------------------------------------------------------------
    def poll(self) -> list[Task]:
        """Reap tasks that exited and escalate terminations past their grace. Returns the tasks that just ended."""
        self._reap_leftovers()
        ended: list[Task] = []
        now = self.clock()
        for task in list(self.tasks.values()):
            if not task.alive or task.process is None:
                continue
            if leader_exited(task.process):
                self._finish(task)
                ended.append(task)
            elif task.term_deadline is not None and now >= task.term_deadline:
                log.warning("task %s outlived its grace period; sending SIGKILL", task.key.wire)
                signal_group(task.process.pid, signal.SIGKILL)
                task.term_deadline = None
        for task in ended:
            if task.forget_pending:
                self._drop(task)
        return ended

    def _reap_leftovers(self) -> None:
        self._stragglers = [process for process in self._stragglers if process.poll() is None]
        lingering = []
        for record in self._lingering:
            if record.group_alive():
                lingering.append(record)
            else:
                record.path.unlink(missing_ok=True)
        self._lingering = lingering

    def _finish(self, task: Task) -> None:
        assert task.process is not None
        # The leader is a zombie now, so its pid (= the group id) is still reserved: clean up the rest of the group.
        signal_group(task.process.pid, signal.SIGKILL)
        task.exit_code = task.process.wait()
        task.term_deadline = None
        # The record goes only once the whole group is gone: until then a sweep or the watchdog must still find it.
        if task.record is not None and task.record.group_alive():
            self._lingering.append(task.record)
        else:
            self.pid_records.remove(task.key)
        log.info("task %s exited with %d", task.key.wire, task.exit_code)
        self._notify_gpus(task, busy=False)

    # --- stopping ----------------------------------------------------------------------------------------------
    def kill(self, key: TaskKey, grace: float) -> None:
        """SIGTERM the task's group now, SIGKILL it once ``grace`` seconds have passed (checked by :meth:`poll`).
        A grace of 0 (or less) sends SIGKILL at once, without SIGTERM: the job gets no chance to run on."""
        task = self.tasks.get(key)
        if task is None or not task.alive or task.process is None:
            return
        if grace <= 0:
            log.info("killing task %s (SIGKILL, no grace)", key.wire)
            signal_group(task.process.pid, signal.SIGKILL)
            task.term_deadline = None
            return
        deadline = self.clock() + grace
        if task.term_deadline is None:
            log.info("terminating task %s (grace %.1fs)", key.wire, grace)
            signal_group(task.process.pid, signal.SIGTERM)
            task.term_deadline = deadline
        else:
            task.term_deadline = min(task.term_deadline, deadline)

    def signal(self, key: TaskKey, signum: signal.Signals) -> bool:
        """Send an advisory signal to the task's group, at most once per task and signal, so a portal may repeat
        the order (to survive a lost response) without a job checkpointing over and over. True if sent now."""
        task = self.tasks.get(key)
        if task is None or not task.alive or task.process is None or signum in task.signalled:
            return False
        task.signalled.add(signum)
        log.info("sending %s to task %s", signum.name, key.wire)
        signal_group(task.process.pid, signum)
        return True

    def forget(self, key: TaskKey, grace: float) -> None:
        """Drop a finished task. A task still running is terminated first and dropped once it exits."""
        task = self.tasks.get(key)
        if task is None:
            return
        if task.alive:
            log.warning("portal forgot task %s while it runs; terminating it", key.wire)
            task.forget_pending = True
            self.kill(key, grace)
        else:
            self._drop(task)

    def kill_all_now(self) -> None:
        """SIGKILL every running task's group at once, without SIGTERM and without waiting (see :meth:`kill_orphans`
        for the wait)."""
        for task in self.tasks.values():
            if task.alive and task.process is not None:
                signal_group(task.process.pid, signal.SIGKILL)
                task.term_deadline = None

    def _drop(self, task: Task) -> None:
        self.tasks.pop(task.key, None)
        _close_log(task)
        if task.process is not None and task.exit_code is None:
            self._stragglers.append(task.process)  # reaped by poll once it has died
            self._notify_gpus(task, busy=False)

    def drop_all(self) -> None:
        """Forget every task (after :meth:`kill_all_now`, when the portal has requeued them all). Their pid records
        stay until their groups are gone (:meth:`kill_orphans` waits for that)."""
        for task in list(self.tasks.values()):
            self._drop(task)

    def terminate_all(self, grace: float, *, poll_every: float = 0.05) -> None:
        """SIGTERM every running task, SIGKILL what is left after ``grace``, and reap them all (blocking)."""
        for task in list(self.tasks.values()):
            self.kill(task.key, grace)
        give_up = self.clock() + grace + 5.0  # SIGKILL cannot be ignored; 5 s covers a zombie's last flush
        while any(task.alive for task in self.tasks.values()) and self.clock() < give_up:
            self.poll()
            time.sleep(poll_every)
        self.poll()

    # --- logs --------------------------------------------------------------------------------------------------
    def read_log(self, task: Task, offset: int, limit: int = LOG_CHUNK_BYTES) -> LogChunk:
        """Up to ``limit`` bytes of the task's log from ``offset``, as text that re-encodes to the same length."""
        return read_chunk(task.log_fd, offset, limit, error=task.error, growing=task.alive)

    # --- housekeeping ------------------------------------------------------------------------------------------
    def prune(self, retention_seconds: float) -> int:
        """Delete job directories untouched for ``retention_seconds`` that no tracked task uses. Returns a count."""
        in_use = {task.directory for task in self.tasks.values()}
        cutoff = time.time() - retention_seconds
        removed = 0
        for directory in _subdirectories(self.jobs_dir):
            if directory in in_use:
                continue
            try:
                newest = max(entry.stat().st_mtime for entry in (directory, *directory.iterdir()))
            except OSError:
                continue
            if newest < cutoff:
                shutil.rmtree(directory, ignore_errors=True)
                removed += 1
        return removed

    def kill_orphans(self, wait: float = KILL_WAIT_SECONDS) -> Sweep:
        """SIGKILL every process group the pid records name that is not a running task of this runner: jobs a
        previous agent on this workdir left behind (it crashed or was SIGKILLed) and tasks this runner has dropped.
        Waits up to ``wait`` seconds for each to be gone (:meth:`~agent.pid_records.PidRecords.kill_orphans`)."""
        keep = {key for key, task in self.tasks.items() if task.alive}
        return self.pid_records.kill_orphans(wait=wait, keep=keep, reap=self._reap_leftovers)

    def _notify_gpus(self, task: Task, *, busy: bool) -> None:
        if task.share is not None and self.shares is not None:
            try:
                (self.shares.started if busy else self.shares.ended)(task)
            except Exception:  # the share's bookkeeping must never break job control
                log.exception("MPS client hook failed")
        if self.on_gpus is not None and task.gpus:
            try:
                limit = task.share.memory_limit_mib if task.share is not None else None
                self.on_gpus(task.gpus, busy, task.pid, limit)
            except Exception:  # telemetry garnish must never break job control
                log.exception("GPU activity hook failed")


def _close_log(task: Task) -> None:
    if task.log_fd is not None:
        os.close(task.log_fd)
        task.log_fd = None


def _subdirectories(path: Path) -> Iterator[Path]:
    try:
        yield from (entry for entry in path.iterdir() if entry.is_dir() and not entry.is_symlink())
    except OSError:
        return
