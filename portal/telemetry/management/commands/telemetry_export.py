"""``manage.py telemetry_export --out DIR [--since ISO] [--node NAME]``: this site's GPU history as telemetry.csv and
labels.csv in the documented schema, so ``corral failures evaluate`` can be run on real history."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from portal.telemetry.services.history import export_history
from telemetry.csvio import parse_time


class Command(BaseCommand):
    help = "Write telemetry.csv (one row per GPU per hour) and labels.csv (drained GPUs) from stored telemetry."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--out", required=True, help="Directory to write telemetry.csv and labels.csv into.")
        parser.add_argument("--since", help="Only history from this time on (ISO 8601, UTC if no offset).")
        parser.add_argument("--node", help="Only this node's GPUs.")

    def handle(self, *args: Any, **options: Any) -> None:
        since = None
        if options["since"]:
            try:
                since = datetime.fromtimestamp(parse_time(options["since"]), tz=UTC)
            except ValueError as exc:
                raise CommandError(f"--since: {exc}") from None
        rows, labels = export_history(out_dir=options["out"], since=since, node=options["node"])
        self.stdout.write(f"wrote {rows} telemetry row(s) and {labels} label(s) to {options['out']}")
