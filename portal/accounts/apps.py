from django.apps import AppConfig


class AccountsConfig(AppConfig):
    name = "portal.accounts"
    label = "accounts"
    verbose_name = "Single sign-on"

    def ready(self) -> None:
        # Registers the settings check (a group mapping that cannot be read fails `manage.py check` and `migrate`).
        from portal.accounts import checks  # noqa: F401
