"""Durations as people write and read them: ``2h``, ``90m``, ``1d 12h``, or plain seconds.

One grammar for every place a job's time limit is typed (the submit form, ``corral submit --time-limit``) and one
way of printing it (wait details, the job page, ``corral show``), so the limit a user typed reads back the same
everywhere. Pure: no Django, no clock.
"""

from __future__ import annotations

import re

UNITS: dict[str, int] = {"d": 86_400, "h": 3_600, "m": 60, "s": 1}

_PART = re.compile(r"\s*(\d+(?:\.\d+)?)\s*([dhms])", re.IGNORECASE)
_SECONDS = re.compile(r"\s*\d+\s*")


def parse_duration(text: str) -> int:
    """Whole seconds from ``"7200"``, ``"2h"``, ``"90m"``, ``"1.5h"``, ``"1d 12h"`` or ``"1h30m"``.

    A bare number is seconds. Units are ``d``, ``h``, ``m`` and ``s`` (any case), each used at most once, largest
    first. Raises ``ValueError`` with a sentence a person can act on for anything else. The sign and range are the
    caller's business (``0`` parses; a time limit of 0 is refused by the service that takes it).
    """
    if _SECONDS.fullmatch(text):
        return int(text)
    total = 0.0
    pos = 0
    seen: list[str] = []
    for match in _PART.finditer(text):
        if match.start() != pos:
            break
        unit = match.group(2).lower()
        if seen and list(UNITS).index(unit) <= list(UNITS).index(seen[-1]):
            raise ValueError(f"{text.strip()!r}: give each unit once, largest first (like 1d 12h)")
        seen.append(unit)
        total += float(match.group(1)) * UNITS[unit]
        pos = match.end()
    if not seen or text[pos:].strip():
        raise ValueError(f"{text.strip()!r} is not a duration; write it like 2h, 90m, 1d 12h or 3600 (seconds)")
    return round(total)


def format_duration(seconds: float) -> str:
    """``7200`` -> ``2h``, ``5400`` -> ``1h 30m``, ``90061`` -> ``1d 1h 1m 1s``, ``0`` -> ``0s``.

    Rounded to whole seconds; units that are zero are left out, so a limit typed as ``90m`` reads ``1h 30m``.
    """
    left = max(0, round(seconds))
    parts: list[str] = []
    for unit, size in UNITS.items():
        count, left = divmod(left, size)
        if count:
            parts.append(f"{count}{unit}")
    return " ".join(parts) or "0s"
