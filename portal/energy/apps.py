from __future__ import annotations

from typing import Any

from django.apps import AppConfig
from django.core import checks


class EnergyConfig(AppConfig):
    name = "portal.energy"
    label = "energy"
    verbose_name = "Energy saving"

    def ready(self) -> None:
        checks.register(_power_commands_check)


def _power_commands_check(app_configs: Any, **_: Any) -> list[checks.CheckMessage]:
    """Energy saving needs both commands: one without the other could power nodes down and never wake them (or
    wake nodes it never powered down). Warn rather than refuse to start: with one missing the feature stays off."""
    from django.conf import settings

    off = bool(str(getattr(settings, "CORRAL_POWER_OFF_COMMAND", "")).strip())
    on = bool(str(getattr(settings, "CORRAL_POWER_ON_COMMAND", "")).strip())
    if off != on:
        return [
            checks.Warning(
                "energy saving stays off: set both CORRAL_POWER_OFF_COMMAND and CORRAL_POWER_ON_COMMAND",
                id="energy.W001",
            )
        ]
    return []
