"""``manage.py node_token NAME``: create the node if needed and print a fresh agent token for it."""

from __future__ import annotations

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.utils.text import slugify

from portal.nodes.services import node_token_issue


class Command(BaseCommand):
    help = "Print a new agent token for a node (creating the node if needed); older tokens stop working."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("name", help="node name, e.g. gpu-07")

    def handle(self, *args: object, name: str, **options: object) -> None:
        if not name or slugify(name) != name:
            raise CommandError(f"'{name}' is not a valid node name (letters, digits, '-' and '_')")
        _, token = node_token_issue(name=name)
        self.stdout.write(token)
