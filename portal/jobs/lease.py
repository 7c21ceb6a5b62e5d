"""The scheduler's single-leader lease.

Only one scheduling round may apply decisions at a time, or two rounds could hand the same free GPU to two jobs
(the allocation constraint would catch it, but a round should not rely on being caught). On PostgreSQL the lease
is a transaction-scoped advisory lock, taken without waiting: a round that finds it held simply skips, and the
lock dies with its transaction, so a crashed worker can never leave it stuck. SQLite (the embedded development
default) serialises writers itself, because every transaction there begins IMMEDIATE (see settings).
"""

from __future__ import annotations

from django.db import connection

#: Arbitrary constant identifying Corral's scheduler among advisory locks ("corral" in ASCII).
LEASE_KEY = 0x636F7272616C


def try_acquire_round_lease() -> bool:
    """Take the lease for the current transaction; False when another round holds it.

    Precondition: called inside ``transaction.atomic()``.
    """
    if connection.vendor != "postgresql":
        return True
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_try_advisory_xact_lock(%s)", [LEASE_KEY])
        (acquired,) = cursor.fetchone()
    return bool(acquired)


def hold_round_lease() -> None:
    """Wait for the lease, then hold it until the current transaction ends.

    For changes that must not interleave with a round that has already read the cluster — e.g. draining a GPU and
    requeueing its jobs: either the round finished first (its new allocation is seen and requeued) or it starts
    after (its snapshot sees the GPU drained). Precondition: called inside ``transaction.atomic()``.
    """
    if connection.vendor != "postgresql":
        return
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_advisory_xact_lock(%s)", [LEASE_KEY])
