"""Pid records: which process groups this agent started, kept on disk so that the next agent can stop them.

An agent that crashed or was SIGKILLed leaves its jobs running. A fresh registration makes the portal requeue
every task it believed ran here, so such leftovers would only hold GPUs that the portal now hands to someone
else. Each record is the leader's pid and start time (:func:`~agent.process_group.start_ticks`); a record is
trusted only if the process with that pid still has the recorded start time, so a recycled pid is never signalled.

The records live outside the job directories (``<workdir>/run/``): a job can write its own directory, and must not
be able to point the agent's next start-up at someone else's process.
"""

from __future__ import annotations

import json
import logging
import signal
import time
from collections.abc import Callable
from pathlib import Path

from agent.client import TaskKey
from agent.process_group import group_exists, signal_group, start_ticks

log = logging.getLogger(__name__)


class PidRecords:
    """The records under ``run_dir``, one JSON file per task (``<job>-<attempt>-<rank>.json``)."""

    def __init__(self, run_dir: Path, *, clock: Callable[[], float] = time.monotonic) -> None:
        self.run_dir = run_dir
        self.clock = clock

    def write(self, key: TaskKey, pid: int) -> None:
        """Record task ``key``'s leader ``pid``; without ``/proc`` nothing is recorded (orphans could not be told
        apart from recycled pids), and a failure to write is logged, not raised: the task runs either way."""
        ticks = start_ticks(pid)
        if ticks is None:
            return  # no /proc: orphans cannot be identified safely, so none are recorded
        try:
            self.run_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
            self._path(key).write_text(json.dumps({"pid": pid, "start_ticks": ticks}))
        except OSError as exc:
            log.warning("cannot record pid of task %s: %s", key.wire, exc)

    def remove(self, key: TaskKey) -> None:
        """Forget task ``key``'s record (its group has been reaped)."""
        self._path(key).unlink(missing_ok=True)

    def kill_orphans(self, grace: float) -> int:
        """SIGTERM every group a record still names, SIGKILL what is left after ``grace``; remove every record.
        Returns how many groups were signalled."""
        groups: list[int] = []
        for record in sorted(self.run_dir.glob("*.json")) if self.run_dir.is_dir() else []:
            try:
                data = json.loads(record.read_text())
                pid, started = int(data["pid"]), int(data["start_ticks"])
            except (OSError, ValueError, KeyError, TypeError):
                record.unlink(missing_ok=True)
                continue
            if start_ticks(pid) == started:
                log.warning("killing process group %d left behind by a previous agent (%s)", pid, record.stem)
                signal_group(pid, signal.SIGTERM)
                groups.append(pid)
            record.unlink(missing_ok=True)
        signalled = len(groups)
        deadline = self.clock() + grace
        while groups and self.clock() < deadline:
            groups = [pgid for pgid in groups if group_exists(pgid)]
            time.sleep(0.05)
        for pgid in groups:
            signal_group(pgid, signal.SIGKILL)
        return signalled

    def _path(self, key: TaskKey) -> Path:
        return self.run_dir / f"{key.job}-{key.attempt}-{key.rank}.json"
