"""Pid records: which process groups an agent started, kept on disk so that a dead agent's jobs can still be killed.

An agent that crashed or was SIGKILLed leaves its jobs running. A fresh registration makes the portal requeue
every task it believed ran here, so such leftovers would run twice (here and wherever the portal sends them next)
and hold GPUs the portal wants to hand to someone else. Each record is the leader's pid and start time
(:func:`~agent.process_group.start_ticks`); a record is trusted only if the process with that pid still has the
recorded start time, so a recycled pid is never signalled. Each record also names the agent that wrote it
(:class:`AgentId`), so the watchdog of an agent (:mod:`agent.watchdog`) touches that agent's jobs and no other's.

Two readers act on them: the agent itself before every registration (:meth:`PidRecords.kill_orphans`: whatever a
record names from before the registration is SIGKILLed, and the agent registers ``clean`` only once every such
group is gone), and the watchdog once its agent's lease has run out.

The records live outside the job directories (``<workdir>/run/``): a job can write its own directory, and must not
be able to point the agent's next start-up at someone else's process.
"""

from __future__ import annotations

import json
import logging
import os
import re
import signal
import time
from collections.abc import Callable, Collection
from dataclasses import dataclass
from pathlib import Path

from agent.client import TaskKey
from agent.process_group import group_exists, signal_group, start_ticks

log = logging.getLogger(__name__)

#: How long the agent waits for SIGKILLed process groups to vanish before it gives up and registers unclean. A
#: process leaves only once the kernel lets it: one stuck in uninterruptible sleep (state D, e.g. on a dead NFS
#: server or a wedged driver) may outlive SIGKILL indefinitely.
KILL_WAIT_SECONDS = 10.0

_RECORD_NAME = re.compile(r"^(\d+)-(\d+)-(\d+)\.json$")


@dataclass(frozen=True, slots=True)
class AgentId:
    """One agent process for good: its pid and its start time (a recycled pid has another)."""

    pid: int
    start_ticks: int | None  # None without /proc

    @classmethod
    def current(cls) -> AgentId:
        pid = os.getpid()
        return cls(pid, start_ticks(pid))


@dataclass(frozen=True, slots=True)
class PidRecord:
    """One task's process group as recorded on disk, and the agent that started it."""

    key: TaskKey
    path: Path
    pid: int
    start_ticks: int
    agent: AgentId | None  # None: written by an agent that did not record itself

    def group_alive(self) -> bool:
        """Whether the group this record names still has a live process.

        The leader's pid is the group id. While the leader exists (a zombie too), its start time tells it from a
        recycled pid. Once it has been reaped the kernel does not hand the number out again while any process of
        the group is left, so a live group with that id is still this one: the children a leader left behind are
        found too.
        """
        ticks = start_ticks(self.pid)
        if ticks is not None and ticks != self.start_ticks:
            return False  # the pid names another process now, so the group that had this id is gone
        return group_exists(self.pid)

    def kill(self) -> bool:
        """SIGKILL the group if it is still this record's. True if it was signalled."""
        if not self.group_alive():
            return False
        signal_group(self.pid, signal.SIGKILL)
        return True


@dataclass(frozen=True, slots=True)
class Sweep:
    """What :meth:`PidRecords.kill_orphans` did: the groups it killed, and those still alive when it stopped
    waiting."""

    killed: tuple[int, ...]
    survivors: tuple[int, ...]
    verifiable: bool  # False without /proc: nothing is recorded, so leftovers can be neither found nor ruled out

    @property
    def clean(self) -> bool:
        """Whether no process group of a recorded task is confirmed alive (the ``clean`` of a registration)."""
        return self.verifiable and not self.survivors


