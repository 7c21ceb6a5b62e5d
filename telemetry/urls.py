"""Telemetry pages at the site root: /metrics for Prometheus and the node detail page (its list is /nodes/)."""

from django.urls import path

from telemetry import views

urlpatterns = [
    path("metrics", views.metrics_view, name="metrics"),
    path("nodes/<slug:name>/", views.node_detail_view, name="node-detail"),
]
