"""HTML forms. They check shapes; ``job_submit`` decides the rest and its refusals land on the right field."""

from __future__ import annotations

from typing import Any

from django import forms

from portal.jobs.array_spec import MAX_SPEC_CHARS
from portal.jobs.models import WorkloadClass
from portal.jobs.selectors import cordon_rule
from portal.jobs.serializers import MAX_GPUS_PER_JOB
from portal.jobs.share_spec import ShareSpec, parse_gpu_memory, parse_gpus, parse_latency_slo_ms
from portal.tenants.models import Tenant
from scheduling.core.durations import parse_duration


class JobSubmitForm(forms.Form):
    name = forms.CharField(max_length=200, required=False, help_text="Defaults to the first line of the command.")
    command = forms.CharField(
        widget=forms.Textarea(attrs={"rows": 4, "spellcheck": "false", "placeholder": "python train.py --epochs 10"}),
        max_length=16_000,
        strip=False,
        help_text="Runs with /bin/sh in its own working directory on the node.",
    )
    gpus = forms.CharField(
        initial="1",
        max_length=20,
        label="GPUs",
        help_text="Whole GPUs, or a share of one GPU such as 0.25 (run under MPS on a shared GPU).",
    )
    max_gpus = forms.IntegerField(
        required=False,
        min_value=1,
        label="Grow up to (elastic)",
        widget=forms.NumberInput(attrs={"placeholder": "e.g. 8"}),
        help_text="Optional, for an elastic job: it always gets GPUs above and may grow to this many while GPUs are "
        "idle, in doublings (2, 4, 8). A resize restarts it from its checkpoint (SIGUSR1 first), with $CORRAL_GPUS "
        "and WORLD_SIZE updated.",
    )
    gpu_memory = forms.CharField(
        required=False,
        max_length=40,
        label="GPU memory (shares)",
        widget=forms.TextInput(attrs={"placeholder": "e.g. 16G"}),
        help_text="Optional, for a share: its memory limit. Empty: its fraction of the GPU's memory.",
    )
    workload_class = forms.ChoiceField(
        required=False,
        label="Class (shares)",
        choices=[("", "offline (default)"), ("offline", "offline"), ("online", "online")],
        help_text="Online shares are latency-critical and protected; offline shares may be evicted and requeued.",
    )
    latency_slo_ms = forms.CharField(
        required=False,
        max_length=20,
        label="Latency target, ms (online shares)",
        widget=forms.TextInput(attrs={"placeholder": "e.g. 50", "inputmode": "numeric"}),
        help_text="Optional, for an online share: its p99 latency target in milliseconds. Above it the node evicts "
        "offline neighbours from its GPU (the job writes its latency to $CORRAL_LATENCY_FILE).",
    )
    time_limit = forms.CharField(
        required=False,
        max_length=40,
        label="Time limit",
        widget=forms.TextInput(attrs={"placeholder": "e.g. 2h, 90m, 1d 12h or seconds"}),
    )
    array = forms.CharField(
        required=False,
        max_length=MAX_SPEC_CHARS,
        label="Array",
        widget=forms.TextInput(attrs={"placeholder": "e.g. 0-999%50", "spellcheck": "false"}),
        help_text=(
            "Optional: run the command once per index, as a job array (Slurm's --array syntax): 0-999, 1,3,5-9 or "
            "0-15:4; %50 at the end runs at most 50 at once. Each task reads its index from $CORRAL_ARRAY_TASK_ID. "
            "Empty: one job."
        ),
    )
    tenant = forms.ModelChoiceField(queryset=Tenant.objects.none(), to_field_name="slug", empty_label=None)

    def __init__(self, *args: Any, tenants: list[Tenant], **kwargs: Any) -> None:  # the rest goes to Form as is
        super().__init__(*args, **kwargs)
        field = self.fields["tenant"]
        assert isinstance(field, forms.ModelChoiceField)  # declared above; each form has its own copy
        field.queryset = Tenant.objects.filter(pk__in=[t.pk for t in tenants])
        if len(tenants) <= 1:
            field.widget = forms.HiddenInput()
            field.required = False
        # Read per form, not at import: the setting may differ between processes and tests.
        self.fields["time_limit"].help_text = (
            "Optional. The job is stopped and fails once it has run this long. "
            f"Empty: no limit. A GPU predicted to fail {cordon_rule()}."
        )

    def clean_gpus(self) -> tuple[int, float | None]:
        """``(gpus, fraction)``: whole GPUs, or a share of one GPU, by the API's one rule (issue #17)."""
        try:
            gpus, fraction = parse_gpus(self.cleaned_data["gpus"].strip())
        except ValueError as exc:
            raise forms.ValidationError(f"{str(exc)[:1].upper()}{str(exc)[1:]}.") from None
        if gpus > MAX_GPUS_PER_JOB:
            raise forms.ValidationError(f"Ask for at most {MAX_GPUS_PER_JOB} GPUs.")
        return gpus, fraction

    def clean(self) -> dict[str, Any] | None:
        """Turn a fractional ``gpus`` into ``gpus`` 1 and a ``share``; the share's fields need a share."""
        data = super().clean() or {}
        asked = data.get("gpus")
        if not isinstance(asked, tuple):
            return data
        data["gpus"], fraction = asked
        memory_text = (data.get("gpu_memory") or "").strip()
        workload_class = data.get("workload_class") or ""
        latency_text = (data.get("latency_slo_ms") or "").strip()
        data["share"] = None
        if fraction is None:
            if memory_text:
                self.add_error("gpu_memory", "Only a share (GPUs between 0 and 1) takes a memory limit.")
            if workload_class:
                self.add_error("workload_class", "Only a share (GPUs between 0 and 1) has a class.")
            if latency_text:
                self.add_error("latency_slo_ms", "Only an online share (GPUs between 0 and 1) has a latency target.")
            return data
        if data.get("array"):
            self.add_error("gpus", "A job array's tasks take whole GPUs.")
            return data
        memory = None
        if memory_text:
            try:
                memory = parse_gpu_memory(memory_text)
            except ValueError as exc:
                self.add_error("gpu_memory", f"{str(exc)[:1].upper()}{str(exc)[1:]}.")
                return data
        latency = None
        if latency_text:  # the API's rule; that only an online share has one is check_share's, at submit
            try:
                latency = parse_latency_slo_ms(latency_text)
            except ValueError as exc:
                self.add_error("latency_slo_ms", f"{str(exc)[:1].upper()}{str(exc)[1:]}.")
                return data
        data["share"] = ShareSpec(fraction, memory, workload_class or WorkloadClass.OFFLINE.value, latency)
        return data

    def clean_command(self) -> str:
        command: str = self.cleaned_data["command"]
        if not command.strip():
            raise forms.ValidationError("Enter the command to run.")
        return command.replace("\r\n", "\n")

    def clean_array(self) -> str | None:
        """The array spec as typed, or None for one job; ``job_array_submit`` reads it, and its refusal (a range
        that goes down, a %0 limit, ...) lands on this field."""
        text: str = self.cleaned_data["array"].strip()
        return text or None

    def clean_time_limit(self) -> int | None:
        """Seconds from "2h", "90m", "1d 12h" or a number of seconds; empty means no limit. The range is the
        service's to check, so its message lands here too."""
        text = self.cleaned_data["time_limit"].strip()
        if not text:
            return None
        try:
            return parse_duration(text)
        except ValueError:
            raise forms.ValidationError(
                "Enter a duration like 2h, 90m or 1d 12h, or a number of seconds; leave it empty for no limit."
            ) from None
