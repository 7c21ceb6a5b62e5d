"""Durations as people write and read them: ``2h``, ``90m``, ``1d 12h``, or plain seconds.

The one grammar for every place a duration is typed, and one way of printing it, so a limit a user typed reads back
the same everywhere:

- :func:`parse_duration`: a job's time limit (the submit form, ``corral submit --time-limit``);
- :func:`parse_span`: the spans of the telemetry commands (``corral failures evaluate --horizon 24h``), a narrower
  form of the same units (one unit, positive), with the words those commands have always printed;
- :func:`format_duration`: wait details, the job page, ``corral show``.

Pure: no Django, no clock. The ``corral`` client imports it too (when it parses or prints a limit).
"""

from __future__ import annotations

import re

UNITS: dict[str, int] = {"d": 86_400, "h": 3_600, "m": 60, "s": 1}

# The unit letters spelled out rather than matched with IGNORECASE: that flag would also take "ſ" (long s) as an s,
# a letter no table here has.
_PART = re.compile(r"\s*(\d+(?:\.\d+)?)\s*([dhmsDHMS])")
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


def parse_span(text: str) -> float:
    """Seconds from ``"90m"``, ``"24h"``, ``"7d"``, ``"3600s"`` or ``"0.5s"``: one number with one lower-case unit.

    The telemetry commands' grammar (``--interval``, ``--horizon``, ``--retrain-every``, ``--train-window``): the
    units of :func:`parse_duration`, but one of them, always written (a bare number is refused), and not rounded.
    Raises ``ValueError`` for anything else, and for a span that is not positive.
    """
    match = _PART.match(text)
    if match is None or match.group(2) not in UNITS or text[match.end() :].strip():
        raise ValueError(f"bad duration {text!r}: use a number with s, m, h or d, e.g. 24h or 7d")
    seconds = float(match.group(1)) * UNITS[match.group(2)]
    if seconds <= 0:
        raise ValueError(f"duration {text!r} must be positive")
    return seconds


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
