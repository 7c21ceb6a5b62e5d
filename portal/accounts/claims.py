"""From the provider's groups to tenant roles: the mapping rules, parsed from ``CORRAL_OIDC_TENANT_GROUPS``.

Pure (no database): the rules say which groups name which tenant in which role; which tenants exist is the
services' business. A rule is ``<pattern>=<role>`` with exactly one ``{tenant}`` in the pattern, rules separated by
commas: the default, ``corral-{tenant}=member,corral-{tenant}-admin=admin``, makes group ``corral-lab`` a member of
tenant ``lab`` and ``corral-lab-admin`` its tenant admin. A group may match several rules (``corral-lab-admin`` also
reads as member of a tenant ``lab-admin``); every reading whose tenant exists counts, and a tenant named twice gets
its highest role.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

#: Roles from the lowest to the highest, as ``portal.tenants.models.Role`` spells them.
ROLE_ORDER = ("member", "admin")
PLACEHOLDER = "{tenant}"
#: What a tenant slug may contain (Django's SlugField).
SLUG = r"[-a-zA-Z0-9_]+"


class RuleError(ValueError):
    """A mapping rule that cannot be used; the message names it."""


@dataclass(frozen=True)
class GroupRule:
    """One ``<pattern>=<role>`` rule, compiled."""

    pattern: str
    role: str
    regex: re.Pattern[str]

    def tenant_of(self, group: str) -> str | None:
        """The tenant slug ``group`` names under this rule, or None when it does not match."""
        match = self.regex.fullmatch(group)
        return match.group("tenant") if match else None


def parse_group_rules(spec: str) -> tuple[GroupRule, ...]:
    """Rules from ``spec`` (``pattern=role,pattern=role``). An empty spec maps no group to any tenant."""
    rules = []
    for raw in spec.split(","):
        item = raw.strip()
        if not item:
            continue
        pattern, sep, role = item.rpartition("=")
        pattern, role = pattern.strip(), role.strip()
        if not sep or not pattern:
            raise RuleError(f"{item!r}: write <group pattern>=<role>, e.g. corral-{{tenant}}=member")
        if role not in ROLE_ORDER:
            raise RuleError(f"{item!r}: the role must be one of {', '.join(ROLE_ORDER)}")
        if pattern.count(PLACEHOLDER) != 1:
            raise RuleError(f"{item!r}: the pattern must contain {PLACEHOLDER} exactly once")
        before, _, after = pattern.partition(PLACEHOLDER)
        regex = re.compile(re.escape(before) + f"(?P<tenant>{SLUG})" + re.escape(after))
        rules.append(GroupRule(pattern=pattern, role=role, regex=regex))
    return tuple(rules)


def higher_role(one: str, other: str) -> str:
    return max(one, other, key=ROLE_ORDER.index)


def roles_from_groups(groups: Iterable[str], rules: Iterable[GroupRule]) -> dict[str, str]:
    """Every tenant slug the groups name, with the highest role any of them gives (whether the tenant exists is not
    checked here)."""
    rules = tuple(rules)
    roles: dict[str, str] = {}
    for group in groups:
        for rule in rules:
            slug = rule.tenant_of(group)
            if slug is not None:
                roles[slug] = higher_role(roles[slug], rule.role) if slug in roles else rule.role
    return roles


def groups_claim(claims: Mapping[str, object], name: str) -> list[str]:
    """The groups in ``claims[name]``: a list of strings (Keycloak, Authentik, Dex, Okta), or one space- or
    comma-separated string (some providers and LDAP bridges). Anything else counts as no groups."""
    value = claims.get(name)
    if isinstance(value, str):
        return [part for part in re.split(r"[\s,]+", value) if part]
    if isinstance(value, list | tuple):
        return [item for item in value if isinstance(item, str) and item]
    return []
