"""Parsing of one agent telemetry batch (``POST /api/v1/agent/samples/``, docs/agent-protocol.md).

Validated with the wire format's own ``from_dict`` (the one definition shared with the agent), plus the bounds of
the columns the values go to: bad input is a 400 naming the field, never a 500.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from rest_framework.exceptions import ValidationError

from portal.telemetry.models import Sample
from telemetry.fields import METRIC_NAMES
from telemetry.sample import GpuSample, XidEvent

#: Far above what an agent sends in one POST (500), low enough that one request cannot hold the node's lock long.
MAX_ITEMS_PER_BATCH = 10_000
#: Seconds since the epoch a timestamp may take: 1970 up to about 2514, well inside what the database stores.
TIMESTAMP_RANGE = (0.0, float(2**34))
INT_RANGE = {"IntegerField": 2**31 - 1, "BigIntegerField": 2**63 - 1}
#: Each integer reading's column bound. ``from_dict`` checks types only; a value its column cannot hold must be a
#: 400 here, not a failed COPY (a 500) later.
INT_LIMITS = {
    name: INT_RANGE[Sample._meta.get_field(name).get_internal_type()]
    for name in METRIC_NAMES
    if Sample._meta.get_field(name).get_internal_type() in INT_RANGE
}

T = TypeVar("T")


def _check_time(value: float) -> None:
    if not TIMESTAMP_RANGE[0] < value < TIMESTAMP_RANGE[1]:
        raise ValueError("'timestamp' is out of range (seconds since 1970)")


def _check_uuid(value: str) -> None:
    # PostgreSQL text cannot hold NUL: looking such a uuid up fails in the database (a 500), so it is a 400 here.
    if "\x00" in value:
        raise ValueError("'gpu_uuid' must not contain NUL characters")


def _sample(item: Any) -> GpuSample:
    sample = GpuSample.from_dict(item)
    _check_uuid(sample.gpu_uuid)
    _check_time(sample.timestamp)
    for name, limit in INT_LIMITS.items():
        value = getattr(sample, name)
        if value is not None and not -limit <= value <= limit:
            raise ValueError(f"{name!r} is out of range")
    if sample.xid < 0:
        raise ValueError("'xid' must be >= 0")
    return sample


def _event(item: Any) -> XidEvent:
    event = XidEvent.from_dict(item)
    _check_uuid(event.gpu_uuid)
    _check_time(event.timestamp)
    if not 0 <= event.xid <= INT_RANGE["IntegerField"]:
        raise ValueError("'xid' is out of range")
    return event


def _parse_list(data: dict[str, Any], key: str, parse: Callable[[Any], T]) -> list[T]:
    items = data.get(key, [])
    if not isinstance(items, list):
        raise ValidationError({key: ["must be a list"]})
    if len(items) > MAX_ITEMS_PER_BATCH:
        raise ValidationError({key: [f"at most {MAX_ITEMS_PER_BATCH} items per request"]})
    parsed = []
    for i, item in enumerate(items):
        try:
            parsed.append(parse(item))
        except ValueError as exc:
            raise ValidationError({key: [f"item {i}: {exc}"]}) from None
    return parsed


@dataclass(frozen=True, slots=True)
class Batch:
    samples: list[GpuSample]
    xid_events: list[XidEvent]
    dropped: int


def parse_batch(data: Any) -> Batch:
    """The batch in ``data`` (a decoded JSON body); ``ValidationError`` naming the field at fault otherwise."""
    if not isinstance(data, dict):
        raise ValidationError({"detail": "the body must be a JSON object"})
    samples = _parse_list(data, "samples", _sample)
    events = _parse_list(data, "xid_events", _event)
    dropped = data.get("dropped", 0)
    if isinstance(dropped, bool) or not isinstance(dropped, int) or not 0 <= dropped <= INT_RANGE["BigIntegerField"]:
        raise ValidationError({"dropped": [f"must be an integer from 0 to {INT_RANGE['BigIntegerField']}"]})
    return Batch(samples=samples, xid_events=events, dropped=dropped)
