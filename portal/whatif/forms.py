"""The what-if form: a window of history, the policies to replay it under, the cluster to replay it on (a copy of
the live nodes, or a uniform cluster of a size to try), whether the tenants' quotas of today apply, and, if they do,
other quotas to try for some tenants in this replay only ("what if lab had 16 guaranteed GPUs").

Every policy is offered as it is and with the tenant layer (``+quota``), whatever runs live. Caps hold jobs back
under every policy; guaranteed GPUs and the fair-share half-life are read by ``+quota`` policies alone, so the page
groups them as such and ``static/whatif.js`` shows them only while a ``+quota`` policy is ticked (#18).

It checks shapes and turns dates into the window's datetimes, and judges what it can with the rules of
``scheduling.sim.replay_rules`` (racks against nodes, a guarantee against its cap, the window, the overhead), in its
own words next to the input; ``whatif_create`` checks the rest (whether the window holds any finished job, whether
a live node is still there) and its refusals land on the field they name. Its cleaned data is ``whatif_create``'s
keyword arguments, as they are.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import date, datetime, time
from functools import cached_property
from typing import Any

from django import forms
from django.forms.boundfield import BoundWidget
from django.utils import timezone

from portal.whatif.describe import layout_text
from portal.whatif.elastic_form import clean_elastic, elastic_fields
from portal.whatif.selectors import ClusterShape
from portal.whatif.services import ReplayCluster
from scheduling.core.model import TenantLimits
from scheduling.core.placement import PLACEMENTS
from scheduling.core.policies import POLICIES, QUOTA_SUFFIX
from scheduling.core.share_placement import PLACERS
from scheduling.sim.replay_rules import (
    HALF_LIFE_RULE,
    MAX_GPUS_PER_NODE,
    MAX_HALF_LIFE_HOURS,
    MAX_NODES,
    MAX_SHARED_GPUS,
    guarantee_refusal,
    overhead_refusal,
    racks_refusal,
    uniform_size_refusals,
    window_refusal,
)

WHOLE = {"invalid": "Enter a whole number.", "min_value": "Enter a whole number of at least %(limit_value)s."}
UNIFORM_LABEL = "A uniform cluster of the size below (what if we had more, or fewer)"
#: The fields only a uniform cluster reads; the page shows them under its choice.
UNIFORM_FIELDS = ("nodes", "gpus_per_node", "racks")
#: A tenant's quota inputs: TenantLimits' field names, in the table's column order, with their labels.
QUOTA_KEYS = {"guaranteed_gpus": "guaranteed GPUs", "gpu_cap": "GPU cap", "user_cap": "per-user cap"}


@dataclass(frozen=True, slots=True)
class QuotaInputs:
    """One tenant's row of the quota table: its slug and its three inputs, bound (the template only renders)."""

    tenant: str
    guaranteed_gpus: forms.BoundField
    gpu_cap: forms.BoundField
    user_cap: forms.BoundField

    @property
    def inputs(self) -> tuple[forms.BoundField, ...]:
        """The three, in the table's column order."""
        return (self.guaranteed_gpus, self.gpu_cap, self.user_cap)


