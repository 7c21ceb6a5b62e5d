"""An array's rows written by the database, one statement each: ``INSERT ... SELECT`` over the task indices for its
task jobs, and over those jobs for their events.

Why not ``bulk_create``: it builds a model instance and prepares every column of every row in Python, about 250 µs
a task with its event on PostgreSQL, where issue #16 asks for 20,000 tasks a second (a 10,000-task array in well
under 2 s). Here Python prepares one row, as Django would for a single insert (each field's ``pre_save`` and
``get_db_prep_save``, so defaults, ``auto_now_add`` and JSON come out as the ORM writes them), and the database
repeats it once per index: the only per-task values are ``array_index`` and the name's ``[index]`` suffix. Every
concrete column is written, so a column added to the model later is filled from its Python default here too.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from django.db import connection
from django.db.models import Field, Model

from portal.jobs.models import Job, JobEvent


def _quoted(name: str) -> str:
    return connection.ops.quote_name(name)


def _typed(field: Field[object, object]) -> str:
    """A placeholder PostgreSQL reads as the column's type (a bare parameter in ``INSERT ... SELECT`` is text or
    unknown there). SQLite takes the value as is: a CAST there would apply type affinity (a datetime's text would
    become a number)."""
    if connection.vendor == "postgresql":
        return f"CAST(%s AS {field.db_type(connection)})"
    return "%s"


#: A column computed in SQL instead of copied: its expression and the expression's parameters.
Computed = dict[str, tuple[str, list[Any]]]


def _template(row: Model, computed: Computed) -> tuple[list[str], list[str], list[Any]]:
    """Columns, the SELECT list and its parameters for copies of ``row``: every concrete column but the id, each a
    parameter prepared as Django prepares an insert, except the ``computed`` ones (by attname)."""
    columns: list[str] = []
    select: list[str] = []
    params: list[Any] = []
    for field in row._meta.concrete_fields:
        if field.primary_key or field.column is None:  # a concrete field always has a column
            continue
        columns.append(_quoted(field.column))
        if field.attname in computed:
            expression, expression_params = computed[field.attname]
            select.append(expression)
            params.extend(expression_params)
            continue
        select.append(_typed(field))
        params.append(field.get_db_prep_save(field.pre_save(row, add=True), connection))
    return columns, select, params


def _index_source(indices: Sequence[int]) -> tuple[str, list[Any]]:
    """A relation ``t(i)`` holding the indices, from one parameter."""
    if connection.vendor == "postgresql":
        return "unnest(CAST(%s AS integer[])) AS t(i)", ["{" + ",".join(map(str, indices)) + "}"]
    return "(SELECT CAST(value AS integer) AS i FROM json_each(%s)) AS t", [json.dumps(list(indices))]


def insert_task_jobs(*, template: Job, name_prefix: str, indices: Sequence[int]) -> None:
    """Insert one job per index: a copy of ``template`` (unsaved, its ``array`` set) with ``array_index`` the index
    and ``name`` ``name_prefix[index]``, in index order (so ids follow indices). One statement."""
    source, source_params = _index_source(indices)
    computed: Computed = {
        "array_index": ("t.i", []),
        "name": ("CAST(%s AS text) || '[' || CAST(t.i AS text) || ']'", [name_prefix]),
    }
    columns, select, params = _template(template, computed)
    # Only the model's own (quoted) names and fixed expressions in the text; every value is a parameter.
    sql = f"INSERT INTO {_quoted(Job._meta.db_table)} ({', '.join(columns)}) SELECT {', '.join(select)} "  # noqa: S608
    sql += f"FROM {source} ORDER BY t.i"
    with connection.cursor() as cursor:
        cursor.execute(sql, [*params, *source_params])


def insert_task_events(*, template: JobEvent, array_id: int, state: str) -> int:
    """Insert a copy of ``template`` (unsaved; its ``job`` is ignored) for every job of array ``array_id`` in
    ``state``, in id order. One statement; returns how many it wrote. Precondition: those jobs are locked or were
    just inserted by this transaction, so the set cannot change under it."""
    job = _quoted(Job._meta.db_table)
    columns, select, params = _template(template, {"job_id": (f"{job}.{_quoted('id')}", [])})
    table = _quoted(JobEvent._meta.db_table)
    sql = f"INSERT INTO {table} ({', '.join(columns)}) SELECT {', '.join(select)} FROM {job} "  # noqa: S608 - names
    sql += f"WHERE {job}.{_quoted('array_id')} = %s AND {job}.{_quoted('state')} = %s ORDER BY {job}.{_quoted('id')}"
    with connection.cursor() as cursor:
        cursor.execute(sql, [*params, array_id, state])
        return int(cursor.rowcount)
