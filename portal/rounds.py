"""Coalesced requests for a scheduling round: however many changes commit, one round runs and the next follows soon.

Every change that may let a job start (a submission, an exit, a cancel, a node coming back) asks for a round. Asking
used to queue one Celery task per change, so a burst of 500 submissions per second queued 500 full rounds that each
re-read the whole cluster. Now a request sets a flag in the shared cache (Redis in production, a file cache in the
embedded default) and queues a round only when the flag was not already set; the round clears the flag once it holds
the scheduler lease and *before* it reads the cluster. So:

- a change committed before the flag is cleared is in that round's snapshot;
- a change committed after it sets the flag again and queues the next round;
- at most one round is queued and one runs, whatever the submission rate.

The flag expires after :data:`REQUEST_TTL` seconds, so a lost message (a broker outage, a worker killed mid-task)
delays rounds by at most that long; the beat round runs whenever the flag is set, and at least every
``CORRAL_IDLE_ROUND_EVERY`` seconds regardless. When the cache cannot be reached, a request queues its round
directly (the old behaviour) and the beat round runs as if asked.

The round that takes a request marks the start forecast stale (:func:`take_forecast_staleness`): with nothing
changed, the forecast's answers still hold (they are absolute times), so the periodic refresh can skip its work.
"""

from __future__ import annotations

import contextlib
import logging
import time
from datetime import UTC, datetime

from celery import current_app
from django.conf import settings
from django.core.cache import cache
from django.db import transaction

from portal.queue import SCHEDULE_ROUND, enqueue, enqueue_later

logger = logging.getLogger(__name__)

#: Cache keys (the cache's KEY_PREFIX, the database name, keeps two sites on one Redis apart).
ROUND_REQUESTED = "corral:round-requested"
FORECAST_STALE = "corral:forecast-stale"
FORECAST_RAN_AT = "corral:forecast-ran-at"
#: Seconds a request flag lives: the longest a lost round message can delay scheduling.
REQUEST_TTL = 30
#: A forecast flag outlives many forecast periods: the refresh clears it, and a missing flag means "fresh".
FORECAST_TTL = 24 * 3600


def request_round() -> None:
    """Ask for a scheduling round after the current transaction commits (at once outside one).

    Never for a change that rolled back; robust, like ``enqueue_on_commit``: if the cache or the broker is briefly
    unreachable the change still stands and the beat round places the job a few seconds later.
    """
    transaction.on_commit(_request_now, robust=True)


def _request_now() -> None:
    if current_app.conf.task_always_eager:  # the round runs here and now: nothing to coalesce, no flag to leave
        enqueue(SCHEDULE_ROUND)
        return
    try:
        first = cache.add(ROUND_REQUESTED, 1, timeout=REQUEST_TTL)  # one cache round trip per change
    except Exception:  # the cache is down: fall back to one round per request rather than none
        logger.warning("round request: cache unreachable, queueing a round directly", exc_info=True)
        enqueue(SCHEDULE_ROUND)
        return
    if first:
        enqueue_later(SCHEDULE_ROUND, countdown=settings.CORRAL_ROUND_COALESCE_SECONDS)


def round_requested() -> bool:
    """Whether a round was asked for and none has started since (True when the cache cannot tell)."""
    try:
        return bool(cache.get(ROUND_REQUESTED))
    except Exception:
        return True


def take_round_request() -> None:
    """Clear the request flag: called by a round holding the lease, before it reads the cluster. A request means
    something changed, so the start forecast no longer holds either."""
    try:
        if cache.delete(ROUND_REQUESTED):
            cache.set(FORECAST_STALE, 1, timeout=FORECAST_TTL)
    except Exception:
        logger.warning("round request: cache unreachable, flag not cleared", exc_info=True)


def retry_round_if_requested() -> None:
    """A round that found the lease held by another leaves the request standing; try again shortly, so a change
    committed while the other round was reading is placed without waiting for the beat."""
    if round_requested():
        enqueue_later(SCHEDULE_ROUND, countdown=max(0.2, settings.CORRAL_ROUND_COALESCE_SECONDS))


def mark_forecast_stale() -> None:
    """Say that the start forecast no longer holds (a round started or preempted jobs)."""
    try:
        cache.set(FORECAST_STALE, 1, timeout=FORECAST_TTL)
    except Exception:
        logger.warning("forecast flag: cache unreachable", exc_info=True)


def take_forecast_staleness() -> bool:
    """Whether the forecast is stale, clearing the flag (the caller refreshes now). True when the cache cannot
    tell, or was emptied (a restart of Redis): refreshing once too often is harmless."""
    try:
        stale = cache.get(FORECAST_STALE, default=None)
        cache.set(FORECAST_STALE, 0, timeout=FORECAST_TTL)
    except Exception:
        return True
    return stale is None or bool(stale)


_ran_at_memo: tuple[float, datetime | None] = (-1.0, None)  # (monotonic read time, value): pages read it per job


def note_forecast_ran(at: datetime) -> None:
    """Record that every pending job's stored forecast held as of ``at`` (refreshed, or confirmed unchanged)."""
    global _ran_at_memo
    _ran_at_memo = (time.monotonic(), at)  # this process knows at once; others within a second
    try:
        cache.set(FORECAST_RAN_AT, at.timestamp(), timeout=FORECAST_TTL)
    except Exception:
        logger.warning("forecast stamp: cache unreachable", exc_info=True)


def forecast_ran_at() -> datetime | None:
    """When the forecasts were last known to hold; None when unknown (never ran, or the cache cannot tell). Read
    at most once a second per process: a list page asks for every pending job it shows."""
    global _ran_at_memo
    read_at, value = _ran_at_memo
    if time.monotonic() - read_at < 1.0:
        return value
    try:
        stamp = cache.get(FORECAST_RAN_AT)
    except Exception:
        stamp = None
    value = None if stamp is None else datetime.fromtimestamp(float(stamp), tz=UTC)
    _ran_at_memo = (time.monotonic(), value)
    return value


def forget_round_flags() -> None:
    """Clear every flag and stamp of this module (tests: each starts as a fresh site)."""
    global _ran_at_memo
    _ran_at_memo = (-1.0, None)
    with contextlib.suppress(Exception):  # a test may point the cache at nothing
        cache.delete_many([ROUND_REQUESTED, FORECAST_STALE, FORECAST_RAN_AT])
