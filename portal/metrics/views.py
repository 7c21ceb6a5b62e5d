"""``GET /metrics`` for Prometheus: the GPUs' latest telemetry under dcgm-exporter's names, plus Corral's own series
(jobs, queue, scheduler rounds, nodes, alerts, the failure predictor).

Its labels name every tenant, job and node, so in production it answers only a scraper with the bearer token
(``CORRAL_METRICS_TOKEN``) or one from an allowed network (``CORRAL_METRICS_ALLOW_FROM``); with neither configured
it refuses everyone and says how to configure it. Outside production it stays open unless one is set. Ref: #15
"""

from __future__ import annotations

import hmac
import ipaddress

from django.conf import settings
from django.http import HttpRequest, HttpResponse
from django.utils import timezone
from django.views.decorators.http import require_GET
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

from portal.metrics.collector import CorralCollector
from portal.metrics.selectors import metrics_data

UNCONFIGURED = (
    "/metrics is closed: in production it needs CORRAL_METRICS_TOKEN (scrape with Authorization: Bearer <token>) or "
    "CORRAL_METRICS_ALLOW_FROM (the scraper's networks, e.g. 10.0.0.0/8) to be set. See docs/operations.md.\n"
)


def _bearer_matches(request: HttpRequest, token: str) -> bool:
    """``Authorization: Bearer <token>``, compared in constant time."""
    scheme, _, given = request.headers.get("Authorization", "").partition(" ")
    return scheme.lower() == "bearer" and hmac.compare_digest(given.strip().encode(), token.encode())


def _address_allowed(request: HttpRequest, networks: list[str]) -> bool:
    """The connection's own address (``REMOTE_ADDR``; a forwarded header can be forged) in one of ``networks``."""
    try:
        address = ipaddress.ip_address(request.META.get("REMOTE_ADDR", ""))
    except ValueError:
        return False
    return any(address in ipaddress.ip_network(network, strict=False) for network in networks)


def _refusal(request: HttpRequest) -> HttpResponse | None:
    """None when the caller may scrape; else the answer: 401 asking for the token, or 403 saying why."""
    token = str(settings.CORRAL_METRICS_TOKEN)
    networks = list(settings.CORRAL_METRICS_ALLOW_FROM)
    if not token and not networks:
        return HttpResponse(UNCONFIGURED, status=403, content_type="text/plain") if settings.PRODUCTION else None
    if (token and _bearer_matches(request, token)) or (networks and _address_allowed(request, networks)):
        return None
    if not token:
        return HttpResponse("your address is not in CORRAL_METRICS_ALLOW_FROM\n", status=403, content_type="text/plain")
    response = HttpResponse("a bearer token is required\n", status=401, content_type="text/plain")
    response["WWW-Authenticate"] = 'Bearer realm="corral-metrics"'
    return response


@require_GET
def metrics_view(request: HttpRequest) -> HttpResponse:
    if (refused := _refusal(request)) is not None:
        return refused
    # Latest samples older than a few sampling periods are from a silent agent: leave them out, as a dead
    # dcgm-exporter would.
    stale_after = float(getattr(settings, "CORRAL_METRICS_STALE_SECONDS", 6 * settings.CORRAL_SAMPLE_INTERVAL))
    now = timezone.now()
    registry = CollectorRegistry(auto_describe=False)
    registry.register(CorralCollector(metrics_data(now=now), now=now, stale_after=stale_after))
    return HttpResponse(generate_latest(registry), content_type=CONTENT_TYPE_LATEST)
