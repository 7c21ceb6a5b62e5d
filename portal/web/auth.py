"""Types the login-required pages share."""

from __future__ import annotations

from django.contrib.auth.models import User
from django.http import HttpRequest


class AuthenticatedHttpRequest(HttpRequest):
    """The request of a ``login_required`` view: its user is signed in (the pattern django-stubs documents)."""

    user: User
