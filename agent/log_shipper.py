"""Task output to the portal: each task's new log bytes, megabytes at a time, beside the heartbeat. Ref: #15

Heartbeats once carried the output, as JSON text capped at 256 KiB a beat: about 260 KB/s per node, so a chatty
job's last 50 MB reached the portal minutes after it ended. :class:`LogShipper` runs in a thread of its own and
POSTs the raw bytes of each task's ``output.log`` to ``POST /api/v1/agent/logs/`` in chunks of up to
:data:`LOG_POST_BYTES`, back to back while there is a backlog, so the portal gets a job's output as fast as it can
store it. The heartbeat keeps reporting every task with its ``log_size`` (and, from :meth:`LogShipper.held`, the
offset the portal holds) but no longer carries the bytes, so the portal learns the final size of a log at the exit
and can say "output still arriving" until the last chunk has landed; it sends ``forget`` only once it holds all of
it, and only then does the agent drop the task.

Rules, the same as the heartbeat's: every POST says where its bytes start in the file; the portal stores them only
at the offset it holds and always answers that offset, which is where the next POST starts (so a lost answer, a
retry, or a restarted portal cost a resend, never a gap or a duplicate). A chunk ends on a whole UTF-8 character
while the task still writes (``agent.task_log.read_bytes``).

Pacing: a chunk goes at once when a task has a full one waiting or has exited; a task that prints a little at a time
is sent at most every :data:`LINGER_SECONDS`, so a job printing line by line does not cost a request per line. Tasks
take turns, one chunk each, so one chatty job cannot starve the others.

Threads: the heartbeat loop (the only thread that touches the runner) calls :meth:`LogShipper.sync` with the tasks
it tracks; the shipper reads each log through a duplicate of the runner's descriptor (opened before the job ran, so
a job cannot swap its log for a symlink) and closes it when the task is gone. One lock guards the table and every
read of a descriptor, so a descriptor is never closed, and its number reused, under a read.

Compatibility: a portal without the endpoint answers 404 without a ``code``. The shipper then stands down
(:attr:`LogShipper.available` is False), the heartbeat carries the log as it used to, and the endpoint is tried again
every :data:`ENDPOINT_RETRY_SECONDS`.
"""

from __future__ import annotations

import logging
import os
import random
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from agent.client import (
    LOG_POST_MAX_BYTES,
    PortalClient,
    PortalRefused,
    PortalUnavailable,
    RegisterAgain,
    TaskKey,
)
from agent.runner import Task
from agent.task_log import read_bytes

log = logging.getLogger(__name__)

#: Bytes per POST at most (the protocol allows :data:`agent.client.LOG_POST_MAX_BYTES`).
LOG_POST_BYTES = 4 * 2**20
#: The smallest chunk a 413 (a portal or a proxy with a lower body limit) can shrink the POSTs to.
MIN_POST_BYTES = 64 * 2**10
#: A task with less than a full chunk waiting, still running, is sent at most this often.
LINGER_SECONDS = 1.0
#: How often the shipper looks for new output when nothing is due.
POLL_SECONDS = 0.2
#: A task the portal says this node does not run is tried again after this long (the heartbeat settles its fate).
REFUSED_RETRY_SECONDS = 60.0
#: How long the shipper stands down after finding no log endpoint on the portal.
ENDPOINT_RETRY_SECONDS = 600.0
#: Backoff while the portal is unreachable: from the first, doubling, up to the last.
BACKOFF_SECONDS = (1.0, 30.0)


@dataclass(eq=False)
class _Shipment:
    """One task's log as the shipper sees it. ``fd`` is the shipper's own descriptor (None for a task that failed
    to start: ``error`` is then its whole log)."""

    key: TaskKey
    fd: int | None
    error: str | None
    growing: bool
    held: int = 0  # bytes the portal holds, as far as we know
    size: int = 0  # bytes in the file when last looked at
    last_post: float = 0.0
    retry_at: float = 0.0


