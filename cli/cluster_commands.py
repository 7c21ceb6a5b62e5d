"""``corral nodes``, ``tenants`` and ``history``: the cluster around a user's jobs, and (for admins) its past.

``nodes`` and ``tenants`` show what the portal shows on its pages; ``history`` exports the finished jobs as a
trace for ``corral simulate --trace FILE``.
"""

from __future__ import annotations

import csv
import io
from pathlib import Path
from typing import Annotated

import typer

from cli import render
from cli.command_base import JsonFlag, friendly, portal_client
from cli.errors import CliError


@friendly
def nodes(as_json: JsonFlag = False) -> None:
    """List nodes and the state of each GPU (free, busy with a job, or unhealthy)."""
    with portal_client() as client:
        found = client.list_nodes()
    if as_json:
        render.print_json(found)
        return
    if not found:
        typer.echo("No nodes.")
        return
    render.emit(render.nodes_table(found))


@friendly
def tenants(as_json: JsonFlag = False) -> None:
    """Your tenants: quota, GPUs held and borrowed, and their place in the fair-share order of borrowing."""
    with portal_client() as client:
        overview = client.tenant_overview()
    if as_json:
        render.print_json(overview)
        return
    if not overview["tenants"]:
        typer.echo("You belong to no tenant.")
        return
    render.emit(render.tenants_table(overview), render.fair_share_line(overview))


@friendly
def history(
    out: Annotated[
        Path | None, typer.Option("--out", "-o", help="Write the CSV here instead of to stdout.", dir_okay=False)
    ] = None,
    since: Annotated[str | None, typer.Option(help="First submission to include (date or ISO date-time).")] = None,
    until: Annotated[str | None, typer.Option(help="Only submissions before this (date or ISO date-time).")] = None,
) -> None:
    """Export the cluster's finished jobs as a trace (admins), to replay with `corral simulate --trace FILE`."""
    with portal_client() as client:
        data = client.history_trace(since, until)
    if out is None:
        typer.echo(data, nl=False)
        return
    try:
        out.write_bytes(data)
    except OSError as exc:
        raise CliError(f"cannot write {out}: {exc.strerror or exc}") from exc
    jobs = max(0, sum(1 for _ in csv.reader(io.StringIO(data.decode(errors="replace")))) - 1)  # names may hold newlines
    typer.echo(f"Wrote {jobs} finished job{'s' if jobs != 1 else ''} to {out}.", err=True)
