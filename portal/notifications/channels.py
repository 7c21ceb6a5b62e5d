"""The two ways out: a mail through Django's mail backend, and a JSON POST to an incoming webhook.

Each either returns (delivered) or raises :class:`DeliveryError` with a short sentence for the profile page and
whether trying again could help (``permanent``). Errors say what happened in general terms, never the webhook's
answer body: a user chooses the webhook's address, and its answer must not become a way to read pages of hosts the
portal can reach that the user cannot.
"""

from __future__ import annotations

import smtplib
import socket
from typing import Any
from urllib.parse import urlsplit

import httpx
from django.conf import settings
from django.core.mail import EmailMessage

from portal.notifications.rules import webhook_address_refused

#: Answers worth another try: a timeout, too early, too many requests (4xx that are not the request's fault).
RETRYABLE_4XX = frozenset({408, 425, 429})
ERROR_MAX = 500


class DeliveryError(Exception):
    """One try failed. ``permanent``: trying again would fail the same way (a refused address, a 404 webhook)."""

    def __init__(self, message: str, *, permanent: bool = False) -> None:
        super().__init__(message)
        self.message = message[:ERROR_MAX]
        self.permanent = permanent


def send_email(*, to: str, subject: str, body: str) -> None:
    """Mail ``body`` to ``to`` from ``DEFAULT_FROM_EMAIL`` (the backend and server: ``EMAIL_URL``)."""
    message = EmailMessage(subject=subject, body=body, from_email=settings.DEFAULT_FROM_EMAIL, to=[to])
    try:
        message.send(fail_silently=False)
    except smtplib.SMTPRecipientsRefused as exc:
        codes = [code for code, _ in exc.recipients.values()]
        raise DeliveryError(
            f"the mail server refused {to} (SMTP {', '.join(map(str, codes))})",
            permanent=bool(codes) and all(code >= 500 for code in codes),
        ) from exc
    except smtplib.SMTPResponseException as exc:
        raise DeliveryError(f"the mail server answered SMTP {exc.smtp_code}", permanent=False) from exc
    except (smtplib.SMTPException, OSError) as exc:
        raise DeliveryError(f"could not send mail: {type(exc).__name__}: {exc}") from exc


def post_webhook(*, url: str, payload: dict[str, Any]) -> None:
    """POST ``payload`` as JSON to ``url``; any 2xx is delivered. Redirects are not followed (a webhook answers
    where it is), and the wait is bounded by ``CORRAL_NOTIFY_WEBHOOK_TIMEOUT``. A host that resolves into a refused
    network (``CORRAL_NOTIFY_WEBHOOK_DENY_NETWORKS``) is not contacted. The name is resolved again to connect, so a
    name whose answers change between the two look-ups is not caught: the setting is a guard, not a firewall."""
    refused = webhook_address_refused(_resolved(url))
    if refused is not None:
        raise DeliveryError(refused, permanent=True)
    timeout = settings.CORRAL_NOTIFY_WEBHOOK_TIMEOUT
    try:
        response = httpx.post(
            url,
            json=payload,
            timeout=timeout,
            follow_redirects=False,
            headers={"User-Agent": "Corral-notifications/1"},
        )
    except httpx.TimeoutException as exc:
        raise DeliveryError(f"the webhook did not answer within {timeout:g} s") from exc
    except httpx.InvalidURL as exc:
        raise DeliveryError("the webhook address cannot be used; enter it again", permanent=True) from exc
    except httpx.HTTPError as exc:  # refused, reset, no such host, TLS
        raise DeliveryError("could not reach the webhook's host") from exc
    status = response.status_code
    if 200 <= status < 300:
        return
    if 300 <= status < 400:
        raise DeliveryError(
            f"the webhook answered {status}, a redirect (not followed): give its final address", permanent=True
        )
    permanent = 400 <= status < 500 and status not in RETRYABLE_4XX
    raise DeliveryError(f"the webhook answered {status} {response.reason_phrase}".rstrip(), permanent=permanent)


def _resolved(url: str) -> list[str]:
    """The addresses ``url``'s host resolves to (the host itself when it is an address); none when it does not
    resolve (the POST then fails as unreachable)."""
    parts = urlsplit(url)
    if not parts.hostname:
        return []
    try:
        found = socket.getaddrinfo(parts.hostname, parts.port or 80, proto=socket.IPPROTO_TCP)
    except (OSError, UnicodeError):
        return [parts.hostname]
    return [parts.hostname, *(str(info[4][0]) for info in found)]
