"""Admin for single sign-on: see which subject a user is and the groups the provider last sent, link a local account
to a subject (add a row), and see which memberships the provider manages."""

from __future__ import annotations

from django.contrib import admin

from portal.accounts.models import ManagedMembership, OidcIdentity


@admin.register(OidcIdentity)
class OidcIdentityAdmin(admin.ModelAdmin):
    list_display = ["user", "subject", "issuer", "last_login_at"]
    search_fields = ["user__username", "subject"]
    list_select_related = ["user"]
    raw_id_fields = ["user"]
    readonly_fields = ["groups", "last_login_at"]


@admin.register(ManagedMembership)
class ManagedMembershipAdmin(admin.ModelAdmin):
    list_display = ["membership"]
    list_select_related = ["membership__user", "membership__tenant"]
    search_fields = ["membership__user__username", "membership__tenant__slug"]
    raw_id_fields = ["membership"]