class PidRecords:
    """The records under ``run_dir``, one JSON file per task (``<job>-<attempt>-<rank>.json``), written by
    ``agent`` (this process unless told otherwise)."""

    def __init__(
        self, run_dir: Path, *, agent: AgentId | None = None, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.run_dir = run_dir
        self.agent = agent or AgentId.current()
        self.clock = clock

    @property
    def supported(self) -> bool:
        """Whether records can be written here (Linux ``/proc`` gives start times)."""
        return self.agent.start_ticks is not None

    def write(self, key: TaskKey, pid: int) -> PidRecord | None:
        """Record task ``key``'s leader ``pid``; without ``/proc`` nothing is recorded (orphans could not be told
        apart from recycled pids), and a failure to write is logged, not raised: the task runs either way.

        The file is replaced whole (written aside, then renamed), so a watchdog never reads half a record.
        """
        ticks = start_ticks(pid)
        if ticks is None:
            return None  # no /proc (or the leader is already gone and reaped): nothing can be identified safely
        record = PidRecord(key, self._path(key), pid, ticks, self.agent)
        body = {
            "pid": pid,
            "start_ticks": ticks,
            "agent_pid": self.agent.pid,
            "agent_start_ticks": self.agent.start_ticks,
        }
        try:
            self.run_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
            aside = self.run_dir / f".{record.path.name}.tmp"
            aside.write_text(json.dumps(body))
            aside.replace(record.path)
        except OSError as exc:
            log.warning("cannot record pid of task %s: %s", key.wire, exc)
            return None
        return record

    def remove(self, key: TaskKey) -> None:
        """Forget task ``key``'s record (its group is gone)."""
        self._path(key).unlink(missing_ok=True)

    def read(self, *, agent: AgentId | None = None) -> list[PidRecord]:
        """The records on disk (of ``agent`` only, if given), in file-name order. Unreadable ones are skipped."""
        return [record for record in self._scan()[0] if agent is None or record.agent == agent]

    def kill_orphans(
        self,
        *,
        wait: float = KILL_WAIT_SECONDS,
        keep: Collection[TaskKey] = (),
        reap: Callable[[], None] | None = None,
    ) -> Sweep:
        """SIGKILL at once every group a record names (whoever wrote it), except the tasks in ``keep`` (the ones
        the caller still runs), and wait up to ``wait`` seconds until each is gone. A record is removed once its
        group is gone; the records of survivors stay, so the next sweep tries them again.

        No SIGTERM first: these tasks have been requeued by the portal (or are about to be), so they are stale
        duplicates, and the portal frees their GPUs only once the agent vouches that they are gone. ``reap`` is
        called while waiting (the runner reaps its own dropped children there).
        """
        records, unreadable = self._scan()
        for path in unreadable:
            path.unlink(missing_ok=True)
        pending: list[PidRecord] = []
        for record in records:
            if record.key in keep:
                continue
            if record.kill():
                log.warning("SIGKILLed process group %d of task %s, which ran here before", record.pid, record.key.wire)
                pending.append(record)
            else:
                record.path.unlink(missing_ok=True)
        killed = tuple(record.pid for record in pending)
        deadline = self.clock() + wait
        while True:
            if reap is not None:
                reap()
            still = []
            for record in pending:
                if record.kill():  # again: a member may have been forking when the first SIGKILL went out
                    still.append(record)
                else:
                    record.path.unlink(missing_ok=True)
            pending = still
            if not pending or self.clock() >= deadline:
                break
            time.sleep(0.05)
        return Sweep(killed, tuple(record.pid for record in pending), self.supported)

    def _scan(self) -> tuple[list[PidRecord], list[Path]]:
        records: list[PidRecord] = []
        unreadable: list[Path] = []
        try:
            paths = sorted(self.run_dir.iterdir())
        except OSError:
            return records, unreadable
        for path in paths:
            match = _RECORD_NAME.match(path.name)
            if match is None:
                continue
            try:
                data = json.loads(path.read_text())
                owner = data.get("agent_pid")
                agent = None if owner is None else AgentId(int(owner), _optional_int(data.get("agent_start_ticks")))
                key = TaskKey(*(int(part) for part in match.groups()))
                records.append(PidRecord(key, path, int(data["pid"]), int(data["start_ticks"]), agent))
            except FileNotFoundError:
                continue  # removed while we looked
            except (OSError, ValueError, KeyError, TypeError, AttributeError):
                unreadable.append(path)
        return records, unreadable

    def _path(self, key: TaskKey) -> Path:
        return self.run_dir / f"{key.job}-{key.attempt}-{key.rank}.json"


def _optional_int(value: object) -> int | None:
    if value is None:
        return None
    if isinstance(value, int | str):
        return int(value)
    raise TypeError(f"expected an integer, got {value!r}")
