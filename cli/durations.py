"""Durations for ``corral submit --time-limit`` and ``corral show``: ``2h``, ``90m``, ``1d 12h`` or plain seconds.

The same grammar as the portal's submit form (``scheduling.core.durations``), written again here because the client
imports nothing of the server; ``tests/cli/test_time_limit.py`` checks that the two agree.
"""

from __future__ import annotations

import re

UNITS = {"d": 86_400, "h": 3_600, "m": 60, "s": 1}
_ORDER = list(UNITS)
_PART = re.compile(r"\s*(\d+(?:\.\d+)?)\s*([dhms])", re.IGNORECASE)


def parse_duration(text: str) -> int:
    """Whole seconds from ``7200``, ``2h``, ``1.5h``, ``1d 12h`` or ``1h30m``; ``ValueError`` (a sentence) otherwise."""
    if re.fullmatch(r"\s*\d+\s*", text):
        return int(text)
    total, pos, last = 0.0, 0, -1
    for match in _PART.finditer(text):
        if match.start() != pos:
            break
        rank = _ORDER.index(match.group(2).lower())
        if rank <= last:
            raise ValueError(f"{text.strip()!r}: give each unit once, largest first (like 1d 12h)")
        last = rank
        total += float(match.group(1)) * UNITS[_ORDER[rank]]
        pos = match.end()
    if last < 0 or text[pos:].strip():
        raise ValueError(f"{text.strip()!r} is not a duration; write it like 2h, 90m, 1d 12h or 3600 (seconds)")
    return round(total)


def format_duration(seconds: float) -> str:
    """``7200`` -> ``2h``, ``5400`` -> ``1h 30m``; zero units left out, ``0s`` for nothing left."""
    left = max(0, round(seconds))
    parts = []
    for unit, size in UNITS.items():
        count, left = divmod(left, size)
        if count:
            parts.append(f"{count}{unit}")
    return " ".join(parts) or "0s"
