"""The telemetry CSV schema shared by ``corral telemetry synth``, ``corral telemetry export`` and the predictor.

One row is one GPU over one interval (an hour by default) ending at ``timestamp``. Gauges are means over the
interval, counters are the driver's running totals at its end, ``throttle_reasons`` is the OR of the bits seen,
and ``xid`` is the most serious XID seen (fatal before precursor before unknown before application; the latest
wins a tie), 0 for none. An empty cell means the GPU could not report the field. ``docs/telemetry.md`` documents
each column; this module is the machine-readable version.
"""

from __future__ import annotations

from dataclasses import dataclass

from telemetry.fields import BY_NAME, Column

# The column lists below are the file format's own (its order and which columns are optional are a published
# contract, not the order of ``telemetry.fields``); a test checks that each numeric column is a reading there.

#: Columns every telemetry.csv has, in the order the writer emits them.
REQUIRED_COLUMNS: tuple[str, ...] = (
    "timestamp",
    "node",
    "gpu_uuid",
    "gpu_util",
    "mem_used_mb",
    "mem_total_mb",
    "temperature_c",
    "power_w",
    "sm_clock_mhz",
    "ecc_corrected_total",
    "ecc_uncorrected_total",
    "retired_pages",
    "xid",
    "throttle_reasons",
)
#: Columns the writer always emits but the reader accepts without (older exports, other tools).
OPTIONAL_COLUMNS: tuple[str, ...] = ("remapped_rows", "pcie_replay")
COLUMNS: tuple[str, ...] = REQUIRED_COLUMNS + OPTIONAL_COLUMNS
#: Numeric columns, held as float64 with NaN for "not reported" once loaded.
NUMERIC_COLUMNS: tuple[str, ...] = tuple(c for c in COLUMNS if c not in {"timestamp", "node", "gpu_uuid"})
#: Columns written with one decimal (the readings stored as floats); all other numeric columns are whole numbers.
DECIMAL_COLUMNS: frozenset[str] = frozenset(c for c in NUMERIC_COLUMNS if BY_NAME[c].column is Column.FLOAT)

LABEL_COLUMNS: tuple[str, ...] = ("gpu_uuid", "failed_at")
#: Optional label column: what the failure was (e.g. ``xid_79``); the evaluation does not use it.
LABEL_OPTIONAL_COLUMNS: tuple[str, ...] = ("cause",)


@dataclass(frozen=True, slots=True)
class TelemetryRow:
    """One telemetry.csv row. ``timestamp`` is seconds since the epoch (UTC); ``None`` writes an empty cell."""

    timestamp: float
    node: str
    gpu_uuid: str
    gpu_util: float | None = None
    mem_used_mb: float | None = None
    mem_total_mb: float | None = None
    temperature_c: float | None = None
    power_w: float | None = None
    sm_clock_mhz: float | None = None
    ecc_corrected_total: int | None = None
    ecc_uncorrected_total: int | None = None
    retired_pages: int | None = None
    xid: int = 0
    throttle_reasons: int | None = None
    remapped_rows: int | None = None
    pcie_replay: int | None = None


@dataclass(frozen=True, slots=True)
class FailureLabel:
    """One labels.csv row: the GPU and when it failed fatally (seconds since the epoch, UTC)."""

    gpu_uuid: str
    failed_at: float
    cause: str = ""
