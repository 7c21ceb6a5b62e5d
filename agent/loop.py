"""The heartbeat loop: report what runs here, do what the portal answers.

One iteration (:meth:`Agent.step`) is: reap exits, ship the GPUs' pending XID events if a task has a non-zero exit
the portal has not heard of yet, collect a report per task with its new log output, POST the heartbeat, then apply
the reply (kill, forget, start, log offsets). It is a plain method returning how long to wait, so tests drive it
against a real HTTP peer one beat at a time and :meth:`Agent.run` only adds the waiting.

Failure policy: the control plane being unreachable never stops the node. Tasks keep running, their logs keep
accumulating on disk, and the next successful heartbeat sends everything from the offsets the portal holds.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence

from agent.client import (
    HEARTBEAT_LOG_BUDGET,
    LOG_CHUNK_BYTES,
    GpuDescriptor,
    HeartbeatReply,
    PortalClient,
    PortalRefused,
    PortalUnavailable,
    RegisterAgain,
    RegisterRequest,
    Registration,
    TaskKey,
    TaskReport,
    TaskState,
    agent_version,
)
from agent.runner import Runner

log = logging.getLogger(__name__)

#: How often finished job directories older than the retention are deleted.
PRUNE_EVERY_SECONDS = 3600.0
#: Heartbeat delay while some task has more log than one chunk could carry.
CATCH_UP_SECONDS = 0.5
#: Forgotten task keys remembered so that a stale, repeated ``start`` can never run a finished task twice.
REMEMBER_FINISHED = 4096


class Backoff:
    """Exponential backoff with jitter, so a fleet of agents does not hammer a portal that is coming back up."""

    def __init__(self, initial: float = 1.0, maximum: float = 30.0, factor: float = 2.0) -> None:
        self.initial, self.maximum, self.factor = initial, maximum, factor
        self._next = initial

    def next(self) -> float:
        delay = self._next
        self._next = min(self.maximum, self._next * self.factor)
        return delay * random.uniform(0.8, 1.2)

    def reset(self) -> None:
        self._next = self.initial


class Agent:
    """The node agent's control loop. Owns the runner; talks to the portal only through ``client``."""

    def __init__(
        self,
        client: PortalClient,
        runner: Runner,
        *,
        hostname: str,
        address: str,
        gpus: Sequence[GpuDescriptor],
        grace: float = 10.0,
        backoff: Backoff | None = None,
        retention_seconds: float = 7 * 86400.0,
        clock: Callable[[], float] = time.monotonic,
        flush_xids: Callable[[PortalClient], bool] | None = None,
    ) -> None:
        self.client = client
        self.runner = runner
        self.request = RegisterRequest(hostname, address, agent_version(), tuple(gpus))
        self.grace = grace
        self.backoff = backoff or Backoff()
        self.retention_seconds = retention_seconds
        self.clock = clock
        self.registration: Registration | None = None
        self.heartbeat_interval = 2.0
        #: Bytes of each task's log the portal holds (as far as we know); the next report sends from there.
        self.sent_offsets: dict[TaskKey, int] = {}
        #: Called with each successful registration (the telemetry shipper takes its sampling period from it).
        self.on_registered: list[Callable[[Registration], None]] = []
        self.finished: OrderedDict[TaskKey, None] = OrderedDict()
        #: Ships the probe's pending XIDs through the given client; None when the node has no telemetry shipper.
        self.flush_xids = flush_xids
        #: Tasks whose exit a successful heartbeat has carried: their XIDs no longer need to go ahead of it.
        self.exits_delivered: set[TaskKey] = set()
        self._next_prune = clock()
        self._turn = 0

    # --- one iteration -----------------------------------------------------------------------------------------
    def step(self) -> float:
        """Register if needed, then one heartbeat. Returns the seconds to wait before the next step."""
        if self.registration is None and not self.register():
            return self.backoff.next()
        self.runner.poll()
        self.ship_xids_before_failures()
        reports = self.collect_reports()
        try:
            reply = self.client.heartbeat(reports)
        except RegisterAgain:
            log.warning("portal asked this node to register again; its running tasks were requeued there")
            self.lose_session()
            return self.backoff.next()  # prompt, but a portal that keeps saying so must not make us spin
        except PortalUnavailable as exc:
            log.warning("heartbeat failed (%s); retrying", exc)
            return self.backoff.next()
        except PortalRefused as exc:
            log.error("heartbeat refused: %s", exc)
            return self.backoff.next()
        self.backoff.reset()
        for report in reports:
            self.sent_offsets[report.key] = report.log_end
            if report.state is not TaskState.RUNNING:
                self.exits_delivered.add(report.key)
        self.apply(reply)
        self._maybe_prune()
        if any(report.log_end < report.log_size for report in reports):
            return min(self.heartbeat_interval, CATCH_UP_SECONDS)  # a chatty job's log must not fall ever behind
        return self.heartbeat_interval

    def register(self) -> bool:
        """POST register. On success the node's old session (if any) is gone on the portal side."""
        try:
            registration = self.client.register(self.request)
        except (PortalUnavailable, RegisterAgain) as exc:
            log.warning("cannot register with the portal (%s); retrying", exc)
            return False
        except PortalRefused as exc:
            log.error("registration refused: %s", exc)
            return False
        self.registration = registration
        self.heartbeat_interval = registration.heartbeat_interval
        log.info(
            "registered as node %s with %d GPU(s); heartbeat every %.1fs",
            registration.node,
            len(self.request.gpus),
            registration.heartbeat_interval,
        )
        for callback in self.on_registered:
            callback(registration)
        return True

    def ship_xids_before_failures(self) -> None:
        """Before a non-zero exit first reaches the portal, ship the XID events the GPUs have pending. Ref: #4.

        A process often dies *because* its GPU failed, and the driver queues the XID before the process sees its
        error. The portal retries a job as killed by hardware only when it can pair the exit with a fatal XID, so
        the XIDs must not trail the exit. The flush is tried before every heartbeat until one carrying the exit
        succeeds (after an outage the XIDs therefore still go first); if it fails while the heartbeat gets through,
        the exit is reported anyway, the XIDs follow with the shipper, and the portal pairs them up then.
        """
        self.exits_delivered &= self.runner.tasks.keys()
        if self.flush_xids is None:
            return
        failed = [
            key
            for key, task in self.runner.tasks.items()
            if task.state is TaskState.EXITED and task.exit_code != 0 and key not in self.exits_delivered
        ]
        if failed and not self.flush_xids(self.client):
            log.debug("reporting the exit of %s before the GPUs' XID events could be shipped", failed[0].wire)

    def collect_reports(self) -> list[TaskReport]:
        """One report per tracked task, each carrying the log from the offset the portal holds.

        The log bytes of one heartbeat are capped (``HEARTBEAT_LOG_BUDGET``); which task is served first rotates
        from beat to beat, so one chatty job cannot starve the logs of the others.
        """
        self.sent_offsets = {key: value for key, value in self.sent_offsets.items() if key in self.runner.tasks}
        keys = sorted(self.runner.tasks)
        if keys:
            first = self._turn % len(keys)
            keys = keys[first:] + keys[:first]
        self._turn += 1
        budget = HEARTBEAT_LOG_BUDGET
        reports = []
        for key in keys:
            task = self.runner.tasks[key]
            chunk = self.runner.read_log(task, self.sent_offsets.get(key, 0), limit=min(LOG_CHUNK_BYTES, budget))
            budget -= len(chunk.text.encode())
            reports.append(TaskReport(key, task.state, task.pid, task.exit_code, chunk.offset, chunk.text, chunk.size))
        return reports

    def apply(self, reply: HeartbeatReply) -> None:
        """Apply a heartbeat reply: offsets first (they describe this very heartbeat), then kill, signal, forget,
        start."""
        for key, offset in reply.log_offsets.items():
            if key in self.runner.tasks:
                self.sent_offsets[key] = offset
        for order in reply.kill:
            grace = self.grace if order.grace_seconds is None else order.grace_seconds
            for key in self._keys_of(order.job, order.attempt):
                self.runner.kill(key, grace)
        for signal_order in reply.signal:
            for key in self._keys_of(signal_order.job, signal_order.attempt):
                self.runner.signal(key, signal_order.signal)
        for forget_order in reply.forget:
            for key in self._keys_of(forget_order.job, forget_order.attempt):
                self.runner.forget(key, self.grace)
                self._remember_finished(key)
        for start in reply.start:
            if start.key in self.finished:
                log.warning("ignoring a start order for task %s, which already ran here", start.key.wire)
            elif start.key not in self.runner.tasks:
                self.runner.start(start)
        if reply.heartbeat_interval is not None:
            self.heartbeat_interval = reply.heartbeat_interval

    def lose_session(self) -> None:
        """The portal treats this node as restarted and has requeued its tasks: stop them, then register anew.

        Leaving them running would duplicate every job (two copies writing the same checkpoints) and hold GPUs the
        portal now believes are free. This blocks for at most the grace period.
        """
        self.runner.terminate_all(self.grace)
        for key in self.runner.tasks:
            self._remember_finished(key)
        self.runner.drop_all()
        self.sent_offsets.clear()
        self.registration = None

    def _remember_finished(self, key: TaskKey) -> None:
        self.finished[key] = None
        while len(self.finished) > REMEMBER_FINISHED:
            self.finished.popitem(last=False)

    def _keys_of(self, job: int, attempt: int) -> list[TaskKey]:
        return [key for key in self.runner.tasks if key.job == job and key.attempt == attempt]

    def _maybe_prune(self) -> None:
        if self.clock() >= self._next_prune:
            self._next_prune = self.clock() + PRUNE_EVERY_SECONDS
            removed = self.runner.prune(self.retention_seconds)
            if removed:
                log.info("deleted %d job directories older than the retention", removed)

    # --- the loop ----------------------------------------------------------------------------------------------
    def run(self, stop: threading.Event, *, tick: float = 0.2) -> None:
        """Step until ``stop`` is set, then terminate every task (grace, then SIGKILL) and return.

        Between heartbeats the runner is polled every ``tick`` seconds, so a SIGKILL due after a grace period is
        sent on time even while the portal is unreachable and the next heartbeat is a long backoff away.
        """
        next_beat = self.clock()
        while not stop.is_set():
            if self.clock() >= next_beat:
                try:
                    delay = self.step()
                except Exception:  # a bug must not orphan the node's jobs; log it and keep the node alive
                    log.exception("unexpected error in the heartbeat loop")
                    delay = self.backoff.next()
                next_beat = self.clock() + delay
            else:
                self.runner.poll()
            stop.wait(max(0.0, min(tick, next_beat - self.clock())))
        self.shutdown()

    def shutdown(self) -> None:
        """Stop every task. Their exits are not reported: the portal requeues them when this node registers again
        or times out, which is what a node going away should mean for its jobs (requeued, not failed)."""
        running = sum(task.alive for task in self.runner.tasks.values())
        if running:
            log.info("stopping %d task(s) (grace %.1fs)", running, self.grace)
        self.runner.terminate_all(self.grace)
