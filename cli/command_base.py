"""What every ``corral`` portal command shares: how it fails, the client it talks through, its ``--json`` flag.

Every failure arrives as a :class:`~cli.errors.CliError`, which :func:`friendly` prints as one ``error: ...`` line
on stderr with a non-zero exit code; no traceback reaches a user.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable
from typing import Annotated, ParamSpec, TypeVar

import typer

from cli import config
from cli.api import Client
from cli.errors import CliError

P = ParamSpec("P")
R = TypeVar("R")

JsonFlag = Annotated[bool, typer.Option("--json", help="Print the portal's JSON instead of a table.")]


def friendly(fn: Callable[P, R]) -> Callable[P, R]:
    """Print a :class:`CliError` as one stderr line and exit with its code; turn Ctrl-C into a quiet exit 130.

    Anything else is a bug in the client or a surprise from the server; it is still reported as one line unless
    ``CORRAL_DEBUG`` is set, because a user cannot act on a traceback but a developer chasing it can ask for one.
    """

    @functools.wraps(fn)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return fn(*args, **kwargs)
        except CliError as exc:
            typer.echo(f"error: {exc.message}", err=True)
            raise typer.Exit(exc.exit_code) from None
        except KeyboardInterrupt:
            raise typer.Exit(130) from None
        except (typer.Exit, typer.Abort):
            raise
        except Exception as exc:
            if os.environ.get("CORRAL_DEBUG"):
                raise
            typer.echo(f"error: unexpected {type(exc).__name__}: {exc} (set CORRAL_DEBUG=1 for a traceback)", err=True)
            raise typer.Exit(1) from None

    return wrapper


def portal_client() -> Client:
    """A client for the saved (or ``CORRAL_URL``/``CORRAL_TOKEN``) portal and token."""
    settings = config.load()
    return Client(settings.url, settings.token)
