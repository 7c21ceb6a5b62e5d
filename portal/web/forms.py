"""HTML forms. They check shapes; ``job_submit`` decides the rest and its refusals land on the right field."""

from __future__ import annotations

from django import forms

from portal.api.serializers import MAX_GPUS_PER_JOB
from portal.tenants.models import Tenant


class JobSubmitForm(forms.Form):
    name = forms.CharField(max_length=200, required=False, help_text="Defaults to the first line of the command.")
    command = forms.CharField(
        widget=forms.Textarea(attrs={"rows": 4, "spellcheck": "false", "placeholder": "python train.py --epochs 10"}),
        max_length=16_000,
        strip=False,
        help_text="Runs with /bin/sh in its own working directory on the node.",
    )
    gpus = forms.IntegerField(min_value=1, max_value=MAX_GPUS_PER_JOB, initial=1, label="GPUs")
    tenant = forms.ModelChoiceField(queryset=Tenant.objects.none(), to_field_name="slug", empty_label=None)

    def __init__(self, *args: object, tenants: list[Tenant], **kwargs: object) -> None:
        super().__init__(*args, **kwargs)
        field = self.fields["tenant"]
        field.queryset = Tenant.objects.filter(pk__in=[t.pk for t in tenants])
        if len(tenants) <= 1:
            field.widget = forms.HiddenInput()
            field.required = False

    def clean_command(self) -> str:
        command = self.cleaned_data["command"]
        if not command.strip():
            raise forms.ValidationError("Enter the command to run.")
        return command.replace("\r\n", "\n")
