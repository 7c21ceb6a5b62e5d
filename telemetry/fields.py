"""The GPU readings a sample carries, defined once: each field's name, what kind of value it is and the column that
holds it.

Every other list of readings is derived from :data:`METRICS` or checked against it by a test: the wire format's
parser (``telemetry.sample``), the raw and latest tables and their COPY (``portal.telemetry.models`` and the ingest
service), the agents' API schema (``portal.telemetry.serializers``), what a rollup keeps and how (the rollup service,
``Rollup``) and the CSV schema's decimal columns (``telemetry.schema``). Adding a reading starts here; the drift tests
(``tests/telemetry/test_fields.py``, ``tests/portal/telemetry/test_fields.py``) then name every place that must follow.

Pure: no Django, so the agent and the CLI can import it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum


class Kind(StrEnum):
    """What a reading measures, which fixes how a rollup summarises an interval of it (the CSV schema's rule)."""

    GAUGE = "gauge"  # a level at the instant (utilisation, temperature): a rollup keeps the mean
    CAPACITY = "capacity"  # a size that does not change between samples (total memory): a rollup keeps the last
    COUNTER = "counter"  # the driver's running total, never a delta: a rollup keeps the last value
    BITMASK = "bitmask"  # a set of reasons (throttling): a rollup keeps the OR of the bits seen
    XID = "xid"  # the last XID since the previous sample: a rollup keeps the most serious one
    FLAG = "flag"  # a yes/no state: not rolled up (``lost`` samples are counted instead)


class Column(StrEnum):
    """The database column a reading is stored in (and so the range the API accepts for it)."""

    FLOAT = "float"  # float8
    INT32 = "int32"  # int4
    INT64 = "int64"  # int8
    BOOL = "bool"


@dataclass(frozen=True, slots=True)
class MetricField:
    """One reading. ``nullable``: ``None`` means "this GPU cannot report it" (never zero); the two that are not
    (``xid``, ``lost``) default to 0 and False."""

    name: str
    kind: Kind
    column: Column
    nullable: bool = True


#: Every reading, in the order of the raw table's columns (and of the PostgreSQL COPY that fills it).
METRICS: tuple[MetricField, ...] = (
    MetricField("gpu_util", Kind.GAUGE, Column.FLOAT),
    MetricField("mem_used_mb", Kind.GAUGE, Column.INT32),
    MetricField("mem_total_mb", Kind.CAPACITY, Column.INT32),
    MetricField("temperature_c", Kind.GAUGE, Column.FLOAT),
    MetricField("power_w", Kind.GAUGE, Column.FLOAT),
    MetricField("sm_clock_mhz", Kind.GAUGE, Column.INT32),
    MetricField("throttle_reasons", Kind.BITMASK, Column.INT64),
    MetricField("ecc_sbe_volatile", Kind.COUNTER, Column.INT64),
    MetricField("ecc_dbe_volatile", Kind.COUNTER, Column.INT64),
    MetricField("ecc_corrected_total", Kind.COUNTER, Column.INT64),
    MetricField("ecc_uncorrected_total", Kind.COUNTER, Column.INT64),
    MetricField("retired_pages", Kind.COUNTER, Column.INT64),
    MetricField("remapped_rows", Kind.COUNTER, Column.INT64),
    MetricField("remapped_rows_pending", Kind.FLAG, Column.BOOL),
    MetricField("remapped_rows_failed", Kind.FLAG, Column.BOOL),
    MetricField("pcie_replay", Kind.COUNTER, Column.INT64),
    MetricField("xid", Kind.XID, Column.INT32, nullable=False),
    MetricField("lost", Kind.FLAG, Column.BOOL, nullable=False),
)

BY_NAME: Mapping[str, MetricField] = {f.name: f for f in METRICS}


def names(*kinds: Kind) -> tuple[str, ...]:
    """The names of the readings of these kinds (of every reading when none is given), in :data:`METRICS` order."""
    return tuple(f.name for f in METRICS if not kinds or f.kind in kinds)


#: Every reading's name.
METRIC_NAMES: tuple[str, ...] = names()
#: Readings a rollup keeps as their mean over the bucket.
MEAN_FIELDS: tuple[str, ...] = names(Kind.GAUGE)
#: Readings a rollup keeps as the last value seen in the bucket.
LAST_FIELDS: tuple[str, ...] = names(Kind.CAPACITY, Kind.COUNTER)
#: Readings a rollup keeps at all (each by its kind's rule); flags are left out.
ROLLED_UP: tuple[str, ...] = tuple(f.name for f in METRICS if f.kind is not Kind.FLAG)
