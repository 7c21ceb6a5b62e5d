"""Job processes on the node: start each task as its own process group, watch it, stop it, read its log.

Why a process group: a job is rarely one process (``torchrun`` forks a worker per GPU, shells fork pipelines).
``start_new_session=True`` makes the task's first process the leader of a new session and group, so one
``killpg`` reaches every descendant that did not deliberately escape, and a Ctrl-C on the agent's terminal does
not reach the jobs directly (the agent decides how they stop).

Exits are detected with ``waitid(..., WNOWAIT)``: the leader stays a zombie until the rest of its group has been
sent SIGKILL, so the group id cannot be recycled while we still signal it, and no stray child keeps holding the
GPUs after the job "exited".

Only the loop thread calls a :class:`Runner`; it is not thread-safe and does not need to be.
"""

from __future__ import annotations

import json
import logging
import os
import pwd
import shutil
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypedDict

from agent.client import LOG_CHUNK_BYTES, StartOrder, TaskKey, TaskState

log = logging.getLogger(__name__)

DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
LOG_NAME = "output.log"

#: Invalid UTF-8 bytes (decoded as surrogates) and NULs become "?", one byte for one byte, so the text we send
#: re-encodes to exactly as many bytes as we read and the portal's byte offsets stay right (see the protocol).
_SANITISE = {code: "?" for code in range(0xDC80, 0xDD00)} | {0: "?"}


@dataclass(frozen=True, slots=True)
class JobUser:
    """The account jobs run as when the agent runs as root (``--run-as``)."""

    name: str
    uid: int
    gid: int
    groups: tuple[int, ...]
    home: str

    @classmethod
    def lookup(cls, name: str) -> JobUser:
        """Resolve a user name; ``KeyError`` if there is no such user."""
        entry = pwd.getpwnam(name)
        return cls(
            name=entry.pw_name,
            uid=entry.pw_uid,
            gid=entry.pw_gid,
            groups=tuple(os.getgrouplist(entry.pw_name, entry.pw_gid)),
            home=entry.pw_dir,
        )


@dataclass(frozen=True, slots=True)
class LogChunk:
    """Log bytes ``[offset, offset + len(text.encode()))`` of a task, and the size of its whole log."""

    offset: int
    text: str
    size: int


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


