"""The agent's outbox: a bounded queue of samples (or events) waiting to reach the control plane.

When the control plane is unreachable the agent keeps sampling; the buffer holds what it can and, once full, drops
the *oldest* items (recent telemetry is worth more to the health checks than hour-old telemetry), counting every
drop. Shipping is two-phase so nothing is lost on a failed POST: :meth:`SendBuffer.peek` hands out a
:class:`Batch` without removing it, and :meth:`SendBuffer.ack` removes it only after the control plane accepted it.
Items carry sequence numbers, so an ack stays correct even if the batch's head was dropped while the POST was in
flight, and the control plane can see gaps. The batch also carries the running drop count, so drops are reported
upstream rather than only logged on the node.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Generic, TypeVar

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Batch(Generic[T]):
    """Items ``first_seq .. last_seq`` (inclusive, with no gaps unless ``items`` is empty) plus the number of items
    this buffer has dropped since it was created."""

    items: tuple[T, ...]
    first_seq: int
    last_seq: int
    dropped_total: int

    def __len__(self) -> int:
        return len(self.items)


class SendBuffer(Generic[T]):
    """A thread-safe bounded FIFO with drop-oldest overflow and acknowledged removal.

    The sampling thread calls :meth:`push`; the shipping thread calls :meth:`peek` then :meth:`ack`.
    """

    def __init__(self, capacity: int) -> None:
        if capacity < 1:
            raise ValueError("capacity must be at least 1")
        self._capacity = capacity
        self._items: deque[tuple[int, T]] = deque()
        self._next_seq = 0
        self._dropped = 0
        # Items evicted while they were part of the batch being sent. Whether they are lost depends on that send:
        # an ack means they arrived, a new peek (the send failed and is retried) means they are gone.
        self._in_flight_last = -1
        self._evicted_in_flight = 0
        self._lock = threading.Lock()

    @property
    def capacity(self) -> int:
        return self._capacity

    @property
    def dropped(self) -> int:
        """Items lost because the buffer was full, since creation (an item evicted while its batch is in flight is
        counted once that send turns out to have failed)."""
        with self._lock:
            return self._dropped

    def __len__(self) -> int:
        with self._lock:
            return len(self._items)

    def push(self, items: Iterable[T]) -> int:
        """Append items, evicting the oldest when full. Returns how many were evicted by this call."""
        evicted = 0
        with self._lock:
            for item in items:
                if len(self._items) >= self._capacity:
                    seq, _ = self._items.popleft()
                    evicted += 1
                    if seq <= self._in_flight_last:
                        self._evicted_in_flight += 1
                    else:
                        self._dropped += 1
                self._items.append((self._next_seq, item))
                self._next_seq += 1
        return evicted

    def peek(self, max_items: int) -> Batch[T]:
        """The oldest ``max_items`` items, left in place until :meth:`ack`."""
        if max_items < 1:
            raise ValueError("max_items must be at least 1")
        with self._lock:
            # A new peek means the previous batch was not acknowledged: what was evicted from it is lost.
            self._dropped += self._evicted_in_flight
            self._evicted_in_flight = 0
            head = [self._items[i] for i in range(min(max_items, len(self._items)))]
            if not head:
                self._in_flight_last = -1
                return Batch(
                    items=(), first_seq=self._next_seq, last_seq=self._next_seq - 1, dropped_total=self._dropped
                )
            self._in_flight_last = head[-1][0]
            return Batch(
                items=tuple(item for _, item in head),
                first_seq=head[0][0],
                last_seq=head[-1][0],
                dropped_total=self._dropped,
            )

    def ack(self, batch: Batch[T]) -> int:
        """Remove every item up to ``batch.last_seq`` still present (the control plane has them). Returns how many
        were removed. Items evicted while this batch was in flight were delivered, so they are not counted as
        dropped."""
        removed = 0
        with self._lock:
            while self._items and self._items[0][0] <= batch.last_seq:
                self._items.popleft()
                removed += 1
            if batch.last_seq >= self._in_flight_last:
                self._evicted_in_flight = 0
                self._in_flight_last = -1
        return removed
