"""The user-facing ``corral`` commands that talk to a portal: login, submit, jobs, show, logs, cancel, nodes, tenants,
history, mounted on the ``corral`` app in the order its help lists them.

They live by what they are about: :mod:`cli.account_commands` (login, logout), :mod:`cli.job_commands` (a user's
jobs), :mod:`cli.cluster_commands` (nodes, tenants, the history export); what they share (one-line errors, the
client) is :mod:`cli.command_base`. None of them imports the portal, Django or (at import) the scheduler.
"""

from __future__ import annotations

import typer

from cli.account_commands import login, logout
from cli.cluster_commands import history, nodes, tenants
from cli.job_commands import cancel, jobs, logs, show, submit
from cli.pool_commands import pools_app


def register(app: typer.Typer) -> None:
    """Add the portal commands to the ``corral`` app (called by ``cli.main``)."""
    for fn in (login, logout, submit, jobs, show, logs, cancel, nodes, tenants, history):
        app.command(fn.__name__)(fn)
    app.add_typer(pools_app, name="pools")  # issue #19: list, lend, reclaim