class LogShipper:
    """Ships the logs of the tasks the heartbeat loop tracks. :meth:`tick` is one round; :meth:`run` loops it."""

    def __init__(
        self,
        client: PortalClient,
        *,
        post_bytes: int = LOG_POST_BYTES,
        linger: float = LINGER_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.client = client
        self.post_bytes = max(MIN_POST_BYTES, min(post_bytes, LOG_POST_MAX_BYTES))
        self.linger = linger
        self.clock = clock
        #: False while the portal has no log endpoint: the heartbeat then carries the log (see the module docstring).
        self.available = True
        self._retry_endpoint_at = 0.0
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._shipments: dict[TaskKey, _Shipment] = {}
        self._turn = 0
        self._failures = 0
        #: Bytes the portal has acknowledged over this shipper's life (for logs and benchmarks).
        self.shipped = 0

    # --- the heartbeat loop's side ------------------------------------------------------------------------------
    def sync(self, tasks: Mapping[TaskKey, Task], *, acknowledged: Mapping[TaskKey, int] | None = None) -> None:
        """Take the loop's tasks: ship the new ones, note those that exited, close the logs of those it dropped.
        ``acknowledged``: offsets the portal answered in heartbeats (never lower what a POST answered since)."""
        with self._lock:
            for key in self._shipments.keys() - tasks.keys():
                self._close(self._shipments.pop(key))
            for key, task in tasks.items():
                shipment = self._shipments.get(key)
                if shipment is None:
                    shipment = self._open(key, task)
                    if shipment is None:
                        continue
                    self._shipments[key] = shipment
                    self._wake.set()
                if shipment.growing and not task.alive:
                    shipment.growing = False
                    self._wake.set()  # its last bytes go now, without lingering
                if acknowledged and key in acknowledged:
                    shipment.held = max(shipment.held, acknowledged[key])

    def held(self, key: TaskKey) -> int:
        """Bytes of ``key``'s log the portal holds, as far as the shipper knows (0 for a task it has not seen)."""
        with self._lock:
            shipment = self._shipments.get(key)
            return shipment.held if shipment is not None else 0

    def close(self) -> None:
        """Close every log descriptor (at shutdown)."""
        with self._lock:
            for shipment in self._shipments.values():
                self._close(shipment)
            self._shipments.clear()

    def _open(self, key: TaskKey, task: Task) -> _Shipment | None:
        if task.error is not None:
            return _Shipment(key, None, task.error, growing=False, last_post=self.clock())
        if task.log_fd is None:
            return None  # nothing to read yet: tried again at the next sync
        try:
            fd = os.dup(task.log_fd)
        except OSError as exc:
            log.error("cannot ship the log of task %s: %s", key.wire, exc)
            return None
        return _Shipment(key, fd, None, growing=task.alive, last_post=self.clock())

    @staticmethod
    def _close(shipment: _Shipment) -> None:
        if shipment.fd is not None:
            os.close(shipment.fd)
            shipment.fd = None

    # --- the shipper thread -------------------------------------------------------------------------------------
    def tick(self) -> float:
        """Send at most one chunk (the next task's in turn that has one due). Returns how long to wait: 0 when more
        is due at once."""
        now = self.clock()
        if not self.available:
            if now < self._retry_endpoint_at:
                return POLL_SECONDS
            self.available = True  # perhaps the portal was upgraded: try again
        picked = self._next_chunk(now)
        if picked is None:
            return POLL_SECONDS
        shipment, offset, data = picked
        try:
            held = self.client.post_log(shipment.key, offset, data)
        except (PortalUnavailable, RegisterAgain) as exc:
            return self._unreachable(exc)
        except PortalRefused as exc:
            return self._refused(shipment, exc)
        if self._failures:
            log.info("log shipping resumed")
            self._failures = 0
        with self._lock:
            shipment.last_post = self.clock()
            if held > shipment.held:
                self.shipped += held - shipment.held
                shipment.held = held
            elif held < offset:  # the portal holds less than we thought: send from where it is
                shipment.held = held
        return 0.0

    def _next_chunk(self, now: float) -> tuple[_Shipment, int, bytes] | None:
        """The next shipment in turn with bytes due, the offset they start at, and the bytes."""
        with self._lock:
            shipments = list(self._shipments.values())
            for step in range(len(shipments)):
                shipment = shipments[(self._turn + step) % len(shipments)]
                if now < shipment.retry_at:
                    continue
                if shipment.fd is not None:
                    try:
                        shipment.size = os.fstat(shipment.fd).st_size
                    except OSError:
                        continue
                elif shipment.error is not None:
                    shipment.size = len(shipment.error.encode())
                waiting = shipment.size - shipment.held
                due = waiting >= self.post_bytes or not shipment.growing or now - shipment.last_post >= self.linger
                if waiting <= 0 or not due:
                    continue
                data, _ = read_bytes(
                    shipment.fd, shipment.held, self.post_bytes, error=shipment.error, growing=shipment.growing
                )
                if data:
                    self._turn += step + 1
                    return shipment, shipment.held, data
        return None

    def _unreachable(self, exc: Exception) -> float:
        # Once per outage at WARNING: the heartbeat loop reports the outage on its own cadence.
        log.log(logging.DEBUG if self._failures else logging.WARNING, "cannot ship logs (%s); retrying", exc)
        self._failures += 1
        first, most = BACKOFF_SECONDS
        return min(most, first * 2 ** (self._failures - 1)) * random.uniform(0.8, 1.2)

    def _refused(self, shipment: _Shipment, exc: PortalRefused) -> float:
        if exc.status in (404, 405) and exc.code is None:
            log.warning("the portal has no log endpoint (%s); logs go with the heartbeats", exc)
            self.available = False
            self._retry_endpoint_at = self.clock() + ENDPOINT_RETRY_SECONDS
            return POLL_SECONDS
        if exc.status == 413 and self.post_bytes > MIN_POST_BYTES:
            self.post_bytes = max(MIN_POST_BYTES, self.post_bytes // 2)
            log.warning("the portal refused a log chunk as too large; sending %d bytes at most", self.post_bytes)
            return 0.0
        if exc.status == 404:
            log.warning("the portal does not know task %s on this node (%s)", shipment.key.wire, exc)
            with self._lock:
                shipment.retry_at = self.clock() + REFUSED_RETRY_SECONDS
            return 0.0
        log.error("log chunk refused: %s", exc)
        return self._unreachable(exc)

    def run(self, stop: threading.Event) -> None:
        """Tick until ``stop`` is set: back to back while chunks are due, else looking for new output every
        :data:`POLL_SECONDS` (at once when the loop hands over a new or exited task), and after a failure waiting
        out the backoff."""
        next_at = self.clock()
        while not stop.is_set():
            if self.clock() >= next_at:
                try:
                    delay = self.tick()
                except Exception:  # shipping logs must outlive a bug in one round
                    log.exception("log shipping failed")
                    delay = BACKOFF_SECONDS[0]
                next_at = self.clock() + delay
                if delay <= 0:
                    continue
            if self._wake.wait(max(0.0, min(POLL_SECONDS, next_at - self.clock()))):
                self._wake.clear()
                if not self._failures:
                    next_at = self.clock()
        self.close()