def quota_field(slug: str, key: str) -> str:
    """The form field of ``slug``'s ``key`` (e.g. ``quota_lab_gpu_cap``). A slug is letters, digits, ``-`` and
    ``_``, so the name is a valid HTML name and id; no key ends with another, so two tenants' names never collide."""
    return f"quota_{slug}_{key}"


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
    cluster = forms.TypedChoiceField(
        coerce=ReplayCluster,
        widget=forms.RadioSelect,
        label="Replay on",
        error_messages={"required": "Choose a cluster."},
    )
    # Not required by themselves: a live copy ignores them, so clean() asks for them only for a uniform cluster.
    nodes = forms.IntegerField(required=False, min_value=1, max_value=MAX_NODES, error_messages=WHOLE)
    gpus_per_node = forms.IntegerField(
        required=False, min_value=1, max_value=MAX_GPUS_PER_NODE, label="GPUs per node", error_messages=WHOLE
    )
    racks = forms.IntegerField(
        required=False, min_value=1, initial=1, error_messages=WHOLE, help_text="Used by topology placement."
    )
    apply_quotas = forms.BooleanField(
        required=False,
        initial=True,
        label="Apply the tenants' quotas as they are now",
        help_text="Tenant and per-user GPU caps hold jobs back as they do live, and +quota policies lend idle "
        "guarantees and reclaim them. Untick to replay with no limits: every tenant may use the whole cluster.",
    )
    fair_share_half_life_hours = forms.FloatField(
        required=False,
        min_value=0,
        max_value=MAX_HALF_LIFE_HOURS,
        label="Fair-share half-life (hours)",
        help_text="Under +quota policies, idle GPUs go first to the tenants that used the least of their share, "
        "counting usage from the start of the window with this half-life. Pre-filled with the live setting. "
        "0 or empty: no fair share.",
        error_messages={
            "invalid": HALF_LIFE_RULE[:1].upper() + HALF_LIFE_RULE[1:] + ".",
            "min_value": HALF_LIFE_RULE[:1].upper() + HALF_LIFE_RULE[1:] + ".",
            "max_value": HALF_LIFE_RULE[:1].upper() + HALF_LIFE_RULE[1:] + ".",
        },
    )

    sharing = forms.BooleanField(
        required=False,
        label="Also replay the shares of a GPU (MPS sharing)",
        help_text="The window's shares of a GPU are replayed a GPU each, then with shares placed by each placer "
        "ticked below, on the live GPUs marked shared (or the count below). See docs/sharing.md.",
    )
    share_placers = forms.MultipleChoiceField(
        required=False,
        choices=[(name, name) for name in PLACERS],
        initial=list(PLACERS),
        widget=forms.CheckboxSelectMultiple,
        label="Share placers",
        help_text="None ticked: all of them.",
    )
    shared_gpus = forms.IntegerField(
        required=False,
        min_value=1,
        max_value=MAX_SHARED_GPUS,
        label="Shared GPUs",
        error_messages=WHOLE,
        help_text="Replay the shares on this many 80 GiB GPUs. Empty: the live GPUs marked shared.",
    )

    def __init__(
        self,
        *args: Any,
        live_policy: str,
        live_placement: str,
        cluster: ClusterShape | None,
        quotas: Mapping[str, TenantLimits],
        half_life_hours: float = 0.0,
        **kwargs: Any,
    ) -> None:  # the rest goes to Form as is
        super().__init__(*args, **kwargs)
        self.fields["fair_share_half_life_hours"].initial = half_life_hours or None
        self.quotas = dict(sorted(quotas.items()))  # today's, by slug: the inputs' initial values and what an edit is
        self.quota_refusals: list[str] = []  # the service's refusals of the quota changes, shown under the table
        self._add_quota_fields()
        self.fields.update(elastic_fields())  # after the sharing inputs (#19)
        field = self.fields["policies"]
        assert isinstance(field, forms.MultipleChoiceField)  # declared above; each form has its own copy
        # Every policy, then each with the tenant layer, whatever runs live: "what would +quota have done" is the
        # question before switching to it (#18).
        names = [*POLICIES, *(f"{name}{QUOTA_SUFFIX}" for name in POLICIES)]
        if live_policy not in names:
            names.append(live_policy)  # a name the form does not know of: offered as it runs
        field.choices = [(name, _policy_label(name, live=name == live_policy)) for name in names]
        field.initial = [live_policy]
        self.fields["placement"].initial = live_placement
        self._offer_clusters(cluster)
        if cluster is not None:
            self.fields["nodes"].initial = cluster.nodes
            self.fields["gpus_per_node"].initial = cluster.gpus_per_node
            self.fields["racks"].initial = cluster.racks
        self.fields["nodes"].help_text = (
            "Filled in with the live cluster's shape: the nodes not down, the most common GPU count."
            if cluster is not None
            else "No live node has GPUs now, so say what to replay on."
        )

    def _add_quota_fields(self) -> None:
        """Three optional inputs per tenant, pre-filled with today's quota; blank caps mean no limit."""
        for slug, today in self.quotas.items():
            for key, label in QUOTA_KEYS.items():
                self.fields[quota_field(slug, key)] = forms.IntegerField(
                    required=False,
                    min_value=0,
                    initial=getattr(today, key),
                    label=f"{slug}: {label}",
                    error_messages=WHOLE,
                    widget=forms.NumberInput(attrs={"aria-label": f"{slug}: {label}"}),
                )

    @cached_property
    def quota_field_names(self) -> frozenset[str]:
        """For the template, which shows these in the quota table rather than in the list of fields (it asks once
        per field, hence cached)."""
        return frozenset(quota_field(slug, key) for slug in self.quotas for key in QUOTA_KEYS)

    @property
    def quota_inputs(self) -> list[QuotaInputs]:
        """The quota table's rows, by slug."""
        return [QuotaInputs(slug, *(self[quota_field(slug, key)] for key in QUOTA_KEYS)) for slug in self.quotas]

    def add_refusal(self, field: str | None, message: str) -> None:
        """A service refusal as one sentence: next to the field it names, under the quota table for the quota
        changes (the form checks them first, so this is a race such as a tenant deleted meanwhile), else on top."""
        if field == "quota_changes":
            self.quota_refusals.append(f"These quotas were refused: {message}.")
        else:
            self.add_error(field if field in self.fields else None, message[:1].upper() + message[1:])

    @property
    def plain_policies(self) -> list[BoundWidget]:
        """The policies' checkboxes without the tenant layer, for the template to group."""
        return [choice for choice in self["policies"] if not choice.data["value"].endswith(QUOTA_SUFFIX)]

    @property
    def quota_policies(self) -> list[BoundWidget]:
        """The ``+quota`` policies' checkboxes: the only ones that read guaranteed GPUs and fair share."""
        return [choice for choice in self["policies"] if choice.data["value"].endswith(QUOTA_SUFFIX)]

    @property
    def uniform_fields(self) -> tuple[str, ...]:
        """For the template, which shows these under the uniform choice rather than in the list of fields."""
        return UNIFORM_FIELDS

    @property
    def uniform_bound_fields(self) -> list[forms.BoundField]:
        """The same, bound, for the template to render in place."""
        return [self[name] for name in UNIFORM_FIELDS]

    def _offer_clusters(self, cluster: ClusterShape | None) -> None:
        """The live copy, described as it is now, and the uniform cluster; only the latter when no live node has
        GPUs, so that choice cannot be made (a node going down after the page loaded is refused by the service)."""
        field = self.fields["cluster"]
        assert isinstance(field, forms.TypedChoiceField)  # declared above; each form has its own copy
        uniform = (ReplayCluster.UNIFORM.value, UNIFORM_LABEL)
        if cluster is None:
            field.choices = [uniform]
            field.initial = ReplayCluster.UNIFORM.value
            field.help_text = "No live node has GPUs now (all down, or none registered): only a uniform cluster."
            field.error_messages["invalid_choice"] = "No live node has GPUs now: choose a uniform cluster."
            return
        field.choices = [
            (ReplayCluster.LIVE.value, f"The live cluster as it is now: {layout_text(cluster.layout)}"),
            uniform,
        ]
        field.initial = ReplayCluster.LIVE.value
        field.help_text = "The live copy keeps each node's own GPU count and rack, as the history ran on them."
        field.error_messages["invalid_choice"] = "Choose the live cluster or a uniform one."

    def clean_since(self) -> datetime | None:
        return _start_of(self.cleaned_data["since"])

    def clean_until(self) -> datetime | None:
        return _start_of(self.cleaned_data["until"])

    def clean_preemption_overhead(self) -> str:
        text: str = self.cleaned_data["preemption_overhead"].strip().lower()
        refusal = overhead_refusal(text)
        if refusal is not None:
            raise forms.ValidationError(refusal.beside)
        return text

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        window = window_refusal(data.get("since"), data.get("until"))
        if window is not None:
            self.add_error(window.field, window.beside)
        if data.get("racks") is None and not self.has_error("racks"):
            data["racks"] = 1  # left empty: one rack, as the field's initial value says
        if data.get("cluster") == ReplayCluster.UNIFORM:
            self._clean_uniform(data)
        self._clean_quotas(data)
        clean_elastic(self, data)
        return data

    def _clean_quotas(self, data: dict[str, Any]) -> None:
        """Replace the per-tenant inputs in ``data`` by ``quota_changes``: the tenants whose inputs differ from
        today's quota. With the quotas unticked the inputs are ignored, their errors too: nothing of them is used."""
        changes: dict[str, TenantLimits] = {}
        for slug, today in self.quotas.items():
            names = {key: quota_field(slug, key) for key in QUOTA_KEYS}
            values = {key: self._posted_or(data, name, getattr(today, key)) for key, name in names.items()}
            if not data.get("apply_quotas"):
                for name in names.values():
                    self.errors.pop(name, None)
            elif not any(self.has_error(name) for name in names.values()):
                limits = self._tenant_limits(slug, names, values)
                if limits is not None and limits != today:
                    changes[slug] = limits
        data["quota_changes"] = changes

    def _posted_or(self, data: dict[str, Any], name: str, today: int | None) -> int | None:
        """The cleaned input ``name``, taken out of ``data``; today's value when it was not posted at all (a tenant
        added since the page was loaded: its absent inputs are not an edit lifting its limits)."""
        value: int | None = data.pop(name, None)
        return value if self.add_prefix(name) in self.data else today

    def _tenant_limits(self, slug: str, names: dict[str, str], values: dict[str, int | None]) -> TenantLimits | None:
        """One tenant's inputs as limits (a blank guarantee is none); None, with the error on the guarantee, when
        it exceeds the cap, as the quota table itself refuses. (The inputs are never negative: the fields say so.)"""
        limits = TenantLimits(
            gpu_cap=values["gpu_cap"], guaranteed_gpus=values["guaranteed_gpus"] or 0, user_cap=values["user_cap"]
        )
        refusal = guarantee_refusal(slug, limits)
        if refusal is not None:
            self.add_error(names[refusal.field], refusal.beside)
            return None
        return limits

    def _clean_uniform(self, data: dict[str, Any]) -> None:
        """The size a uniform cluster needs; said next to the field left empty, unless it has an error already."""
        nodes, racks = data.get("nodes"), data.get("racks")
        for missing in uniform_size_refusals(nodes=nodes, gpus_per_node=data.get("gpus_per_node")):
            if not self.has_error(missing.field):
                self.add_error(missing.field, missing.beside)
        refusal = None if nodes is None or racks is None else racks_refusal(nodes=nodes, racks=racks)
        if refusal is not None:
            self.add_error(refusal.field, refusal.beside)


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
