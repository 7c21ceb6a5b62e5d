"""What a notification setting may be: the one place the profile form, the API and the model take their checks from.

Pure: no database. Messages are sentences a person can act on, shown next to the input (form) or under the field's
name (API, 400).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable
from urllib.parse import urlsplit

from django.conf import settings
from django.core.exceptions import ValidationError

WEBHOOK_SCHEMES = ("http", "https")
WEBHOOK_URL_MAX_LENGTH = 500
#: How long a job may wait before its owner hears of it: a minute to 30 days (the longest time limit), an hour
#: unless they say otherwise.
LONG_WAIT_MIN_MINUTES = 1
LONG_WAIT_MAX_MINUTES = 30 * 24 * 60
DEFAULT_LONG_WAIT_MINUTES = 60

#: What the threshold may be, in words: the one message a bad one gets (form, API, service).
LONG_WAIT_RULE = (
    f"Enter a whole number of minutes from {LONG_WAIT_MIN_MINUTES} to {LONG_WAIT_MAX_MINUTES:,} (30 days); "
    f"{DEFAULT_LONG_WAIT_MINUTES} is an hour."
)

_EXAMPLE = "such as https://hooks.slack.com/services/… or https://mattermost.example.org/hooks/…"


def webhook_url_problem(value: str) -> str | None:
    """Why ``value`` cannot be a webhook address, or None when it can: an absolute http or https URL with a host,
    no spaces, at most ``WEBHOOK_URL_MAX_LENGTH`` characters. Single-label hosts (``http://mattermost/hooks/x``) are
    fine: inside a cluster that is how services are often named."""
    if len(value) > WEBHOOK_URL_MAX_LENGTH:
        return f"Keep the webhook address to {WEBHOOK_URL_MAX_LENGTH} characters."
    if any(c.isspace() or ord(c) < 32 or ord(c) == 127 for c in value):
        return "A webhook address has no spaces or control characters."
    try:
        parts = urlsplit(value)
        port = parts.port  # raises ValueError for a port out of range or not a number
    except ValueError:
        return f"Enter a whole http:// or https:// address, {_EXAMPLE}."
    if parts.scheme.lower() not in WEBHOOK_SCHEMES:
        return f"Enter an http:// or https:// address, {_EXAMPLE}."
    if not parts.hostname:
        return f"The address names no host; enter a whole address, {_EXAMPLE}."
    if port == 0:
        return "Port 0 cannot be reached; leave the port out or give the webhook's port."
    return webhook_address_refused([parts.hostname])  # an address written as such is checked at once


def webhook_address_refused(addresses: Iterable[str]) -> str | None:
    """Why the site sends no webhook to one of ``addresses`` (IP addresses; anything else is skipped), or None:
    one is in ``CORRAL_NOTIFY_WEBHOOK_DENY_NETWORKS``. Checked on the address as written when it is saved, and on
    what its host name resolves to before each delivery."""
    networks = [ipaddress.ip_network(n.strip(), strict=False) for n in settings.CORRAL_NOTIFY_WEBHOOK_DENY_NETWORKS]
    for address in addresses:
        try:
            ip = ipaddress.ip_address(address.strip("[]").split("%")[0])
        except ValueError:
            continue  # a host name: resolved and checked at delivery
        if any(ip.version == net.version and ip in net for net in networks):
            return f"This site sends no webhooks to {ip}: its network is refused (CORRAL_NOTIFY_WEBHOOK_DENY_NETWORKS)."
    return None


def validate_webhook_url(value: str) -> None:
    """Django validator form of :func:`webhook_url_problem` (an empty value is allowed: no webhook)."""
    if value and (problem := webhook_url_problem(value)) is not None:
        raise ValidationError(problem, code="invalid")


def long_wait_problem(minutes: int) -> str | None:
    """Why ``minutes`` cannot be a long-wait threshold, or None when it can."""
    return None if LONG_WAIT_MIN_MINUTES <= minutes <= LONG_WAIT_MAX_MINUTES else LONG_WAIT_RULE
