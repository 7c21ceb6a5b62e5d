"""The lease watchdog: a separate process that kills an agent's jobs once the agent's lease has run out.

The portal grants the agent a lease at registration (``lease_seconds``, about two thirds of its node timeout). An
agent that has had no successful heartbeat for that long, counted from when the last one was *sent*, must take
itself for dead: the portal is about to mark the node down and run its jobs elsewhere, so they must not go on
running here. The agent's loop enforces that itself (:meth:`agent.loop.Agent.fence_if_lease_expired`), but an
agent that is SIGSTOPped, SIGKILLed or wedged cannot kill anything. This process can: ``corral-agent`` starts it
(:func:`start_watchdog`) and rewrites a lease file after every successful heartbeat; once the deadline in that
file has passed, the watchdog SIGKILLs every process group the agent's pid records name, and keeps doing so for as
long as the lease stays expired. It also quits the MPS control daemons the agent started for shared GPUs (issue #17),
by the records the agent keeps of them (:class:`agent.mps.DaemonRecords`).

Clocks: the deadline is a ``CLOCK_MONOTONIC`` reading (Python's :func:`time.monotonic` on Linux). That clock is
system-wide, so the agent's and the watchdog's readings compare; it does not jump when the wall clock is set
(NTP, an admin); it restarts at boot, when every job is gone anyway. A lease file means nothing on another machine.

Ownership: a record names the agent that wrote it (:class:`~agent.pid_records.AgentId`: pid and start time), and a
watchdog acts on its own agent's records only. If its agent dies (SIGKILL, crash), the watchdog stays behind and
keeps enforcing that agent's last lease, so the jobs of a dead agent die at lease expiry even if no agent starts
again; it exits once none of its agent's records remain (the groups are gone, or the next agent has swept them).
The next agent's jobs are never its business. The agent stops its watchdog when it shuts down cleanly.
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from types import FrameType

from agent.mps import DaemonRecords, stop_recorded
from agent.pid_records import AgentId, PidRecords

log = logging.getLogger("agent.watchdog")  # not __main__ when run with -m

#: The watchdog acts this long after the deadline at most (a tenth of the lease below 10 s), so that an agent
#: that is merely slow fences itself first: its own kill reaps and accounts for the tasks properly.
MARGIN_SECONDS = 1.0
#: How often the watchdog looks while there is no lease (the first one is written right after registration).
IDLE_POLL_SECONDS = 0.2


@dataclass(frozen=True, slots=True)
class Lease:
    """A lease as the file holds it: ``deadline`` is a ``CLOCK_MONOTONIC`` reading, ``seconds`` its length."""

    deadline: float
    seconds: float

    @property
    def margin(self) -> float:
        return min(MARGIN_SECONDS, self.seconds / 10)

    @property
    def poll(self) -> float:
        """How often to look: often enough that the kill comes within a fraction of the lease."""
        return min(0.5, max(0.02, self.seconds / 20))

    def expired(self, now: float) -> bool:
        return now >= self.deadline + self.margin


class LeaseFile:
    """The agent's lease, on disk for its watchdog. The agent writes it; the watchdog only reads it."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def renew(self, expires_in: float, lease_seconds: float) -> None:
        """Record that the lease runs out ``expires_in`` seconds from now. Replaced whole, never half written.

        A failure to write is logged, not raised: the agent's own loop still enforces the lease.
        """
        body = {"deadline_monotonic": time.monotonic() + expires_in, "lease_seconds": lease_seconds}
        aside = self.path.with_name(f".{self.path.name}.tmp")
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            aside.write_text(json.dumps(body))
            aside.replace(self.path)
        except OSError as exc:
            log.warning("cannot write the lease file %s: %s", self.path, exc)

    def clear(self) -> None:
        """No lease (none granted yet, or the agent is going away): the watchdog then kills nothing."""
        try:
            self.path.unlink(missing_ok=True)
        except OSError as exc:
            log.warning("cannot remove the lease file %s: %s", self.path, exc)

    def read(self) -> Lease | None:
        """The lease, or None if there is none (no file). An unreadable file counts as no lease."""
        try:
            data = json.loads(self.path.read_text())
            lease = Lease(float(data["deadline_monotonic"]), float(data["lease_seconds"]))
        except FileNotFoundError:
            return None
        except (OSError, ValueError, KeyError, TypeError) as exc:
            log.warning("ignoring the unreadable lease file %s: %s", self.path, exc)
            return None
        if math.isnan(lease.deadline) or not lease.seconds > 0:
            return None
        return lease


