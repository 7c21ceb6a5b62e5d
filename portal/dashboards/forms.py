"""The dashboard's query parameters. Shapes only: a bad value becomes a sentence on the page, never a 500."""

from __future__ import annotations

from typing import Any

from django import forms

from portal.dashboards.selectors import WINDOWS
from portal.tenants.models import Tenant


class DashboardForm(forms.Form):
    window = forms.ChoiceField(
        choices=[(key, label) for key, (_, label, _) in WINDOWS.items()],
        required=False,
        error_messages={
            "invalid_choice": f"There is no window “%(value)s”: choose {', '.join(WINDOWS)}. "
            "Showing the default: the shortest that holds every job you can see, at most a week."
        },
    )
    tenant = forms.ChoiceField(
        required=False,
        error_messages={"invalid_choice": "You have no tenant “%(value)s”: choose one of the list."},
    )

    def __init__(self, *args: Any, tenants: list[Tenant], **kwargs: Any) -> None:  # the rest goes to Form as is
        super().__init__(*args, **kwargs)
        field = self.fields["tenant"]
        assert isinstance(field, forms.ChoiceField)  # declared above; each form has its own copy
        # Only the tenants the reader may see: an unknown slug and another tenant's read the same.
        field.choices = [("", "all"), *((t.slug, t.slug) for t in tenants)]
