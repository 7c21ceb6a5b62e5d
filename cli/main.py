"""The ``corral`` command: one Typer app whose sub-commands live next to the code they drive.

- ``login/submit/jobs/logs/cancel/nodes`` talk to a portal over its REST API (``cli.client_commands``).
- ``simulate`` replays a trace through the scheduling core (``scheduling.sim.cli``).
- ``telemetry`` and ``failures`` work on telemetry CSVs and the failure predictor (``telemetry.cli``).

Heavy imports (numpy, scikit-learn, plotly) happen inside the commands, so ``corral jobs`` starts fast.
"""

from __future__ import annotations

import typer

from cli import client_commands
from scheduling.sim import cli as sim_cli
from telemetry import cli as telemetry_cli

app = typer.Typer(
    name="corral",
    help="Corral: submit and follow GPU jobs, replay traces under scheduling policies, evaluate failure prediction.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)
client_commands.register(app)
sim_cli.register(app)
telemetry_cli.register(app)


def main() -> None:
    app()


if __name__ == "__main__":
    main()
