"""Relative times and brief spans in templates (``{% load times %}``): ``{{ at|ago:now }}`` reads "just now",
"12 s ago" or "2h 10m ago" (never "0 minutes ago"), ``{{ seconds|span }}`` reads "1 min 5 s". Missing values print
as a dash, as the number filters do."""

from __future__ import annotations

from datetime import datetime

from django import template
from django.utils import timezone

from portal.web.times import brief_duration, relative_time

register = template.Library()
DASH = "–"


@register.filter
def ago(at: object, now: object = None) -> str:
    """``at`` relative to ``now`` (the page's one moment, so every time on it agrees), or to the clock."""
    if not isinstance(at, datetime):
        return DASH
    return relative_time(at, now if isinstance(now, datetime) else timezone.now())


@register.filter
def span(seconds: object) -> str:
    if not isinstance(seconds, int | float) or isinstance(seconds, bool):
        return DASH
    return brief_duration(seconds)
