"""``corral login`` and ``logout``: which portal the other commands talk to, and the API token they use.

Both only read and write the config file (:mod:`cli.config`); ``login`` is the one command that asks the portal
for a token rather than presenting one.
"""

from __future__ import annotations

import os
from typing import Annotated

import typer

from cli import config
from cli.api import Client
from cli.command_base import friendly
from cli.errors import CliError


@friendly
def login(
    url: Annotated[
        str | None,
        typer.Option(help="Portal URL (default: $CORRAL_URL, else the saved URL, else http://127.0.0.1:8000)."),
    ] = None,
    username: Annotated[str | None, typer.Option("--username", "-u", help="Prompted for when absent.")] = None,
    password: Annotated[str | None, typer.Option(help="Prompted for (hidden) when absent.")] = None,
) -> None:
    """Log in to a portal and save its URL and an API token in the config file (mode 0600)."""
    try:
        saved = config.load_file()
    except CliError:
        # Logging in rewrites the file, so it is the natural way out of a broken one: do not refuse it.
        typer.echo(f"note: the config file {config.config_path()} is unreadable; it will be replaced", err=True)
        saved = config.Config()
    base = config.normalize_url(url or os.environ.get("CORRAL_URL") or saved.url)
    if username is None:
        username = typer.prompt("Username", default=saved.username or None)
    if password is None:
        password = typer.prompt("Password", hide_input=True)
    with Client(base) as client:
        token = client.obtain_token(username, password)
    path = config.save(config.Config(url=base, token=token, username=username))
    typer.echo(f"Logged in to {base} as {username} (token saved in {path}).")
    if os.environ.get("CORRAL_TOKEN"):
        typer.echo("note: CORRAL_TOKEN is set and takes precedence over the saved token.", err=True)


@friendly
def logout() -> None:
    """Forget the saved token (the URL and username stay for the next login)."""
    saved = config.load_file()
    if saved.token is None:
        typer.echo("Not logged in.")
        return
    path = config.save(config.Config(url=saved.url, token=None, username=saved.username))
    typer.echo(f"Logged out of {saved.url} (token removed from {path}).")
