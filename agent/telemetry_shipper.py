"""GPU telemetry: sample the probe every period, buffer, ship batches to ``POST /api/v1/agent/samples/``.

It runs in its own thread so a slow or hanging samples POST never delays a heartbeat (which would get the node
marked down). While the portal is unreachable samples accumulate in bounded :class:`telemetry.buffer.SendBuffer`
outboxes that drop the oldest first and count every drop; the count travels with every batch as ``dropped``.
Samples and XID events have separate outboxes: a flood of samples during a long outage must not push out the
one XID 79 that explains why a job died.

The probes are not thread-safe, and the loop thread marks simulated GPUs busy while the shipper samples them, so
every probe call goes through :class:`ProbeGate`.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

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


class ProbeGate:
    """Serialises calls to a probe from the loop thread (busy flags) and the shipper thread (sampling)."""

    def __init__(self, probe: GpuProbe) -> None:
        self.probe = probe
        self._lock = threading.Lock()
        self._users: dict[int, dict[int | None, int]] = {}  # gpu -> {task pid: count}, for GPUs shared by tasks

    def sample(self, now: float) -> tuple[list[GpuSample], list[XidEvent]]:
        with self._lock:
            return self.probe.sample(now), self.probe.xid_events(0)

    def mark(self, gpus: tuple[int, ...], busy: bool, pid: int | None) -> None:
        """The runner's ``on_gpus`` hook. Only a simulated probe has ``set_busy``; real GPUs show real load."""
        set_busy = getattr(self.probe, "set_busy", None)
        if set_busy is None:
            return
        with self._lock:
            for gpu in gpus:
                users = self._users.setdefault(gpu, {})
                users[pid] = users.get(pid, 0) + (1 if busy else -1)
                if users[pid] <= 0:
                    del users[pid]
                set_busy(gpu, bool(users), [p for p in users if p is not None])

    def close(self) -> None:
        with self._lock:
            self.probe.close()


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
        dropped = self.samples.push(samples) + self.xids.push(events)
        if dropped:
            log.warning("telemetry buffer full; dropped %d oldest item(s) (%d in total)", dropped, self.dropped)

    def ship(self) -> bool:
        """Send what is buffered, oldest first. Returns False if the portal could not take it (kept for later)."""
        if not self.registered.is_set():
            return False
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
