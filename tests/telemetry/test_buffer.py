from __future__ import annotations

import threading

import pytest
from hypothesis import given
from hypothesis import strategies as st

from telemetry.buffer import SendBuffer


def test_peek_then_ack_ships_in_order_without_loss() -> None:
    buf: SendBuffer[int] = SendBuffer(10)
    buf.push(range(5))
    batch = buf.peek(3)
    assert batch.items == (0, 1, 2) and (batch.first_seq, batch.last_seq) == (0, 2)
    assert len(buf) == 5  # still there until acknowledged
    assert buf.ack(batch) == 3
    assert buf.peek(10).items == (3, 4)


def test_failed_send_keeps_items_for_the_next_attempt() -> None:
    buf: SendBuffer[str] = SendBuffer(4)
    buf.push(["a", "b"])
    first = buf.peek(10)
    # POST failed: no ack. The next attempt sees the same items plus new ones.
    buf.push(["c"])
    assert buf.peek(10).items == ("a", "b", "c")
    assert first.items == ("a", "b")


def test_overflow_drops_oldest_and_counts() -> None:
    buf: SendBuffer[int] = SendBuffer(3)
    assert buf.push(range(5)) == 2
    assert buf.peek(10).items == (2, 3, 4)
    assert buf.dropped == 2 and buf.peek(1).dropped_total == 2


def test_ack_after_head_was_dropped_removes_only_what_was_sent() -> None:
    buf: SendBuffer[int] = SendBuffer(3)
    buf.push([0, 1, 2])
    in_flight = buf.peek(2)  # 0, 1
    buf.push([3, 4])  # overflow evicts 0 and 1 while the POST is in flight
    assert buf.ack(in_flight) == 0
    assert buf.peek(10).items == (2, 3, 4)
    assert buf.dropped == 0  # the POST succeeded, so 0 and 1 did arrive


def test_items_evicted_from_a_failed_send_count_as_dropped() -> None:
    buf: SendBuffer[int] = SendBuffer(3)
    buf.push([0, 1, 2])
    buf.peek(2)  # 0, 1 in flight; the POST fails (no ack)
    buf.push([3, 4])
    assert buf.dropped == 0  # not known yet
    retry = buf.peek(10)
    assert retry.items == (2, 3, 4) and retry.dropped_total == 2 and buf.dropped == 2


def test_empty_peek() -> None:
    buf: SendBuffer[int] = SendBuffer(2)
    batch = buf.peek(5)
    assert len(batch) == 0 and buf.ack(batch) == 0


def test_invalid_sizes() -> None:
    with pytest.raises(ValueError, match="capacity"):
        SendBuffer(0)
    with pytest.raises(ValueError, match="max_items"):
        SendBuffer(1).peek(0)


@given(st.integers(1, 20), st.lists(st.tuples(st.integers(0, 8), st.integers(1, 8), st.booleans()), max_size=40))
def test_every_item_is_shipped_exactly_once_or_counted_as_dropped(
    capacity: int, rounds: list[tuple[int, int, bool]]
) -> None:
    buf: SendBuffer[int] = SendBuffer(capacity)
    produced, shipped, counter = 0, [], 0
    for n_new, batch_size, post_ok in rounds:
        buf.push(range(counter, counter + n_new))
        counter += n_new
        produced += n_new
        batch = buf.peek(batch_size)
        if post_ok:
            buf.ack(batch)
            shipped.extend(batch.items)
    remaining = list(buf.peek(capacity).items)
    assert shipped == sorted(set(shipped))  # in order, no duplicates
    assert len(shipped) + len(remaining) + buf.dropped == produced


def test_concurrent_push_and_ship_lose_nothing_unaccounted() -> None:
    buf: SendBuffer[int] = SendBuffer(50)
    shipped: list[int] = []
    done = threading.Event()

    def producer() -> None:
        for i in range(5_000):
            buf.push([i])
        done.set()

    def shipper() -> None:
        while not done.is_set() or len(buf):
            batch = buf.peek(17)
            buf.ack(batch)
            shipped.extend(batch.items)

    threads = [threading.Thread(target=producer), threading.Thread(target=shipper)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(set(shipped)) == len(shipped)
    assert len(shipped) + buf.dropped == 5_000
