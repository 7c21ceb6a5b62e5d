"""Sign-in through the site's identity provider (OpenID Connect): Corral users, tenant memberships and staff from
the provider's claims and groups. Local accounts stay; docs/oidc.md tells how to turn it on."""
