"""The what-if form: a window of history, the policies to replay it under, and the cluster to replay it on.

It checks shapes and turns dates into the window's datetimes; ``whatif_create`` checks the rest (whether the
window holds any finished job) and its refusals land on the field they name.
"""

from __future__ import annotations

from datetime import date, datetime, time
from typing import Any

from django import forms
from django.utils import timezone

from scheduling.core.placement import PLACEMENTS
from scheduling.core.policies import POLICIES, QUOTA_SUFFIX
from scheduling.whatif.selectors import ClusterShape
from scheduling.whatif.services import MAX_GPUS_PER_NODE, MAX_NODES, OVERHEAD_RULE, parse_overhead

WHOLE = {"invalid": "Enter a whole number.", "min_value": "Enter a whole number of at least %(limit_value)s."}


def _date_input() -> forms.DateInput:
    return forms.DateInput(attrs={"type": "date"}, format="%Y-%m-%d")


class WhatIfForm(forms.Form):
    since = forms.DateField(
        required=False, widget=_date_input(), help_text="Jobs submitted on or after this day. Empty: from the first."
    )
    until = forms.DateField(
        required=False, widget=_date_input(), help_text="Jobs submitted before this day (not on it). Empty: up to now."
    )
    policies = forms.MultipleChoiceField(
        widget=forms.CheckboxSelectMultiple, error_messages={"required": "Choose at least one policy."}
    )
    placement = forms.ChoiceField(choices=[(name, name) for name in PLACEMENTS])
    preemption_overhead = forms.CharField(
        max_length=20,
        initial="0",
        label="Preemption overhead",
        help_text="Seconds a preempted job loses each time it resumes, or helios (7 s / 30 s / 60 s by size).",
    )
    nodes = forms.IntegerField(min_value=1, max_value=MAX_NODES, error_messages=WHOLE)
    gpus_per_node = forms.IntegerField(
        min_value=1, max_value=MAX_GPUS_PER_NODE, label="GPUs per node", error_messages=WHOLE
    )
    racks = forms.IntegerField(min_value=1, initial=1, error_messages=WHOLE, help_text="Used by topology placement.")

    def __init__(
        self, *args: Any, live_policy: str, live_placement: str, cluster: ClusterShape | None, **kwargs: Any
    ) -> None:  # the rest goes to Form as is
        super().__init__(*args, **kwargs)
        field = self.fields["policies"]
        assert isinstance(field, forms.MultipleChoiceField)  # declared above; each form has its own copy
        names = list(POLICIES)
        if live_policy not in names:
            names.append(live_policy)  # e.g. fifo+quota: offered as it runs
        field.choices = [(name, _policy_label(name, live=name == live_policy)) for name in names]
        field.initial = [live_policy]
        self.fields["placement"].initial = live_placement
        if cluster is not None:
            self.fields["nodes"].initial = cluster.nodes
            self.fields["gpus_per_node"].initial = cluster.gpus_per_node
            self.fields["racks"].initial = cluster.racks
        self.fields["nodes"].help_text = (
            "A uniform cluster, filled in with the live one's shape: the nodes not down, the most common GPU count."
            if cluster is not None
            else "A uniform cluster. No live node has GPUs now, so say what to replay on."
        )

    def clean_since(self) -> datetime | None:
        return _start_of(self.cleaned_data["since"])

    def clean_until(self) -> datetime | None:
        return _start_of(self.cleaned_data["until"])

    def clean_preemption_overhead(self) -> str:
        text: str = self.cleaned_data["preemption_overhead"].strip().lower()
        if parse_overhead(text) is None:
            raise forms.ValidationError(OVERHEAD_RULE[:1].upper() + OVERHEAD_RULE[1:] + ".")
        return text

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        since, until = data.get("since"), data.get("until")
        if since is not None and until is not None and until <= since:
            self.add_error("until", "Must be a later day than the start of the window.")
        nodes, racks = data.get("nodes"), data.get("racks")
        if nodes is not None and racks is not None and racks > nodes:
            self.add_error("racks", f"Cannot exceed the number of nodes ({nodes}).")
        return data


def _policy_label(name: str, *, live: bool) -> str:
    label = name
    factory = POLICIES.get(name.removesuffix(QUOTA_SUFFIX))
    if factory is not None and factory().clairvoyant:
        label += " (oracle: knows every job's duration)"
    return f"{label} (live)" if live else label


def _start_of(day: date | None) -> datetime | None:
    """Midnight at the start of ``day`` in the portal's time zone."""
    if day is None:
        return None
    return timezone.make_aware(datetime.combine(day, time.min))
