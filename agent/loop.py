"""The heartbeat loop: report what runs here, do what the portal answers.

One iteration (:meth:`Agent.step`) is: reap exits, ship the GPUs' pending XID events if a task has a non-zero exit
the portal has not heard of yet, collect a report per task (with its new log output, unless the log shipper of
:mod:`agent.log_shipper` sends it beside the heartbeat), POST the heartbeat, then apply the reply (kill, forget,
start, log offsets). It is a plain method returning how long to wait, so tests drive it
against a real HTTP peer one beat at a time and :meth:`Agent.run` only adds the waiting.

Failure policy: the control plane being unreachable does not stop the node at once. Tasks keep running, their logs
keep accumulating on disk, and the next successful heartbeat sends everything from the offsets the portal holds.
The limit is the lease the portal grants at registration (``lease_seconds``): with no successful heartbeat for that
long, counted from when the last good one was sent, the portal is about to requeue the node's jobs elsewhere, so
the agent SIGKILLs them all and registers again (:meth:`Agent.fence_if_lease_expired`). A job never runs twice; an
outage longer than the lease stops the node's jobs. The watchdog (:mod:`agent.watchdog`) does the same when the
agent itself cannot (stopped, killed).

Long on purpose: registration, the heartbeat, the lease and the shared GPUs' guard (issue #17) are one conversation
with the portal; each step depends on the order of the others, which is clearest read in one place.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import replace

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
from agent.log_shipper import LogShipper
from agent.pid_records import KILL_WAIT_SECONDS
from agent.runner import Runner
from agent.share_guard import ShareGuard
from agent.watchdog import LeaseFile

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
        lease_file: LeaseFile | None = None,
        kill_wait: float = KILL_WAIT_SECONDS,
        guard: ShareGuard | None = None,
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
        #: Ships the tasks' logs beside the heartbeat (None: the heartbeat carries them, as in most tests).
        self.log_shipper: LogShipper | None = None
        self._next_prune = clock()
        self._turn = 0
        #: Where the lease is written for the watchdog (None: no watchdog, as in most tests).
        self.lease_file = lease_file
        #: How long to wait for SIGKILLed process groups to vanish before registering unclean.
        self.kill_wait = kill_wait
        #: The lease of the current registration, and when it runs out on ``clock`` (None: no lease granted).
        self.lease_seconds: float | None = None
        self.lease_deadline: float | None = None
        #: Runs shared GPUs: MPS daemons, protection of online work, server faults (None: no shares, most tests).
        self.guard = guard

    # --- one iteration -----------------------------------------------------------------------------------------
    def step(self) -> float:
        """Register if needed, then one heartbeat. Returns the seconds to wait before the next step."""
        if self.registration is None and not self.register():
            return self.backoff.next()
        if self.fence_if_lease_expired():
            return 0.0  # register again at once
        self.runner.poll()
        if self.guard is not None:  # a share's exit may be its server's fault: look before reporting it (#17)
            self.guard.check(force=self.guard.exit_pending())
        self.ship_xids_before_failures()
        reports = self.collect_reports()
        if self.fence_if_lease_expired():
            return 0.0  # the agent was held up past its lease: the watchdog may have killed tasks; report nothing
        sent_at = self.clock()
        try:
            reply = self.client.heartbeat(reports)
        except RegisterAgain:
            log.warning("portal asked this node to register again: its tasks were requeued elsewhere; killing them")
            self.lose_session()
            return self.backoff.next()  # prompt, but a portal that keeps saying so must not make us spin
        except PortalUnavailable as exc:
            log.warning("heartbeat failed (%s); retrying", exc)
            return self.backoff.next()
        except PortalRefused as exc:
            log.error("heartbeat refused: %s", exc)
            return self.backoff.next()
        if self.fence_if_lease_expired():
            return 0.0  # the reply came after the lease had run out: too late, the watchdog may have acted
        self._renew_lease(sent_at)
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
        """POST register. On success the node's old session (if any) is gone on the portal side.

        Called only when the agent runs no task. First every process group of a task from before this registration
        (left by a crashed agent, or dropped on ``register again`` or at lease expiry) is SIGKILLed and waited for;
        the registration says ``clean`` only if all of them are gone, and only then does the portal free the GPUs
        they held (``clean: false`` keeps them fenced until an admin declares the node lost).
        """
        clean = self._kill_leftovers()
        sent_at = self.clock()
        try:
            registration = self.client.register(replace(self.request, clean=clean))
        except (PortalUnavailable, RegisterAgain) as exc:
            log.warning("cannot register with the portal (%s); retrying", exc)
            return False
        except PortalRefused as exc:
            log.error("registration refused: %s", exc)
            return False
        self.registration = registration
        self.heartbeat_interval = registration.heartbeat_interval
        self.lease_seconds = registration.lease_seconds  # the portal counts a registration as a heartbeat
        self._renew_lease(sent_at)
        log.info(
            "registered as node %s with %d GPU(s) (%s); heartbeat every %.1fs, lease %s",
            registration.node,
            len(self.request.gpus),
            "clean" if clean else "unclean: the GPUs of earlier tasks stay fenced",
            registration.heartbeat_interval,
            "none" if self.lease_seconds is None else f"{self.lease_seconds:.1f}s",
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
        """One report per tracked task, with its log's size and the offset the portal holds.

        With a log shipper (:mod:`agent.log_shipper`), which gets the tasks here, the report carries no log: the
        shipper sends it beside the heartbeat. Without one, or while the portal lacks the log endpoint, the report
        carries the log from that offset as it always did; the log bytes of one heartbeat are then capped
        (``HEARTBEAT_LOG_BUDGET``) and which task is served first rotates from beat to beat, so one chatty job
        cannot starve the logs of the others.
        """
        self.sent_offsets = {key: value for key, value in self.sent_offsets.items() if key in self.runner.tasks}
        shipper = self.log_shipper
        if shipper is not None:
            shipper.sync(self.runner.tasks, acknowledged=self.sent_offsets)
        keys = sorted(self.runner.tasks)
        if keys:
            first = self._turn % len(keys)
            keys = keys[first:] + keys[:first]
        self._turn += 1
        budget = HEARTBEAT_LOG_BUDGET
        reports = []
        for key in keys:
            task = self.runner.tasks[key]
            if shipper is None or not shipper.available:
                limit = min(LOG_CHUNK_BYTES, budget)
                chunk = self.runner.read_log(task, self.sent_offsets.get(key, 0), limit=limit)
                budget -= len(chunk.text.encode())
            else:
                chunk = self.runner.read_log(task, shipper.held(key), limit=0)  # the offset and the size, no bytes
            report = TaskReport(key, task.state, task.pid, task.exit_code, chunk.offset, chunk.text, chunk.size)
            reports.append(replace(report, eviction=task.eviction, mps_fault=task.mps_fault))  # set for shares only
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
            elif self.guard is not None and not self.guard.accepts(start):
                log.info("holding back task %s: its GPU's MPS server is recovering (the order repeats)", start.key.wire)
            elif start.key not in self.runner.tasks:
                self.runner.start(start)
        if reply.heartbeat_interval is not None:
            self.heartbeat_interval = reply.heartbeat_interval

    def lose_session(self) -> None:
        """The portal has requeued this node's tasks (or is about to: the lease ran out): SIGKILL them all now,
        forget them, and register anew.

        Leaving them running would duplicate every job (two copies writing the same checkpoints). No SIGTERM and
        no grace: they are stale duplicates of jobs that run (or are about to run) elsewhere. They are remembered
        as finished, so a stale ``start`` order never runs them again. Waiting until their groups are gone is the
        next registration's first step (:meth:`register`), which tells the portal whether it saw them go.
        """
        self.runner.kill_all_now()
        for key in self.runner.tasks:
            self._remember_finished(key)
        self.runner.drop_all()
        if self.guard is not None:
            self.guard.stop_daemons()  # fenced: nothing of this session may go on serving; shares start them anew
        self.sent_offsets.clear()
        self.registration = None
        self.lease_seconds = self.lease_deadline = None

    def fence_if_lease_expired(self) -> bool:
        """Fence this node if the lease has run out: no heartbeat succeeded for ``lease_seconds``, counted from when
        the last good one was sent. The portal counts its node timeout from when it *received* that heartbeat, and
        the lease is shorter, so the tasks die here before the portal can start them elsewhere. True if fenced."""
        if self.lease_deadline is None or self.clock() < self.lease_deadline:
            return False
        log.error(
            "no heartbeat got through for %.1fs (the lease): the portal will run this node's jobs elsewhere; "
            "SIGKILLing its %d task(s) and registering again",
            self.lease_seconds,
            sum(task.alive for task in self.runner.tasks.values()),
        )
        self.lose_session()
        return True

    def _renew_lease(self, sent_at: float) -> None:
        """A call sent at ``sent_at`` succeeded: the lease runs ``lease_seconds`` from then, here and in the file."""
        if self.lease_seconds is None:
            self.lease_deadline = None
            if self.lease_file is not None:
                self.lease_file.clear()
            return
        self.lease_deadline = sent_at + self.lease_seconds
        if self.lease_file is not None:
            self.lease_file.renew(self.lease_deadline - self.clock(), self.lease_seconds)

    def _kill_leftovers(self) -> bool:
        """SIGKILL what the pid records name from before the coming registration; True if all of it is gone."""
        sweep = self.runner.kill_orphans(self.kill_wait)
        if sweep.survivors:
            log.error(
                "process group(s) %s survived SIGKILL for %.0fs (stuck in the kernel, state D?); registering "
                "unclean: the portal keeps their GPUs fenced until an admin declares the node lost",
                ", ".join(str(pgid) for pgid in sweep.survivors),
                self.kill_wait,
            )
        elif not sweep.verifiable:
            log.warning("without /proc no pid records are kept, so jobs of an earlier agent cannot be ruled out")
        return sweep.clean

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

        Between heartbeats the runner is polled and the lease checked every ``tick`` seconds, so a SIGKILL due after
        a grace period, or at lease expiry, is sent on time even while the portal is unreachable and the next
        heartbeat is a long backoff away.
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
                self._watch_shares()
                if self.fence_if_lease_expired():  # a long backoff must not let the lease run out unenforced
                    next_beat = self.clock()
            stop.wait(max(0.0, min(tick, next_beat - self.clock())))
        self.shutdown()

    def shutdown(self) -> None:
        """Stop every task. Their exits are not reported: the portal requeues them when this node registers again
        or times out, which is what a node going away should mean for its jobs (requeued, not failed)."""
        running = sum(task.alive for task in self.runner.tasks.values())
        if running:
            log.info("stopping %d task(s) (grace %.1fs)", running, self.grace)
        self.runner.terminate_all(self.grace)
        if self.guard is not None:
            self.guard.stop_daemons()

    def _watch_shares(self) -> None:
        """The shared GPUs' guard, between heartbeats (it looks every second; a heartbeat may be 2 s apart)."""
        if self.guard is None:
            return
        try:
            self.guard.check()
        except Exception:  # a bug must not stop the loop that keeps the node's jobs in check
            log.exception("unexpected error in the shared-GPU guard")
