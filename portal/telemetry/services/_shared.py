"""Helpers the service modules of this package share (private to it): settings read at call time, and the
conversions between the agents' epoch seconds and the database's aware datetimes."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from django.conf import settings


def _setting(name: str, default: Any) -> Any:
    """Telemetry settings are optional (``getattr`` with a default) and read at call time."""
    return getattr(settings, name, default)


def _dt(epoch_s: float) -> datetime:
    return datetime.fromtimestamp(epoch_s, tz=UTC)


def _epoch(value: datetime) -> float:
    return value.timestamp()
