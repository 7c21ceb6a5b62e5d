"""GPU telemetry: sample the probe every period, buffer, ship batches to ``POST /api/v1/agent/samples/``.

It runs in its own thread so a slow or hanging samples POST never delays a heartbeat (which would get the node
marked down). While the portal is unreachable samples accumulate in bounded :class:`telemetry.buffer.SendBuffer`
outboxes that drop the oldest first and count every drop; the count travels with every batch as ``dropped``.
Samples and XID events have separate outboxes: a flood of samples during a long outage must not push out the
one XID 79 that explains why a job died.

The probes are not thread-safe, and the loop thread marks simulated GPUs busy while the shipper samples them, so
every probe call goes through :class:`ProbeGate`.

One exception to "telemetry never delays a heartbeat": before the loop first reports a task's non-zero exit it
calls :meth:`TelemetryShipper.flush_xids`, which drains the probe's XID events and ships the XID outbox at once.
A process often dies *because* its GPU failed, and the portal can blame the hardware (and retry the job elsewhere)
only if the XID arrives no later than the exit (issue #4). The flush is bounded: it waits at most
:data:`FLUSH_LOCK_TIMEOUT` for a POST already in flight, and sends only XIDs.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import replace

from agent.client import GpuDescriptor, PortalClient, PortalRefused, PortalUnavailable, RegisterAgain, Registration
from telemetry.buffer import SendBuffer
from telemetry.probe import GpuProbe
from telemetry.sample import GpuSample, XidEvent

log = logging.getLogger(__name__)

#: About 7 hours of an 8-GPU node sampled every 10 s.
SAMPLE_CAPACITY = 20_000
XID_CAPACITY = 2_000
SAMPLES_PER_POST = 500
#: Batches sent per tick at most, so draining a long backlog cannot monopolise the portal in one go.
MAX_POSTS_PER_TICK = 20
#: How long a flush before an exit report waits for the driver's first XID event (NVML; a simulated probe never
#: waits). The driver queues the XID before the dying process sees its error, so this is only a margin.
FLUSH_WAIT_MS = 100
#: How long a flush waits for the probe (a sample in progress) and then for the shipper thread's POST in flight,
#: each, before giving up: the exit is reported anyway, and a heartbeat must never hang on a stuck driver.
FLUSH_LOCK_TIMEOUT = 2.0


class ProbeGate:
    """Serialises calls to a probe from the loop thread (busy flags) and the shipper thread (sampling)."""

    def __init__(self, probe: GpuProbe) -> None:
        self.probe = probe
        self._lock = threading.Lock()
        self._users: dict[int, dict[int | None, int]] = {}  # gpu -> {task pid: count}, for GPUs shared by tasks
        self._limits: dict[int, dict[int, int]] = {}  # gpu -> {task pid: a share's memory limit in MiB}
        self._held_xids: dict[int, int] = {}  # gpu index -> an XID a peek took from a sample, for the next one

    def sample(self, now: float) -> tuple[list[GpuSample], list[XidEvent]]:
        with self._lock:
            samples = self.probe.sample(now)
            held, self._held_xids = self._held_xids, {}
            return [_with_xid(sample, held.get(sample.index, 0)) for sample in samples], self.probe.xid_events(0)

    def peek(self, now: float) -> list[GpuSample]:
        """Readings for the shared-GPU guard (every second), without taking anything from the shipped samples.

        A probe hands each sample's ``xid`` (the last XID since the previous sample) out once; one a peek took is
        kept and put back into the next shipped sample. XID events are not drained here.
        """
        with self._lock:
            samples = self.probe.sample(now)
            for sample in samples:
                if sample.xid:
                    self._held_xids[sample.index] = sample.xid
            return samples

    def xid_events(self, timeout_ms: int = 0, *, lock_timeout: float = -1) -> list[XidEvent] | None:
        """The XID events the probe has queued, without sampling (waits at most ``timeout_ms`` for the first).

        None when the probe stayed busy for ``lock_timeout`` seconds (negative: wait as long as it takes): a sample
        in progress on a slow or hung driver, which a heartbeat must not wait for.
        """
        if not self._lock.acquire(timeout=lock_timeout):
            return None
        try:
            return self.probe.xid_events(timeout_ms)
        finally:
            self._lock.release()

    def mark(self, gpus: tuple[int, ...], busy: bool, pid: int | None, memory_limit_mib: int | None = None) -> None:
        """The runner's ``on_gpus`` hook. Only a simulated probe has ``set_busy``; real GPUs show real load.
        ``memory_limit_mib``: a share's MPS memory limit, which its simulated process then stays within."""
        set_busy = getattr(self.probe, "set_busy", None)
        if set_busy is None:
            return
        with self._lock:
            for gpu in gpus:
                users = self._users.setdefault(gpu, {})
                limits = self._limits.setdefault(gpu, {})
                users[pid] = users.get(pid, 0) + (1 if busy else -1)
                if users[pid] <= 0:
                    del users[pid]
                    if pid is not None:
                        limits.pop(pid, None)
                elif memory_limit_mib is not None and pid is not None:
                    limits[pid] = memory_limit_mib
                set_busy(gpu, bool(users), [p for p in users if p is not None], limits)

    def close(self) -> None:
        with self._lock:
            self.probe.close()


