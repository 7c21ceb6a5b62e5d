"""The Django side of the one definition of the GPU readings (``telemetry.fields``): the model columns declared for
the type checker, the rollup's columns, the API's sample fields and the ingest bounds must match it. No database is
touched: these read the models' and serializers' declarations. Ref: #14"""

from __future__ import annotations

from dataclasses import fields

from portal.telemetry.batch import INT_LIMITS, INT_RANGE
from portal.telemetry.models import LatestSample, Rollup, Sample, SampleFields
from portal.telemetry.serializers import GpuSampleSerializer
from telemetry.fields import BY_NAME, MEAN_FIELDS, METRIC_NAMES, ROLLED_UP, Column
from telemetry.sample import GpuSample

MODEL_FIELD = {
    Column.FLOAT: "FloatField",
    Column.INT32: "IntegerField",
    Column.INT64: "BigIntegerField",
    Column.BOOL: "BooleanField",
}
#: Rollup columns that are not readings: its counts and the maxima it keeps beside two means.
ROLLUP_EXTRAS = {"samples", "lost_samples", "gpu_util_max", "temperature_max"}


def test_sample_columns_are_the_readings_with_their_types_and_nullability() -> None:
    columns = SampleFields._meta.get_fields()
    assert [c.name for c in columns] == list(METRIC_NAMES)
    for column in columns:
        metric = BY_NAME[column.name]
        assert column.get_internal_type() == MODEL_FIELD[metric.column], column.name
        assert column.null is metric.nullable, column.name
        if not metric.nullable:
            default = next(f.default for f in fields(GpuSample) if f.name == column.name)
            assert column.default == default, column.name
    for model in (Sample, LatestSample):
        inherited = [f.name for f in model._meta.concrete_fields if f.name in BY_NAME]
        assert inherited == list(METRIC_NAMES), model.__name__


def test_rollup_columns_are_the_rolled_up_readings() -> None:
    columns = {f.name: f for f in Rollup._meta.concrete_fields if f.name not in {"id", "period", "gpu", "bucket"}}
    assert [name for name in columns if name not in ROLLUP_EXTRAS] == list(ROLLED_UP)
    assert {columns[name].get_internal_type() for name in MEAN_FIELDS} == {"FloatField"}  # means are fractional


def test_the_api_sample_fields_are_the_wire_format_fields() -> None:
    assert list(GpuSampleSerializer().fields) == [f.name for f in fields(GpuSample)]


def test_ingest_bounds_every_integer_reading_by_its_column() -> None:
    width = {Column.INT32: INT_RANGE["IntegerField"], Column.INT64: INT_RANGE["BigIntegerField"]}
    assert INT_LIMITS == {m.name: width[m.column] for m in BY_NAME.values() if m.column in width}
