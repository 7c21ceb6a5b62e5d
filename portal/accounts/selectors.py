"""Reads for sign-in: the user a provider's subject is linked to, the tenants groups name, a user's memberships."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from portal.accounts.models import OidcIdentity
from portal.tenants.models import Membership, Tenant

if TYPE_CHECKING:
    from django.contrib.auth.models import User


def identity_for(*, issuer: str, subject: str, lock: bool = False) -> OidcIdentity | None:
    """The link of ``subject`` at ``issuer`` with its user, or None. ``lock`` holds both rows until the transaction
    ends, so two sign-ins of one person at once sync one after the other."""
    rows = OidcIdentity.objects.select_related("user").filter(issuer=issuer, subject=subject)
    if lock:
        rows = rows.select_for_update()
    return rows.first()


def tenants_by_slug(slugs: Iterable[str]) -> dict[str, Tenant]:
    """The tenants among ``slugs`` that exist, by slug (one query)."""
    return {tenant.slug: tenant for tenant in Tenant.objects.filter(slug__in=list(slugs))}


def memberships_of(user: User) -> list[Membership]:
    """Every membership of ``user`` with its tenant and whether the provider manages it (``oidc_managed``)."""
    return list(Membership.objects.filter(user=user).select_related("tenant", "oidc_managed"))