class Runner:
    """Starts, watches and stops the node's tasks under ``<workdir>/jobs/<job>-<attempt>-<rank>/``.

    ``run_as`` names the account jobs run as (None: the agent's own). It is looked up at every start, so an
    account that disappears later fails that task (``failed_to_start``) instead of the agent.
    ``on_gpus(gpus, busy, pid)`` is told when a task's GPUs become busy or idle, so a simulated probe can show
    utilisation.
    """

    def __init__(
        self,
        workdir: Path,
        *,
        run_as: str | None = None,
        on_gpus: Callable[[tuple[int, ...], bool, int | None], None] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.workdir = workdir
        self.jobs_dir = workdir / "jobs"
        # Pid records live outside the job directories: a job can write its own directory, and must not be able
        # to point the agent's next start-up at someone else's process.
        self.run_dir = workdir / "run"
        self.run_as = run_as
        self.on_gpus = on_gpus
        self.clock = clock
        self.tasks: dict[TaskKey, Task] = {}

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
        self.tasks[key] = task
        argv = ["/bin/sh", "-c", order.command] if isinstance(order.command, str) else list(order.command)
        try:
            user = self._job_user()
            self._prepare_directory(task.directory, user)
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
                    env=self.task_env(order, user.home if user else _own_home()),
                    start_new_session=True,
                    close_fds=True,
                    **_identity(user),
                )
            finally:
                os.close(fd)
        except (OSError, subprocess.SubprocessError, ValueError, LookupError) as exc:
            _close_log(task)
            task.error = f"corral-agent: cannot start task {key.wire}: {exc}\n"
            log.error("task %s failed to start: %s", key.wire, exc)
            return task
        self._write_pid_record(task)
        log.info("started task %s as pid %d on GPUs %s", key.wire, task.pid, list(order.gpus))
        self._notify_gpus(task, busy=True)
        return task

    def _job_user(self) -> JobUser | None:
        """The account to switch to, or None when jobs run as the agent's own user."""
        if self.run_as is None:
            return None
        try:
            user = JobUser.lookup(self.run_as)
        except KeyError:
            raise LookupError(f"no such user {self.run_as!r}") from None
        return None if user.uid == os.geteuid() else user

    @staticmethod
    def _prepare_directory(directory: Path, user: JobUser | None) -> None:
        directory.mkdir(parents=True, exist_ok=True, mode=0o700)
        if user is not None:
            os.chown(directory, user.uid, user.gid)

    # --- watching ----------------------------------------------------------------------------------------------
    def poll(self) -> list[Task]:
        """Reap tasks that exited and escalate terminations past their grace. Returns the tasks that just ended."""
        ended: list[Task] = []
        now = self.clock()
        for task in list(self.tasks.values()):
            if not task.alive or task.process is None:
                continue
            if self._leader_exited(task.process):
                self._finish(task)
                ended.append(task)
            elif task.term_deadline is not None and now >= task.term_deadline:
                log.warning("task %s outlived its grace period; sending SIGKILL", task.key.wire)
                _signal_group(task.process.pid, signal.SIGKILL)
                task.term_deadline = None
        for task in ended:
            if task.forget_pending:
                self._drop(task)
        return ended

    @staticmethod
    def _leader_exited(process: subprocess.Popen[bytes]) -> bool:
        try:
            return os.waitid(os.P_PID, process.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None
        except ChildProcessError:
            return process.poll() is not None

    def _finish(self, task: Task) -> None:
        assert task.process is not None
        # The leader is a zombie now, so its pid (= the group id) is still reserved: clean up the rest of the group.
        _signal_group(task.process.pid, signal.SIGKILL)
        task.exit_code = task.process.wait()
        task.term_deadline = None
        self._remove_pid_record(task)
        log.info("task %s exited with %d", task.key.wire, task.exit_code)
        self._notify_gpus(task, busy=False)

    # --- stopping ----------------------------------------------------------------------------------------------
    def kill(self, key: TaskKey, grace: float) -> None:
        """SIGTERM the task's group now, SIGKILL it once ``grace`` seconds have passed (checked by :meth:`poll`)."""
        task = self.tasks.get(key)
        if task is None or not task.alive or task.process is None:
            return
        deadline = self.clock() + max(0.0, grace)
        if task.term_deadline is None:
            log.info("terminating task %s (grace %.1fs)", key.wire, grace)
            _signal_group(task.process.pid, signal.SIGTERM)
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
        _signal_group(task.process.pid, signum)
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

    def _drop(self, task: Task) -> None:
        self.tasks.pop(task.key, None)
        _close_log(task)

    def drop_all(self) -> None:
        """Forget every task (after :meth:`terminate_all`, when the portal has requeued them all)."""
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
        if task.error is not None:
            data = task.error.encode()
            size, chunk = len(data), data[offset : offset + limit]
        else:
            try:
                size = os.fstat(task.log_fd).st_size if task.log_fd is not None else 0
                chunk = os.pread(task.log_fd, limit, offset) if task.log_fd is not None and offset < size else b""
            except OSError:
                size, chunk = 0, b""
        if task.alive or len(chunk) == limit:
            chunk = _trim_partial_utf8(chunk)
        text = chunk.decode("utf-8", errors="surrogateescape").translate(_SANITISE)
        return LogChunk(offset=offset, text=text, size=size)

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

    def kill_orphans(self, grace: float) -> int:
        """Stop jobs a previous agent on this workdir left running (it crashed or was SIGKILLed).

        A fresh registration makes the portal requeue every task it believed ran here, so such leftovers would
        only hold GPUs that the portal now hands to someone else. A pid record is trusted only if the process
        with that pid still has the recorded start time, so a recycled pid is never signalled.
        """
        groups: list[int] = []
        for record in sorted(self.run_dir.glob("*.json")) if self.run_dir.is_dir() else []:
            try:
                data = json.loads(record.read_text())
                pid, started = int(data["pid"]), int(data["start_ticks"])
            except (OSError, ValueError, KeyError, TypeError):
                record.unlink(missing_ok=True)
                continue
            if _start_ticks(pid) == started:
                log.warning("killing process group %d left behind by a previous agent (%s)", pid, record.stem)
                _signal_group(pid, signal.SIGTERM)
                groups.append(pid)
            record.unlink(missing_ok=True)
        signalled = len(groups)
        deadline = self.clock() + grace
        while groups and self.clock() < deadline:
            groups = [pgid for pgid in groups if _group_exists(pgid)]
            time.sleep(0.05)
        for pgid in groups:
            _signal_group(pgid, signal.SIGKILL)
        return signalled

    def _write_pid_record(self, task: Task) -> None:
        assert task.process is not None
        ticks = _start_ticks(task.process.pid)
        if ticks is None:
            return  # no /proc: orphans cannot be identified safely, so none are recorded
        try:
            self.run_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
            record = {"pid": task.process.pid, "start_ticks": ticks}
            (self.run_dir / f"{task.key.job}-{task.key.attempt}-{task.key.rank}.json").write_text(json.dumps(record))
        except OSError as exc:
            log.warning("cannot record pid of task %s: %s", task.key.wire, exc)

    def _remove_pid_record(self, task: Task) -> None:
        (self.run_dir / f"{task.key.job}-{task.key.attempt}-{task.key.rank}.json").unlink(missing_ok=True)

    def _notify_gpus(self, task: Task, *, busy: bool) -> None:
        if self.on_gpus is not None and task.gpus:
            try:
                self.on_gpus(task.gpus, busy, task.pid)
            except Exception:  # telemetry garnish must never break job control
                log.exception("GPU activity hook failed")


def _close_log(task: Task) -> None:
    if task.log_fd is not None:
        os.close(task.log_fd)
        task.log_fd = None


class _Identity(TypedDict, total=False):
    """The :class:`subprocess.Popen` keyword arguments that :func:`_identity` may set (typed for the call)."""

    user: int
    group: int
    extra_groups: list[int]


def _identity(user: JobUser | None) -> _Identity:
    """Popen arguments that drop root: user, primary group and *only* that user's supplementary groups (root's
    own supplementary groups would otherwise survive the switch)."""
    if user is None:
        return {}
    return {"user": user.uid, "group": user.gid, "extra_groups": list(user.groups)}


def _own_home() -> str:
    try:
        return pwd.getpwuid(os.geteuid()).pw_dir
    except KeyError:
        return os.environ.get("HOME", "/")


def _signal_group(pgid: int, signum: signal.Signals) -> None:
    try:
        os.killpg(pgid, signum)
    except (ProcessLookupError, PermissionError):
        pass  # the group is already gone


def _group_exists(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _start_ticks(pid: int) -> int | None:
    """Field 22 of ``/proc/<pid>/stat``: when the process started, in clock ticks since boot (Linux only)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # The command name (field 2) may contain spaces and parentheses; everything after the last ")" is fixed.
    fields = stat[stat.rfind(")") + 2 :].split()
    try:
        return int(fields[19])
    except (IndexError, ValueError):
        return None


def _trim_partial_utf8(chunk: bytes) -> bytes:
    """Cut an incomplete multi-byte character off the end; it is sent whole with the next chunk."""
    for back in range(1, min(4, len(chunk)) + 1):
        byte = chunk[-back]
        if byte & 0xC0 != 0x80:  # a lead byte (or ASCII): how long should its sequence be?
            need = 2 if byte & 0xE0 == 0xC0 else 3 if byte & 0xF0 == 0xE0 else 4 if byte & 0xF8 == 0xF0 else 1
            return chunk[:-back] if need > back else chunk
    return chunk


def _subdirectories(path: Path) -> Iterator[Path]:
    try:
        yield from (entry for entry in path.iterdir() if entry.is_dir() and not entry.is_symlink())
    except OSError:
        return
