"""Who a provider's subject is here, and which memberships the provider's groups made."""

from __future__ import annotations

from django.conf import settings
from django.db import models

from portal.tenants.models import Membership


class OidcIdentity(models.Model):
    """Links a Corral user to one subject (``sub``) of one issuer. Users are found by this link, never by email or
    username: an address or a name chosen at the provider must not open a local account that happens to share it.
    An admin links an existing local account by adding a row here (docs/oidc.md)."""

    user = models.OneToOneField(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="oidc_identity")
    issuer = models.CharField(max_length=255)
    subject = models.CharField(max_length=255)
    #: The groups the provider sent at the last sign-in, to explain the memberships they gave (admin page).
    groups = models.JSONField(default=list, blank=True)
    last_login_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        verbose_name = "OIDC identity"
        verbose_name_plural = "OIDC identities"
        constraints = [
            models.UniqueConstraint(fields=["issuer", "subject"], name="%(app_label)s_%(class)s_unique_subject"),
        ]

    def __str__(self) -> str:
        return f"{self.user} = {self.subject} at {self.issuer}"


class ManagedMembership(models.Model):
    """Marks a membership as the provider's: sign-ins add, change and remove marked memberships to follow the
    groups, and leave every unmarked one (made by hand in the admin or the demo) as it is."""

    membership = models.OneToOneField(Membership, on_delete=models.CASCADE, related_name="oidc_managed")

    def __str__(self) -> str:
        return f"{self.membership}, from the provider's groups"
