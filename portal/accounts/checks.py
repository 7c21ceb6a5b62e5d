"""System checks of the single sign-on settings: a group mapping that cannot be read fails ``manage.py check``,
``migrate`` and ``runserver`` (so ``make run`` and the compose file's migrate step), not someone's first sign-in."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.checks import CheckMessage, Error, register

from portal.accounts.claims import RuleError, parse_group_rules


@register()
def oidc_settings_check(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    try:
        parse_group_rules(settings.CORRAL_OIDC_TENANT_GROUPS)
    except RuleError as exc:
        return [Error(f"CORRAL_OIDC_TENANT_GROUPS: {exc}", id="accounts.E001")]
    return []
