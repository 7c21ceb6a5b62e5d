"""The faults of the chaos benchmark (``bench/chaos.py``): one at a time, at random (seeded) moments, against a
random part of the stack, each undone before the next begins.

- an agent, the worker, beat or web: ``kill9`` (SIGKILL to its process group, restarted 0.5-4 s later) or
  ``stop`` (SIGSTOP, then SIGCONT after a short pause of 1-5 s, or, 40 % of the time, ``stop-long``: the node
  timeout + 1-6 s, so the portal marks a frozen agent's node down while its jobs still run);
- Redis: ``crash`` (SIGKILL, restarted 1-5 s later; no persistence, so queued Celery messages are gone);
- PostgreSQL: a ``fast`` or ``immediate`` shutdown, restarted 1-5 s later. The outage window runs from the signal
  to the first ``pg_isready`` that answers.

An agent's jobs are not its process group's, so ``kill9`` and ``stop`` leave them running, as on a real node whose
agent crashed or hung. Three in four agent faults are *aimed*: they go to an agent that runs a rank of a gang spanning
nodes at that moment (read from the live stamp files), because that is where a lost node must stop a whole gang.
"""

from __future__ import annotations

import random
import signal
import threading
import time
from collections import defaultdict
from dataclasses import asdict, dataclass

from chaos_stack import Stack

#: How often each kind of target is picked (agents share theirs).
WEIGHTS = {"agent": 45, "worker": 12, "beat": 8, "web": 12, "redis": 10, "postgres": 13}
LONG_STOP_SHARE = 0.4
AIMED_SHARE = 0.75
#: A stamp file written to this recently belongs to a live process (jobs stamp once a second).
LIVE_SECONDS = 2.0


@dataclass
class Fault:
    at: float  # epoch seconds when it began
    target: str
    action: str
    seconds: float  # how long the target was down, stopped or unreachable
    ended: float = 0.0
    error: str = ""
    aimed: bool = False  # picked because it ran a rank of a multi-node gang

    def as_dict(self, t0: float) -> dict[str, object]:
        data = asdict(self)
        data["at"] = round(self.at - t0, 2)
        data["ended"] = round(self.ended - t0, 2)
        data["seconds"] = round(self.seconds, 2)
        return data


class Monkey:
    """Injects faults from start until ``until`` (epoch seconds): the gap after each fault is drawn uniformly
    from 0.5 to 1.5 times ``mean_gap``, so even a short run gets its handful."""

    def __init__(self, stack: Stack, rng: random.Random, *, until: float, mean_gap: float) -> None:
        self.stack, self.rng, self.until, self.mean_gap = stack, rng, until, mean_gap
        self.faults: list[Fault] = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, name="monkey", daemon=True)

    def start(self) -> None:
        self.thread.start()

    def finish(self) -> None:
        """Stop injecting; the fault under way is undone before this returns."""
        self.stop.set()
        self.thread.join()

    def _run(self) -> None:
        while not self.stop.wait(self.rng.uniform(0.5, 1.5) * self.mean_gap):
            if time.time() >= self.until:
                return
            began = time.time()
            try:
                self.faults.append(self._one())
            except Exception as exc:  # a fault that went wrong is reported, not fatal
                self.faults.append(Fault(began, "?", "error", time.time() - began, time.time(), repr(exc)[-500:]))

    def _pause(self, seconds: float) -> None:
        self.stop.wait(seconds)  # cut short by finish(), never skipped: the fault is undone either way

    def _one(self) -> Fault:
        rng, stack = self.rng, self.stack
        kind = rng.choices(list(WEIGHTS), weights=list(WEIGHTS.values()))[0]
        target, aimed = kind, False
        if kind == "agent":
            gangs = sorted(self.gang_nodes()) if rng.random() < AIMED_SHARE else []
            target, aimed = rng.choice(gangs or stack.agent_names), bool(gangs)
        timeout = stack.timings.node_timeout
        if kind in ("redis", "postgres"):
            service = stack.redis if kind == "redis" else stack.pg
            assert service is not None
            if kind == "redis":
                action, how = "crash", signal.SIGKILL
            else:
                action = rng.choice(["fast", "immediate"])
                how = signal.SIGINT if action == "fast" else signal.SIGQUIT
            fault = Fault(time.time(), target, action, 0.0)
            try:
                began, ended = service.restart(how, rng.uniform(1.0, 5.0), self._pause)
                fault.seconds, fault.ended = ended - began, ended
            except RuntimeError as exc:  # it did not come back: say so, and try once more
                fault.error = str(exc)[-500:]
                service.up()
                fault.ended = time.time()
                fault.seconds = fault.ended - fault.at
                service.outages.append((fault.at, fault.ended))
            return fault
        proc = stack.procs[target]
        if rng.random() < 0.5:
            fault = Fault(time.time(), target, "kill9", rng.uniform(0.5, 4.0), aimed=aimed)
            proc.kill9()
            self._pause(fault.seconds)
            proc.start()
        else:
            long = rng.random() < LONG_STOP_SHARE
            pause = rng.uniform(timeout + 1.0, timeout + 6.0) if long else rng.uniform(1.0, 5.0)
            fault = Fault(time.time(), target, "stop-long" if long else "stop", pause, aimed=aimed)
            proc.freeze()
            self._pause(pause)
            proc.thaw()
        fault.ended = time.time()
        fault.seconds = fault.ended - fault.at
        return fault

    def gang_nodes(self) -> set[str]:
        """Agents running, now, a rank of an attempt whose ranks are on more than one node (stamp files are named
        ``<job>.<attempt>.<rank>.<node>.<pid>`` and touched every second)."""
        now, nodes = time.time(), defaultdict(set)
        for path in self.stack.stamps.iterdir():
            try:
                if now - path.stat().st_mtime > LIVE_SECONDS:
                    continue
            except OSError:
                continue
            job, attempt, _rank, node, _pid = path.name.split(".", 4)
            nodes[(job, attempt)].add(node)
        return {node for members in nodes.values() if len(members) > 1 for node in members}
