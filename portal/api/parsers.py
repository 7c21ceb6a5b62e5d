"""The API's JSON parser: DRF's, refusing documents nested deeper than any Corral input needs.

``json.loads`` recurses once per level of nesting, so about 2 KB of ``[[[[…]]]]`` exhausts Python's stack and the
``RecursionError`` became a 500. The deepest real input (a heartbeat's task reports, a what-if request) is a few
levels deep, so anything past ``MAX_DEPTH`` is refused as a 400 before a serializer ever walks it. It is the default
parser for JSON (``REST_FRAMEWORK["DEFAULT_PARSER_CLASSES"]``) and the one the node agents' views name.
Ref: #15
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import IO, Any

from rest_framework import parsers
from rest_framework.exceptions import ParseError

#: Levels of arrays and objects a body may nest; ``{"a": [1]}`` is two.
MAX_DEPTH = 64


def depth_exceeds(value: object, limit: int) -> bool:
    """Whether ``value`` nests more than ``limit`` levels of lists and dicts; walked with a stack, not recursion."""
    stack: list[tuple[object, int]] = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            children: list[object] = list(item.values())
        elif isinstance(item, list):
            children = item
        else:
            continue
        if depth + 1 > limit:
            return True
        stack.extend((child, depth + 1) for child in children)
    return False


class JSONParser(parsers.JSONParser):
    """DRF's ``JSONParser`` with a nesting limit: a body deeper than ``MAX_DEPTH`` is a ``ParseError`` (400)."""

    def parse(
        self, stream: IO[Any], media_type: str | None = None, parser_context: Mapping[str, Any] | None = None
    ) -> dict[str, Any]:
        too_deep = ParseError(f"JSON parse error - nested deeper than {MAX_DEPTH} levels of arrays and objects")
        try:
            data = super().parse(stream, media_type, parser_context)
        except RecursionError:  # far deeper than the limit: json.loads ran out of stack before we could look
            raise too_deep from None
        if depth_exceeds(data, MAX_DEPTH):
            raise too_deep
        return data
