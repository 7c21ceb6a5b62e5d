"""``corral pools``: a serving system's loanable nodes (issue #19), for admins and the serving side's scripts.

``corral pools`` lists the pools; ``corral pools lend POOL NODE...`` lends nodes to training; ``corral pools reclaim
POOL --count N --deadline S`` takes N of them back within S seconds and prints which nodes Corral gives back and
what it stops to empty them. Each is one call of ``/api/v1/pools/``; a refusal is one ``error:`` line.
"""

from __future__ import annotations

import re
from typing import Annotated

import typer
from rich.table import Table

from cli import render
from cli.api import Pool, Reclaim
from cli.command_base import JsonFlag, friendly, portal_client
from cli.errors import CliError

pools_app = typer.Typer(
    help="Loanable pools: list them, lend their nodes to training, reclaim them (admins).",
    no_args_is_help=False,
    invoke_without_command=True,
)

#: What the portal accepts as a pool's name (a slug); anything else would not even reach the pool's address.
SLUG = re.compile(r"[-a-zA-Z0-9_]+")


def _pool_name(pool: str) -> str:
    if not SLUG.fullmatch(pool):
        raise CliError(f"POOL must be a pool's name (letters, digits, - and _), got {pool!r}", exit_code=2)
    return pool


def _deadline(text: str) -> float:
    """``--deadline``: seconds (a plain number, passed on as it is: the portal refuses a negative one and says so),
    or a duration like 90s or 5m in the one grammar (``scheduling.core.durations``)."""
    try:
        return float(text)
    except ValueError:
        pass
    from scheduling.core.durations import parse_duration  # only here: the commands load without the scheduler

    try:
        return float(parse_duration(text))
    except ValueError as exc:
        raise CliError(f"--deadline: {exc}", exit_code=2) from None


def pools_table(pools: list[Pool]) -> Table:
    table = Table(box=None, header_style="bold", pad_edge=False)
    for column in ("POOL", "NODES", "LENT", "RETURNING", "OPEN RECLAIMS"):
        table.add_column(column, no_wrap=True)
    for pool in pools:
        table.add_row(
            pool["name"],
            str(len(pool["nodes"])),
            ", ".join(pool["lent"]) or "-",
            ", ".join(pool["returning"]) or "-",
            ", ".join(str(r) for r in pool["open_reclaims"]) or "-",
        )
    return table


def reclaim_lines(reclaim: Reclaim) -> list[str]:
    """What a reclaim did, in words: the nodes, the jobs stopped, the cost and the deadline."""
    lines = [f"Reclaim {reclaim['id']}: giving back {', '.join(reclaim['nodes'])} by {reclaim['deadline_at']}."]
    if reclaim["returned"]:
        lines.append(f"Back already: {', '.join(reclaim['returned'])}.")
    if reclaim["shrunk"]:
        shrunk = ", ".join(f"job {job} to {size} GPUs" for job, size in reclaim["shrunk"].items())
        lines.append(f"Shrunk (checkpoint signal sent): {shrunk}.")
    if reclaim["preempted"]:
        lines.append(f"Preempted (checkpoint signal sent): {', '.join(f'job {j}' for j in reclaim['preempted'])}.")
    lines.append(f"Cost: {reclaim['cost_gpu_seconds']:.0f} GPU-seconds.")
    return lines


@pools_app.callback()
@friendly
def pools(ctx: typer.Context, as_json: JsonFlag = False) -> None:
    """List the loanable pools: their nodes, those lent to training, those being given back."""
    if ctx.invoked_subcommand is not None:
        return
    with portal_client() as client:
        found = client.list_pools()
    if as_json:
        render.print_json(found)
        return
    if not found:
        typer.echo("No loanable pools: every node is in the training pool.")
        return
    render.emit(pools_table(found))


@pools_app.command("lend")
@friendly
def lend(
    pool: Annotated[str, typer.Argument(help="The pool's name.")],
    nodes: Annotated[list[str], typer.Argument(help="Nodes of the pool to lend to training.")],
    as_json: JsonFlag = False,
) -> None:
    """Lend nodes of a pool to training: Corral may run jobs on them until they are reclaimed."""
    with portal_client() as client:
        reply = client.lend_nodes(_pool_name(pool), nodes)
    if as_json:
        render.print_json(reply)
        return
    newly = ", ".join(reply["newly_lent"]) or "no node (all were lent already)"
    typer.echo(f"Lent {newly}; pool {reply['pool']} has {len(reply['lent'])} node(s) lent.")


@pools_app.command("reclaim")
@friendly
def reclaim(
    pool: Annotated[str, typer.Argument(help="The pool's name.")],
    count: Annotated[int, typer.Option("--count", "-n", help="How many lent nodes to take back.")],
    deadline: Annotated[str, typer.Option("--deadline", help="Within how long: seconds, or a duration like 90s, 5m.")],
    as_json: JsonFlag = False,
) -> None:
    """Take nodes back from training within a deadline; prints which nodes Corral gives back and what it stops."""
    seconds = _deadline(deadline)
    with portal_client() as client:
        answer = client.reclaim_nodes(_pool_name(pool), count, seconds)
    if as_json:
        render.print_json(answer)
        return
    for line in reclaim_lines(answer):
        typer.echo(line)
