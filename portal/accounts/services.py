"""The one write of sign-in: make or update the Corral user a provider's claims describe, and bring their tenant
memberships and staff flag in line with the provider's groups, in one transaction.

What follows the provider at every sign-in: username (``CORRAL_OIDC_USERNAME_CLAIM``), email, first and last
name, staff (only when ``CORRAL_OIDC_STAFF_GROUP`` is set), and the memberships it made (``ManagedMembership``).
What it never touches: memberships made by hand (an admin's grant outlives the groups; to hand a tenant over to
the provider, delete the hand-made membership), superusers' flags, passwords of linked local accounts.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import TYPE_CHECKING

from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import transaction
from django.utils import timezone

from portal.accounts.claims import groups_claim, parse_group_rules, roles_from_groups
from portal.accounts.models import ManagedMembership, OidcIdentity
from portal.accounts.selectors import identity_for, memberships_of, tenants_by_slug
from portal.errors import NotAllowed
from portal.tenants.models import Membership

if TYPE_CHECKING:
    from django.contrib.auth.models import User

logger = logging.getLogger(__name__)


class SignInFailed(Exception):
    """A sign-in through the provider that did not complete (raised by the backend, shown by the callback page):
    ``message`` is for the person signing in, ``status`` is the page's."""

    def __init__(self, message: str, *, status: int) -> None:
        super().__init__(message)
        self.message = message
        self.status = status


#: What the person is told when the portal cannot reach the provider (at the start of a sign-in, or its callback).
PROVIDER_UNREACHABLE = (
    "The identity provider could not be reached. Try again in a few minutes, or sign in with a local account."
)


def _claim_str(claims: Mapping[str, object], name: str) -> str:
    value = claims.get(name)
    return value.strip() if isinstance(value, str) else ""


@transaction.atomic
def oidc_sign_in(*, issuer: str, subject: str, claims: Mapping[str, object]) -> User:
    """The user linked to ``subject`` at ``issuer``, created on the first sign-in, updated from ``claims``.

    Preconditions: the claims come from a verified ID token and the userinfo endpoint of the same provider.
    Raises NotAllowed (with a message for the person signing in) when the username claim is missing, or when the
    first sign-in would take a username a local account already has (an admin links the two, docs/oidc.md).
    """
    username = _claim_str(claims, settings.CORRAL_OIDC_USERNAME_CLAIM)
    if not username:
        raise NotAllowed(
            f"The identity provider did not say who you are: its answer has no {settings.CORRAL_OIDC_USERNAME_CLAIM}."
        )
    username = username[:150]
    groups = groups_claim(claims, settings.CORRAL_OIDC_GROUPS_CLAIM)
    users = get_user_model().objects
    identity = identity_for(issuer=issuer, subject=subject, lock=True)
    if identity is None:
        if users.filter(username__iexact=username).exists():
            logger.warning("OIDC sign-in of %r at %s refused: a local account has that username", username, issuer)
            raise NotAllowed(
                f"An account named {username} already exists here and is not linked to the identity provider. "
                "Ask an administrator to link it."
            )
        user = users.create_user(username=username)
        user.set_unusable_password()
        identity = OidcIdentity(user=user, issuer=issuer, subject=subject)
    else:
        user = identity.user
        if username != user.username:
            if users.filter(username__iexact=username).exclude(pk=user.pk).exists():
                logger.warning("OIDC user %s keeps their username: %r is taken", user.username, username)
            else:
                user.username = username
    user.email = _claim_str(claims, "email") or user.email
    user.first_name = _claim_str(claims, "given_name")[:150] or user.first_name
    user.last_name = _claim_str(claims, "family_name")[:150] or user.last_name
    staff_group = settings.CORRAL_OIDC_STAFF_GROUP
    if staff_group and not user.is_superuser:
        user.is_staff = staff_group in groups
    user.save()
    identity.groups = groups
    identity.last_login_at = timezone.now()
    identity.save()
    _sync_memberships(user=user, groups=groups)
    return user


def _sync_memberships(*, user: User, groups: list[str]) -> None:
    """Add, change and remove the provider's memberships of ``user`` to match ``groups``; hand-made ones stay."""
    wanted = roles_from_groups(groups, parse_group_rules(settings.CORRAL_OIDC_TENANT_GROUPS))
    tenants = tenants_by_slug(wanted)
    for slug in sorted(set(wanted) - set(tenants)):
        logger.info("OIDC groups of %s name tenant %r, which does not exist: ignored", user.username, slug)
    for membership in memberships_of(user):
        slug = membership.tenant.slug
        managed = hasattr(membership, "oidc_managed")
        if not managed:
            tenants.pop(slug, None)  # an admin's grant stands as it is
        elif slug not in tenants:
            membership.delete()
        else:
            tenants.pop(slug)
            if membership.role != wanted[slug]:
                membership.role = wanted[slug]
                membership.save(update_fields=["role"])
    for slug, tenant in tenants.items():
        membership = Membership.objects.create(user=user, tenant=tenant, role=wanted[slug])
        ManagedMembership.objects.create(membership=membership)
