"""Tenants (research groups, teams), who belongs to them, and what each may use."""

from __future__ import annotations

from typing import TYPE_CHECKING

from django.conf import settings
from django.db import models
from django.db.models import Q

if TYPE_CHECKING:
    from django.contrib.auth.models import AnonymousUser, User


class TenantQuerySet(models.QuerySet["Tenant"]):
    def visible_to(self, user: User | AnonymousUser) -> TenantQuerySet:
        """Tenants ``user`` may see: the ones they belong to; every tenant for staff."""
        if not user.is_authenticated:
            return self.none()
        if user.is_staff:
            return self.all()
        return self.filter(memberships__user=user).distinct()

    def submittable_by(self, user: User | AnonymousUser) -> TenantQuerySet:
        """Tenants the submit form offers ``user``: the ones they belong to. Staff may submit to any tenant, so a
        staff member who belongs to none is offered every tenant visible to them (all of them)."""
        own = self.filter(memberships__user=user).distinct() if user.is_authenticated else self.none()
        if user.is_authenticated and user.is_staff and not own.exists():
            return self.visible_to(user)
        return own


class Tenant(models.Model):
    """A group that shares a GPU quota: a lab, a team, a project. Jobs always belong to exactly one tenant."""

    slug = models.SlugField(max_length=50, unique=True, help_text="Short id used in the API and CLI.")
    name = models.CharField(max_length=200)
    created_at = models.DateTimeField(auto_now_add=True)

    objects = TenantQuerySet.as_manager()

    class Meta:
        ordering = ["slug"]

    def __str__(self) -> str:
        return self.slug


class Role(models.TextChoices):
    MEMBER = "member", "Member"
    ADMIN = "admin", "Tenant admin"


class Membership(models.Model):
    """A user's place in a tenant. Tenant admins may see and cancel every job of the tenant."""

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="memberships")
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="memberships")
    role = models.CharField(max_length=16, choices=Role.choices, default=Role.MEMBER)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["user", "tenant"], name="%(app_label)s_%(class)s_unique_user_tenant"),
            models.CheckConstraint(condition=Q(role__in=Role.values), name="%(app_label)s_%(class)s_role_valid"),
        ]

    def __str__(self) -> str:
        return f"{self.user} in {self.tenant} ({self.role})"


class Quota(models.Model):
    """What a tenant may use. Empty limits mean "no limit".

    ``gpu_limit`` caps the GPUs its jobs hold at once (the scheduler holds jobs back with the reason "tenant cap
    reached"); ``max_active_jobs`` caps jobs pending or running at once (enforced at submit, under a row lock);
    ``guaranteed_gpus`` and ``user_gpu_limit`` feed the fair-share layer of the scheduling core.
    """

    tenant = models.OneToOneField(Tenant, on_delete=models.CASCADE, related_name="quota")
    gpu_limit = models.PositiveIntegerField(null=True, blank=True, help_text="Most GPUs in use at once.")
    max_active_jobs = models.PositiveIntegerField(null=True, blank=True, help_text="Most jobs pending or running.")
    guaranteed_gpus = models.PositiveIntegerField(default=0, help_text="GPUs the tenant can always reclaim.")
    user_gpu_limit = models.PositiveIntegerField(null=True, blank=True, help_text="Most GPUs one member holds.")
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [
            models.CheckConstraint(
                condition=Q(gpu_limit__isnull=True) | Q(guaranteed_gpus__lte=models.F("gpu_limit")),
                name="%(app_label)s_%(class)s_guarantee_within_limit",
            ),
        ]

    def __str__(self) -> str:
        return f"quota of {self.tenant}"
