"""Moments and spans as a page says them: "just now", "12 s ago", "4 min ago", "2h 10m ago"; "42 s", "1 min 5 s",
"3d 4h". Django's ``timesince`` says "0 minutes" for anything under a minute, which reads as a glitch on a page that
refreshes every few seconds (#18). Pure formatting: the caller passes ``now``."""

from __future__ import annotations

from datetime import datetime

from scheduling.core.durations import UNITS

#: Below this many seconds a moment is "just now": "0 s ago" reads as a glitch, not a time.
JUST_NOW_SECONDS = 5


def brief_duration(seconds: float) -> str:
    """A duration in its two largest units, as a page says it: ``42 s``, ``12 min``, ``1 min 5 s``, ``2h 10m``,
    ``3d 4h``. Rounded to whole seconds; under a second reads ``0 s``."""
    left = max(0, round(seconds))
    if left < 60:
        return f"{left} s"
    if left < 3600:
        minutes, secs = divmod(left, 60)
        return f"{minutes} min {secs} s" if secs and minutes < 10 else f"{minutes} min"
    parts = []
    for unit, size in UNITS.items():
        count, left = divmod(left, size)
        if count:
            parts.append(f"{count}{unit}")
    return " ".join(parts[:2])


def relative_time(at: datetime, now: datetime) -> str:
    """``at`` seen from ``now``: "just now" within :data:`JUST_NOW_SECONDS`, else "12 s ago", "4 min ago",
    "2h 10m ago", or "in 3 min" for a moment ahead. Never "0 minutes ago"."""
    delta = (now - at).total_seconds()
    if abs(delta) < JUST_NOW_SECONDS:
        return "just now"
    return f"{brief_duration(delta)} ago" if delta > 0 else f"in {brief_duration(-delta)}"
