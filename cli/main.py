"""The ``corral`` command: one Typer app whose sub-commands live next to the code they drive.

- ``login/submit/jobs/logs/cancel/nodes`` talk to a portal over its REST API (``cli.client_commands``).
- ``simulate`` replays a trace through the scheduling core (``scheduling.sim.cli``).
- ``telemetry`` and ``failures`` work on telemetry CSVs and the failure predictor (``telemetry.cli``).
- ``energy replay`` compares power-down policies on a node-demand series (``scheduling.energy.cli``).

Heavy imports (numpy, scikit-learn, plotly) happen inside the commands, so ``corral jobs`` starts fast.
"""

from __future__ import annotations

import sys

import typer

try:  # Typer 0.2x vendors click; its exceptions are not the installed click's.
    from typer._click.exceptions import NoArgsIsHelpError, UsageError
except ImportError:  # pragma: no cover - an older Typer on plain click
    # Same names and roles, different classes: mypy checks against the vendored ones above (the pinned Typer).
    from click.exceptions import NoArgsIsHelpError, UsageError  # type: ignore[assignment]

from cli import client_commands
from scheduling.energy import cli as energy_cli
from scheduling.sim import cli as sim_cli
from telemetry import cli as telemetry_cli

app = typer.Typer(
    name="corral",
    help="Corral: submit and follow GPU jobs, replay traces under scheduling policies, evaluate failure prediction.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,  # usage errors as one plain line, like every other error of the CLI
)
client_commands.register(app)
sim_cli.register(app)
energy_cli.register(app)
telemetry_cli.register(app)


def main() -> None:
    """Run the CLI; a usage mistake (unknown option, ``--gpus abc``) is one ``error:`` line and exit status 2."""
    try:
        code = app(standalone_mode=False)
    except NoArgsIsHelpError as exc:  # bare `corral` or `corral telemetry`: show the help
        print(exc.format_message())
        sys.exit(exc.exit_code)
    except UsageError as exc:
        hint = f" (see '{exc.ctx.command_path} --help')" if exc.ctx else ""
        print(f"error: {exc.format_message()}{hint}", file=sys.stderr)
        sys.exit(exc.exit_code)
    except typer.Abort:
        print("error: aborted", file=sys.stderr)
        sys.exit(130)
    sys.exit(code if isinstance(code, int) else 0)


if __name__ == "__main__":
    main()