class Watchdog:
    """One agent's watchdog: :meth:`check` is one look, :meth:`run` looks until told to stop or no longer needed."""

    def __init__(self, run_dir: Path, lease_file: LeaseFile, agent: AgentId) -> None:
        self.records = PidRecords(run_dir, agent=agent)
        self.daemons = DaemonRecords(run_dir, agent)  # the MPS daemons the agent started for shared GPUs (#17)
        self.lease_file = lease_file
        self.agent = agent
        self._killed: set[int] = set()  # groups already logged as killed
        self._poll = IDLE_POLL_SECONDS

    def orphaned(self) -> bool:
        """Whether the agent has died (this process has been handed to another parent)."""
        return os.getppid() != self.agent.pid

    def check(self) -> bool:
        """Kill the agent's recorded groups if its lease has expired. False once the watchdog is no longer needed:
        its agent is dead and none of its records remain."""
        lease = self.lease_file.read()
        self._poll = IDLE_POLL_SECONDS if lease is None else lease.poll
        records = self.records.read(agent=self.agent)
        if lease is not None and lease.expired(time.monotonic()):
            for record in records:
                if record.kill() and record.pid not in self._killed:
                    self._killed.add(record.pid)
                    log.error(
                        "lease of agent %d expired %.1fs ago: SIGKILLed process group %d of task %s",
                        self.agent.pid,
                        time.monotonic() - lease.deadline,
                        record.pid,
                        record.key.wire,
                    )
            # The fence covers the shared GPUs' MPS daemons too: quit them (their records go with them).
            stop_recorded(self.daemons, agent=self.agent)
        if not self.orphaned():
            return True
        remaining = []
        for record in records:
            if record.group_alive():
                remaining.append(record)
            else:
                record.path.unlink(missing_ok=True)  # its agent is dead: nobody else will tidy this one up
        if remaining:
            return True
        stop_recorded(self.daemons, agent=self.agent)
        log.info("agent %d is gone and none of its jobs are left; the watchdog exits", self.agent.pid)
        self.lease_file.clear()
        return False

    def run(self, stop: threading.Event) -> None:
        while not stop.is_set() and self.check():
            stop.wait(self._poll)


def start_watchdog(
    run_dir: Path, lease_file: LeaseFile, agent: AgentId, *, log_level: str = "INFO"
) -> subprocess.Popen[bytes]:
    """Start the watchdog of ``agent`` (this process) as a child: ``python -m agent.watchdog``.

    It shares the agent's process group (a job's group is the job's own), its working directory and its output
    (the journal); it gets the agent's environment less the node token, which it has no use for.
    """
    env = {name: value for name, value in os.environ.items() if name != "CORRAL_NODE_TOKEN"}
    argv = [
        sys.executable, "-m", "agent.watchdog", "--run-dir", str(run_dir), "--lease-file", str(lease_file.path),
        "--agent-pid", str(agent.pid), "--agent-start-ticks", str(agent.start_ticks), "--log-level", log_level,
    ]  # fmt: skip
    return subprocess.Popen(argv, stdin=subprocess.DEVNULL, env=env, close_fds=True)  # noqa: S603 - our own module


def stop_watchdog(process: subprocess.Popen[bytes], *, timeout: float = 5.0) -> None:
    """SIGTERM the watchdog and reap it (SIGKILL if it does not exit within ``timeout``)."""
    process.terminate()
    try:
        process.wait(timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m agent.watchdog", description=__doc__.splitlines()[0])
    parser.add_argument("--run-dir", type=Path, required=True, help="the agent's pid records (<workdir>/run)")
    parser.add_argument("--lease-file", type=Path, required=True, help="the lease file the agent rewrites")
    parser.add_argument("--agent-pid", type=int, required=True)
    parser.add_argument("--agent-start-ticks", type=int, required=True)
    parser.add_argument("--log-level", default="INFO", type=str.upper)
    args = parser.parse_args(argv)
    logging.basicConfig(level=args.log_level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    # Terminal signals meant for the agent (Ctrl-C, Ctrl-Z, a closed terminal) must not take its guard with it;
    # the agent stops the watchdog itself with SIGTERM.
    for signum in (signal.SIGINT, signal.SIGHUP, signal.SIGTSTP, signal.SIGTTIN, signal.SIGTTOU):
        signal.signal(signum, signal.SIG_IGN)
    stop = threading.Event()

    def on_term(_signum: int, _frame: FrameType | None) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, on_term)
    agent = AgentId(args.agent_pid, args.agent_start_ticks)
    log.debug("watching the lease of agent %d (%s)", agent.pid, args.lease_file)
    Watchdog(args.run_dir, LeaseFile(args.lease_file), agent).run(stop)


if __name__ == "__main__":
    main()
