"""Renderers the APIs share: plain text and CSV bodies for clients that ask for them."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rest_framework.renderers import BaseRenderer, JSONRenderer


class PlainTextRenderer(BaseRenderer):
    """Lets clients ask for ``Accept: text/plain`` on the log endpoint (errors still render as JSON)."""

    media_type = "text/plain"
    format = "txt"
    charset = "utf-8"

    def render(
        self, data: object, accepted_media_type: str | None = None, renderer_context: Mapping[str, Any] | None = None
    ) -> bytes:
        return data.encode() if isinstance(data, str) else JSONRenderer().render(data)


class CsvRenderer(PlainTextRenderer):
    """Lets clients ask for ``Accept: text/csv`` (errors still render as JSON)."""

    media_type = "text/csv"
    format = "csv"
