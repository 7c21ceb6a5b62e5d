from django.apps import AppConfig


class TelemetryConfig(AppConfig):
    name = "telemetry"
    label = "telemetry"
    verbose_name = "GPU telemetry"
