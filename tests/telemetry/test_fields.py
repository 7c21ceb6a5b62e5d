"""The GPU readings are defined once, in ``telemetry.fields``; the pure lists that must still be written out (the
``GpuSample`` dataclass, for the type checker; the CSV schema, a published file format) are checked against it here,
so adding or retyping a reading fails until every one of them follows. Ref: #14"""

from __future__ import annotations

import typing
from dataclasses import MISSING, fields

from telemetry.fields import (
    BY_NAME,
    LAST_FIELDS,
    MEAN_FIELDS,
    METRIC_NAMES,
    METRICS,
    ROLLED_UP,
    Column,
    Kind,
    MetricField,
)
from telemetry.sample import GpuSample
from telemetry.schema import COLUMNS, DECIMAL_COLUMNS, NUMERIC_COLUMNS, TelemetryRow

PYTHON_TYPE = {Column.FLOAT: float, Column.INT32: int, Column.INT64: int, Column.BOOL: bool}
#: Readings the CSV schema leaves out: the volatile ECC counts reset with the driver, the lifetime ones do not.
NOT_IN_CSV = {"ecc_sbe_volatile", "ecc_dbe_volatile"}


def _example(metric: MetricField) -> object:
    """A value of the reading's type that is not its default."""
    return {Column.FLOAT: 12.5, Column.INT32: 7, Column.INT64: 2**40, Column.BOOL: True}[metric.column]


def test_names_are_unique_and_every_reading_has_one_rollup_rule() -> None:
    assert len(set(METRIC_NAMES)) == len(METRIC_NAMES) == len(BY_NAME)
    assert not set(MEAN_FIELDS) & set(LAST_FIELDS)
    kept_by_own_rule = set(ROLLED_UP) - set(MEAN_FIELDS) - set(LAST_FIELDS)
    assert {BY_NAME[n].kind for n in kept_by_own_rule} == {Kind.BITMASK, Kind.XID}
    assert [m.name for m in METRICS if m.kind is Kind.FLAG] == [n for n in METRIC_NAMES if n not in ROLLED_UP]


def test_gpu_sample_declares_every_reading_in_order_with_its_type_and_default() -> None:
    declared = [f for f in fields(GpuSample) if f.name not in {"gpu_uuid", "index", "timestamp", "processes"}]
    assert [f.name for f in declared] == list(METRIC_NAMES)
    hints = typing.get_type_hints(GpuSample)
    for f in declared:
        metric = BY_NAME[f.name]
        python_type = PYTHON_TYPE[metric.column]
        assert hints[f.name] == (python_type | None if metric.nullable else python_type), f.name
        assert f.default is not MISSING
        assert f.default == (None if metric.nullable else python_type()), f.name


def test_the_wire_format_parses_every_reading() -> None:
    readings = {m.name: _example(m) for m in METRICS}
    parsed = GpuSample.from_dict({"gpu_uuid": "GPU-x", "index": 0, "timestamp": 1.0, **readings})
    assert {name: getattr(parsed, name) for name in METRIC_NAMES} == readings


def test_the_csv_schema_holds_the_rolled_up_readings_but_the_volatile_ecc_counts() -> None:
    assert set(NUMERIC_COLUMNS) == set(ROLLED_UP) - NOT_IN_CSV
    assert DECIMAL_COLUMNS == {c for c in NUMERIC_COLUMNS if BY_NAME[c].column is Column.FLOAT}
    assert [f.name for f in fields(TelemetryRow)] == list(COLUMNS)
