from django.apps import AppConfig


class TelemetryConfig(AppConfig):
    """The Django half of telemetry (the pure library is the top-level ``telemetry`` package). The label stays
    ``telemetry``, so its tables and migrations are those it had before it moved here."""

    name = "portal.telemetry"
    label = "telemetry"
    verbose_name = "GPU telemetry"