def _with_xid(sample: GpuSample, xid: int) -> GpuSample:
    return sample if not xid or sample.xid else replace(sample, xid=xid)


class TelemetryShipper:
    """Samples through a :class:`ProbeGate` and ships to the portal. :meth:`tick` is one period's work."""

    def __init__(
        self,
        gate: ProbeGate,
        client: PortalClient,
        *,
        interval: float | None = None,
        sample_capacity: int = SAMPLE_CAPACITY,
        xid_capacity: int = XID_CAPACITY,
        samples_per_post: int = SAMPLES_PER_POST,
        wall_clock: Callable[[], float] = time.time,
    ) -> None:
        self.gate = gate
        self.client = client
        #: Fixed by ``--sample-interval``; otherwise taken from each registration (the portal's setting).
        self.fixed_interval = interval
        self.interval = interval or 10.0
        self.samples: SendBuffer[GpuSample] = SendBuffer(sample_capacity)
        self.xids: SendBuffer[XidEvent] = SendBuffer(xid_capacity)
        self.samples_per_post = samples_per_post
        self.wall_clock = wall_clock
        self.failing = False
        #: Held while a batch is in flight: the outboxes' peek/ack pairs must not interleave between the shipper
        #: thread (:meth:`ship`) and the heartbeat loop (:meth:`flush_xids`).
        self._shipping = threading.Lock()
        #: Set by the first registration: before it the portal does not know this node's GPUs and would reject
        #: their samples, so they wait in the outbox.
        self.registered = threading.Event()

    def on_registered(self, registration: Registration) -> None:
        if self.fixed_interval is None:
            self.interval = registration.sample_interval
        self.registered.set()

    @property
    def dropped(self) -> int:
        return self.samples.dropped + self.xids.dropped

    def sample_once(self) -> None:
        """Read every GPU and the XIDs since the last call into the outboxes. A probe error skips one period."""
        try:
            samples, events = self.gate.sample(self.wall_clock())
        except Exception:  # a driver hiccup must not end telemetry for the agent's lifetime
            log.exception("GPU probe failed; skipping this sample")
            return
        self._buffer(samples, events)

    def _buffer(self, samples: list[GpuSample], events: list[XidEvent]) -> None:
        dropped = self.samples.push(samples) + self.xids.push(events)
        if dropped:
            log.warning("telemetry buffer full; dropped %d oldest item(s) (%d in total)", dropped, self.dropped)

    def flush_xids(
        self, client: PortalClient, *, wait_ms: int = FLUSH_WAIT_MS, lock_timeout: float = FLUSH_LOCK_TIMEOUT
    ) -> bool:
        """Drain the probe's pending XID events into the outbox and ship the whole XID outbox now, through
        ``client`` (the caller's own: one client per thread). Samples stay for the next tick.

        The heartbeat loop calls this before it first reports a non-zero exit, so that a fatal XID that killed the
        job reaches the portal before the exit does. Returns True when the probe was read and every buffered XID
        was accepted; False otherwise (the probe or a POST of the shipper still busy after ``lock_timeout``, not
        registered yet, the portal unreachable). Nothing is lost then: the events stay in the probe or in the bounded
        outbox, oldest dropped first and counted, as always.
        """
        try:
            events = self.gate.xid_events(wait_ms, lock_timeout=lock_timeout)
            if events is None:
                log.warning("GPU probe busy; reporting an exit without waiting for its XID events")
        except Exception:  # a driver hiccup must not cost the exit report
            log.exception("GPU probe failed while reading XID events")
            events = None
        probe_read = events is not None
        self._buffer([], events or [])
        if not self.registered.is_set() or not self._shipping.acquire(timeout=lock_timeout):
            return False
        try:
            for _ in range(MAX_POSTS_PER_TICK):
                xids = self.xids.peek(self.samples_per_post)
                if not xids.items:
                    return probe_read
                try:
                    client.post_samples([], [event.to_dict() for event in xids.items], dropped=self.dropped)
                except (PortalUnavailable, RegisterAgain, PortalRefused) as exc:
                    level = logging.DEBUG if self.failing else logging.WARNING  # the outage is logged already
                    log.log(level, "cannot ship %d XID event(s) ahead of an exit report (%s)", len(xids), exc)
                    return False
                self.xids.ack(xids)
            return probe_read and len(self.xids) == 0
        finally:
            self._shipping.release()

    def ship(self) -> bool:
        """Send what is buffered, oldest first. Returns False if the portal could not take it (kept for later)."""
        if not self.registered.is_set():
            return False
        with self._shipping:
            return self._ship()

    def _ship(self) -> bool:
        for _ in range(MAX_POSTS_PER_TICK):
            samples = self.samples.peek(self.samples_per_post)
            xids = self.xids.peek(self.samples_per_post)
            if not samples.items and not xids.items:
                return True
            try:
                self.client.post_samples(
                    [sample.to_dict() for sample in samples.items],
                    [event.to_dict() for event in xids.items],
                    dropped=self.dropped,
                )
            except (PortalUnavailable, RegisterAgain, PortalRefused) as exc:
                # Once per outage at WARNING: the heartbeat loop already reports the outage on its own cadence.
                level = logging.DEBUG if self.failing else logging.WARNING
                log.log(level, "cannot ship telemetry (%s); %d sample(s) buffered", exc, len(self.samples))
                self.failing = True
                return False
            self.samples.ack(samples)
            self.xids.ack(xids)
            if self.failing:
                log.info("telemetry shipping resumed (%d dropped while the portal was away)", self.dropped)
                self.failing = False
        return True

    def tick(self) -> None:
        self.sample_once()
        self.ship()

    def run(self, stop: threading.Event) -> None:
        """Tick every ``interval`` seconds (re-read each time: a registration may change it) until ``stop``."""
        next_tick = time.monotonic()
        while not stop.is_set():
            try:
                self.tick()
            except Exception:  # telemetry must outlive a bug in one period's data
                log.exception("telemetry tick failed")
            next_tick = max(next_tick + self.interval, time.monotonic())
            stop.wait(next_tick - time.monotonic())


def gpu_descriptors(probe: GpuProbe) -> list[GpuDescriptor]:
    """The probe's inventory in the register call's terms."""
    return [GpuDescriptor(gpu.index, gpu.uuid, gpu.model, gpu.memory_mb) for gpu in probe.inventory()]
