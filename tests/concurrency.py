"""Run one function in several threads released at the same instant, for the race tests on PostgreSQL."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TypeVar

from django.db import connection

T = TypeVar("T")


def run_together(fn: Callable[[], T], threads: int) -> list[T | BaseException]:
    """Call ``fn`` once in each of ``threads`` threads, all let go by one barrier so they really race.

    Each thread closes its own database connection when done (Django opens one per thread, and a left-open one
    blocks the test database's teardown). Returns what each call returned, or the exception it raised, in the order
    the calls finished.
    """
    barrier = threading.Barrier(threads)
    outcomes: list[T | BaseException] = []

    def one() -> None:
        try:
            barrier.wait()
            outcomes.append(fn())
        except BaseException as error:  # noqa: BLE001 - handed back to the test to assert on
            outcomes.append(error)
        finally:
            connection.close()

    workers = [threading.Thread(target=one) for _ in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    return outcomes
