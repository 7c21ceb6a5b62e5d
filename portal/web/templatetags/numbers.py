"""How pages print numbers: durations as people write them (``1h 30m``), GPU-hours, percentages (the dashboard
and the tenants page; ``{% load numbers %}``).

Missing values print as a dash, never as a zero that would read as a measurement. A value can be missing two ways:
``None`` (no telemetry), or an attribute of a summary that does not exist (``row.jct.median`` of a tenant with no
finished job), which the template engine passes on as an empty string.
"""

from __future__ import annotations

from django import template

from scheduling.core.durations import format_duration

register = template.Library()
DASH = "–"


def _number(value: object) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


@register.filter
def duration(seconds: object) -> str:
    """``5400.0`` -> ``1h 30m``; past an hour the seconds are noise on a dashboard and are rounded away."""
    value = _number(seconds)
    if value is None:
        return DASH
    return format_duration(round(value / 60) * 60 if value >= 3600 else value)


@register.filter
def gpu_hours(hours: object) -> str:
    """``1234.56`` -> ``1,234.6``; below 10 with two decimals, so a short test job does not read as nothing."""
    value = _number(hours)
    if value is None:
        return DASH
    return f"{value:,.1f}" if value >= 10 else f"{value:.2f}"


@register.filter
def percent(ratio: object, scale: float = 100.0) -> str:
    """A ratio (0-1; ``scale`` 100) or a percentage (``scale`` 1) as ``73 %``."""
    value = _number(ratio)
    return DASH if value is None else f"{value * scale:.0f} %"


@register.filter
def gib(size: object) -> str:
    """Bytes as GiB with one decimal (``4294967296`` -> ``4.0 GiB``): the binary unit that nvidia-smi, MPS's memory
    limit, the CLI and the API's sizes use. Django's ``filesizeformat`` counts in 1024s too but says "GB"."""
    value = _number(size)
    if value is None:
        return DASH
    return f"{value / (1 << 30):.1f} GiB"
