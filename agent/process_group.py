"""A task's processes as one group: signal it, tell whether it is gone, tell when its leader exited.

Why a process group: a job is rarely one process (``torchrun`` forks a worker per GPU, shells fork pipelines).
The runner starts each task with ``start_new_session=True``, which makes its first process the leader of a new
session and group, so one ``killpg`` reaches every descendant that did not deliberately escape, and a Ctrl-C on the
agent's terminal does not reach the jobs directly (the agent decides how they stop).

Exits are detected with ``waitid(..., WNOWAIT)``: the leader stays a zombie until the rest of its group has been
sent SIGKILL, so the group id cannot be recycled while we still signal it, and no stray child keeps holding the
GPUs after the job "exited".
"""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path


def signal_group(pgid: int, signum: signal.Signals) -> None:
    """Send ``signum`` to every process of group ``pgid``; a group already gone is not an error."""
    try:
        os.killpg(pgid, signum)
    except (ProcessLookupError, PermissionError):
        pass  # the group is already gone


def group_exists(pgid: int) -> bool:
    """Whether any live process of group ``pgid`` is left (one we may not signal counts: it exists).

    Zombies do not count: a process that has died holds no GPU memory and no file, only a process-table slot until
    its parent reaps it, and that parent may be an agent that is stopped or an init that never reaps. Without
    ``/proc`` a group the kernel still knows counts as alive (the safe answer).
    """
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    return _live_member(pgid)


def _live_member(pgid: int) -> bool:
    """Whether ``/proc`` shows a process of group ``pgid`` that is not a zombie (True if ``/proc`` cannot say)."""
    try:
        entries = [entry for entry in os.scandir("/proc") if entry.name.isdigit()]
    except OSError:
        return True
    for entry in entries:
        try:
            stat = Path(entry.path, "stat").read_text()
        except OSError:
            continue  # it exited while we looked
        fields = stat[stat.rfind(")") + 2 :].split()  # state, ppid, pgrp, ...
        if len(fields) < 3 or fields[2] != str(pgid):
            continue
        if fields[0] not in ("Z", "X"):
            return True
        try:  # a zombie leader whose other threads still run is alive
            if len(os.listdir(Path(entry.path, "task"))) > 1:
                return True
        except OSError:
            continue
    return False


def leader_exited(process: subprocess.Popen[bytes]) -> bool:
    """Whether the group's leader has exited, without reaping it (its pid, the group id, stays reserved)."""
    try:
        return os.waitid(os.P_PID, process.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None
    except ChildProcessError:
        return process.poll() is not None


def start_ticks(pid: int) -> int | None:
    """Field 22 of ``/proc/<pid>/stat``: when the process started, in clock ticks since boot (Linux only).

    With the pid it names one process for good: a recycled pid has another start time.
    """
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
