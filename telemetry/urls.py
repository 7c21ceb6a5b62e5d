"""Telemetry pages: /metrics for Prometheus, node detail with GPU health and risk (filled in by issue #4)."""

urlpatterns: list = []
