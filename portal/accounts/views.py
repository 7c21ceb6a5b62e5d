"""The sign-in pages: the login page (a password form, and a "Sign in with …" button when single sign-on is on),
the start of the provider's code flow, and its callback. Every way a sign-in through the provider can fail (the
provider down, a stale or forged state, consent denied, a token that does not check out) ends on a page that says
so in words, with a way back; none is a 500."""

from __future__ import annotations

import logging
from typing import Any

from django.contrib.auth.views import LoginView
from django.core.exceptions import SuspiciousOperation
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from mozilla_django_oidc.views import OIDCAuthenticationCallbackView, OIDCAuthenticationRequestView

from portal.accounts.provider import ProviderUnavailable, endpoints, library_setting, oidc_enabled, provider_name
from portal.accounts.services import PROVIDER_UNREACHABLE, SignInFailed

logger = logging.getLogger(__name__)

#: What the provider's ``error`` codes (RFC 6749, 4.1.2.1; OpenID Connect Core, 3.1.2.6) mean to the person.
PROVIDER_ERRORS = {
    "access_denied": "The sign-in was cancelled or not allowed at the identity provider.",
    "login_required": "The identity provider needs you to sign in there first.",
    "consent_required": "The identity provider needs your consent to share your details with Corral.",
    "interaction_required": "The identity provider needs you to finish signing in there first.",
    "temporarily_unavailable": "The identity provider is busy or down for maintenance. Try again in a few minutes.",
    "server_error": "The identity provider hit an error. Try again in a few minutes.",
}


def sign_in_failed(request: HttpRequest, message: str, *, status: int) -> HttpResponse:
    context = {"message": message, "provider_name": provider_name(), "oidc_enabled": oidc_enabled()}
    return render(request, "accounts/sign_in_failed.html", context, status=status)


class CorralLoginView(LoginView):
    """Django's login page, with the provider's button when single sign-on is on (read per request)."""

    def get_context_data(self, **kwargs: Any) -> dict[str, Any]:
        context: dict[str, Any] = super().get_context_data(**kwargs)
        context.update(oidc_enabled=oidc_enabled(), provider_name=provider_name())
        return context


class OidcStartView(OIDCAuthenticationRequestView):
    """Sends the browser to the provider with a fresh state, nonce and PKCE challenge (the library's)."""

    @staticmethod
    def get_settings(attr: str, *args: Any) -> Any:
        return library_setting(attr, *args)

    def get(self, request: HttpRequest) -> HttpResponse:
        if not oidc_enabled():
            return sign_in_failed(request, "Single sign-on is not set up on this site.", status=404)
        try:
            self.OIDC_OP_AUTH_ENDPOINT = endpoints().authorization
        except ProviderUnavailable as exc:
            logger.warning("OIDC sign-in not started, the provider is unreachable: %s", exc)
            return sign_in_failed(request, PROVIDER_UNREACHABLE, status=503)
        response: HttpResponse = super().get(request)
        return response


class OidcCallbackView(OIDCAuthenticationCallbackView):
    """Where the provider sends the browser back; the library checks the state and runs the backend."""

    @staticmethod
    def get_settings(attr: str, *args: Any) -> Any:
        return library_setting(attr, *args)

    def get(self, request: HttpRequest) -> HttpResponse:
        if not oidc_enabled():
            return sign_in_failed(request, "Single sign-on is not set up on this site.", status=404)
        try:
            response: HttpResponse = super().get(request)
        except SuspiciousOperation:
            # The state is not one this browser's session started: an old tab, a second sign-in meanwhile, or a
            # forged callback.
            return sign_in_failed(
                request,
                "This sign-in link is stale or was not started from this browser. Please sign in again.",
                status=400,
            )
        except SignInFailed as exc:
            return sign_in_failed(request, exc.message, status=exc.status)
        return response

    def login_failure(self) -> HttpResponse:
        request: HttpRequest = self.request
        error = request.GET.get("error", "")
        if error:
            message = PROVIDER_ERRORS.get(error, f"The identity provider did not sign you in ({error[:60]}).")
            return sign_in_failed(request, message, status=403)
        user = getattr(self, "user", None)
        if user is not None and not user.is_active:
            return sign_in_failed(request, "Your Corral account is disabled. Ask an administrator.", status=403)
        return sign_in_failed(
            request,
            "The sign-in did not complete: it may have expired, or been started in another browser. Please sign in "
            "again.",
            status=400,
        )
