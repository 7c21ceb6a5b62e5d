"""Database helpers any app may use. Times as numbers in SQL: the one representation in which PostgreSQL (tests,
production) and SQLite (``make run``) subtract, clip and sum them alike, and which the database hands back as plain
floats (cheap to load, unlike one datetime per row)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from django.db.models import FloatField, Func

if TYPE_CHECKING:
    from django.db.backends.base.base import BaseDatabaseWrapper
    from django.db.models.sql.compiler import SQLCompiler, _AsSqlType


class EpochSeconds(Func):
    """Seconds since 1970-01-01 UTC of a datetime column, as a float, on PostgreSQL and SQLite (where Django stores
    naive UTC text that ``julianday`` reads, to the millisecond)."""

    output_field = FloatField()

    def as_postgresql(self, compiler: SQLCompiler, connection: BaseDatabaseWrapper, **extra: Any) -> _AsSqlType:
        return self.as_sql(compiler, connection, template="EXTRACT(EPOCH FROM %(expressions)s)::double precision")

    def as_sqlite(self, compiler: SQLCompiler, connection: BaseDatabaseWrapper, **extra: Any) -> _AsSqlType:
        return self.as_sql(compiler, connection, template="((julianday(%(expressions)s) - 2440587.5) * 86400.0)")


def cache_key(key: str, key_prefix: str, version: int) -> str:
    """The shared cache's key for ``key``: prefixed with the database's name, read when the key is made, so that
    everything using one database (web servers, workers, a test run and the workers it starts on its test
    database) shares flags, and two sites or two test databases on one Redis never do."""
    from django.db import connection  # noqa: PLC0415 - at call time: a test run renames the database after start

    return f"corral:{connection.settings_dict['NAME']}:{key_prefix}:{version}:{key}"
