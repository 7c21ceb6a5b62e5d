"""Shapes of the what-if API (``/api/v1/whatif/``): what a script asks for, and a run with what it found.

The request serializer checks types and ranges and fills in what the browser form pre-fills (the live policy,
placement and cluster, handed in through the context by the view); its bounds are the rules' own
(``scheduling.sim.replay_rules``). ``whatif_create`` judges the rest with those rules (policy names, the overhead,
racks against nodes, a guarantee against its cap, the window) and refuses a live cluster with no node; its refusals
land on the field they name. Judging those here too would answer the same words without the refusal's ``code``,
and in another order.

A run says what it replayed on (``cluster``, ``layout``, ``quotas`` and the page's ``cluster_text``). The results
are the run's stored JSON as numbers (seconds, shares), each with ``shown``: the same row formatted as the run's
page shows it (``portal.whatif.results.table_rows`` and ``observed_row``).
"""

from __future__ import annotations

from dataclasses import asdict, replace
from typing import Any

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from portal.whatif.describe import cluster_text, is_live_copy
from portal.whatif.elastic_serializers import ElasticAskSerializer, ElasticRequestFields, ElasticResultsSerializer
from portal.whatif.models import WhatIfRun, WhatIfState
from portal.whatif.results import baseline, observed_row, table_rows
from portal.whatif.selectors import ClusterShape
from portal.whatif.services import ReplayCluster
from portal.whatif.share_serializers import ShareRequestFields, ShareResultsSerializer
from scheduling.core.model import TenantLimits
from scheduling.core.placement import PLACEMENTS
from scheduling.core.policies import POLICIES, QUOTA_SUFFIX
from scheduling.sim.replay_rules import MAX_GPUS_PER_NODE, MAX_HALF_LIFE_HOURS, MAX_NODES

#: The browser form's default overhead (and the model's): a preempted job resumes at no cost.
DEFAULT_OVERHEAD = "0"
NO_LIVE_CLUSTER = "No live node has GPUs now, so give the size of the cluster to replay on."
LIVE_IS_AS_IT_IS = "Leave this out with `cluster` live: the live nodes are replayed as they are."
#: The fields that size a uniform cluster; a request giving one of them and no ``cluster`` is uniform, as every
#: request was before a run could copy the live nodes (scripts written then keep their meaning).
UNIFORM_FIELDS = ("nodes", "gpus_per_node", "racks")
CLUSTERS = [choice.value for choice in ReplayCluster]
SKIPPED = (
    "Jobs left out: they need more GPUs than the replayed cluster has, or than their tenant's or user's cap allows."
)


class QuotaChangeSerializer(serializers.Serializer[dict[str, Any]]):
    """A tenant's quota for one replay; what is left out stays as it is today."""

    gpu_cap = serializers.IntegerField(
        min_value=0, allow_null=True, required=False, help_text="The most GPUs its jobs hold at once; null: no cap."
    )
    guaranteed_gpus = serializers.IntegerField(
        min_value=0, required=False, help_text="GPUs it can always reclaim (`+quota` policies); at most `gpu_cap`."
    )
    user_cap = serializers.IntegerField(
        min_value=0, allow_null=True, required=False, help_text="The most GPUs each member may hold; null: no cap."
    )


class WhatIfRequestSerializer(ShareRequestFields, ElasticRequestFields):
    """A what-if run to queue. What is left out is the live cluster's, with the tenants' quotas of now, as the
    browser's form pre-fills it."""

    # The view hands those defaults in through the context: live_policy, live_placement, cluster (or None).

    policies = serializers.ListField(
        child=serializers.CharField(max_length=60),
        required=False,
        max_length=50,
        help_text=(
            f"Policies to replay, in the order the results list them: {', '.join(POLICIES)}, each also as "
            f"`<name>{QUOTA_SUFFIX}`. Default: the live `CORRAL_POLICY`."
        ),
    )
    placement = serializers.ChoiceField(
        choices=list(PLACEMENTS), required=False, help_text="Default: the live `CORRAL_PLACEMENT`."
    )
    preemption_overhead = serializers.CharField(
        max_length=20,
        required=False,
        default=DEFAULT_OVERHEAD,
        help_text="Seconds a preempted job loses each time it resumes (0 or more), or `helios`. Default: 0.",
    )
    cluster = serializers.ChoiceField(
        choices=CLUSTERS,
        required=False,
        help_text="`live`: a copy of the live nodes with GPUs, each with its own GPU count and rack. `uniform`: "
        '`nodes` x `gpus_per_node` GPUs over `racks`, for "what if we had more". Default: `uniform` when the '
        "request gives `nodes`, `gpus_per_node` or `racks`, else `live` (or, with no live node, a 400 asking for "
        "the size).",
    )
    nodes = serializers.IntegerField(
        min_value=1,
        max_value=MAX_NODES,
        required=False,
        help_text="A uniform cluster's nodes (leave out with `live`). Default: the live cluster's nodes with GPUs.",
    )
    gpus_per_node = serializers.IntegerField(
        min_value=1,
        max_value=MAX_GPUS_PER_NODE,
        required=False,
        help_text="A uniform cluster's GPUs per node (leave out with `live`). Default: the most common GPU count of "
        "the live nodes.",
    )
    racks = serializers.IntegerField(
        min_value=1,
        max_value=MAX_NODES,
        required=False,
        help_text="A uniform cluster's racks (leave out with `live`): at most `nodes`; used by topology placement. "
        "Default: the racks the live nodes name (else 1).",
    )
    apply_quotas = serializers.BooleanField(
        required=False,
        default=True,
        help_text="Replay with the tenants' quotas as they are now: caps hold jobs back (a job larger than its "
        "tenant's or user's cap is left out) and `+quota` policies lend and reclaim guarantees. False replays with "
        "no limits. Default: true.",
    )
    quota_changes = serializers.DictField(
        child=QuotaChangeSerializer(),
        required=False,
        help_text='Other quotas to try in this run only, by tenant slug, e.g. `{"lab": {"guaranteed_gpus": 16}}`: '
        "each replaces that tenant's quota of today (what it leaves out stays as today). Needs `apply_quotas`.",
    )
    fair_share_half_life_hours = serializers.FloatField(
        required=False,
        allow_null=True,
        min_value=0,
        max_value=MAX_HALF_LIFE_HOURS,
        help_text="Replay `+quota` policies with fair share: idle GPUs go first to the tenants that used the least "
        "of their share, usage counted from the start of the window with this half-life (hours). 0 or null: no "
        "fair share. Default: the live `CORRAL_FAIR_SHARE_HALF_LIFE_HOURS`.",
    )
    since = serializers.DateTimeField(
        required=False,
        allow_null=True,
        help_text="First submission replayed (inclusive): a date (midnight) or ISO 8601 date-time. Default: the first.",
    )
    until = serializers.DateTimeField(
        required=False,
        allow_null=True,
        help_text="Only submissions before this (exclusive): a date or ISO 8601 date-time. Default: up to now.",
    )

    def validate_preemption_overhead(self, value: str) -> str:
        return value.strip().lower()  # as the form: "Helios " is helios; whatif_create judges the rest

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        attrs = super().validate(attrs)  # the elastic fields, as one ElasticAsk or None
        attrs.setdefault("policies", [self.context["live_policy"]])
        attrs.setdefault("placement", self.context["live_placement"])
        attrs.setdefault("fair_share_half_life_hours", self.context["half_life_hours"])
        if "quota_changes" in attrs:
            attrs["quota_changes"] = _over_today(attrs["quota_changes"], self.context["quotas"])
        shape: ClusterShape | None = self.context["cluster"]
        sized = [field for field in UNIFORM_FIELDS if field in attrs]
        if "cluster" in attrs:
            attrs["cluster"] = ReplayCluster(attrs["cluster"])
        else:
            live = shape is not None and not sized
            attrs["cluster"] = ReplayCluster.LIVE if live else ReplayCluster.UNIFORM
        if attrs["cluster"] == ReplayCluster.LIVE:
            # Sizes would be ignored, and a script that sent them meant something else: say so. With no live node,
            # whatif_create refuses on `cluster`.
            if sized:
                raise serializers.ValidationError({field: [LIVE_IS_AS_IT_IS] for field in sized})
            return attrs
        missing = {}
        for field in ("nodes", "gpus_per_node"):
            if field in attrs:
                continue
            if shape is None:
                missing[field] = NO_LIVE_CLUSTER
            else:
                attrs[field] = getattr(shape, field)
        if missing:
            raise serializers.ValidationError(missing)
        if "racks" not in attrs:  # never more than the nodes asked for: a default must not be the fault
            attrs["racks"] = min(shape.racks, attrs["nodes"]) if shape is not None else 1
        return attrs


def _over_today(changes: dict[str, dict[str, Any]], today: dict[str, TenantLimits]) -> dict[str, TenantLimits]:
    """Each change laid over the tenant's quota of today. An unknown slug starts from no limits; ``whatif_create``
    refuses it on ``quota_changes``."""
    return {slug: replace(today.get(slug, TenantLimits()), **change) for slug, change in changes.items()}


class WhatIfDetailQuery(serializers.Serializer[dict[str, Any]]):
    figures = serializers.BooleanField(required=False, default=False)


# --- a run and its results -----------------------------------------------------------------------------------------
class TimesShownSerializer(serializers.Serializer[dict[str, Any]]):
    avg_jct = serializers.CharField()
    median_jct = serializers.CharField()
    p95_jct = serializers.CharField()
    avg_queue = serializers.CharField()


class PolicyShownSerializer(TimesShownSerializer):
    """One policy's row of the run page's table, formatted as the page shows it ("90.0 min", "1.00x", "75%")."""

    ratio = serializers.CharField(
        help_text="Average JCT over the baseline's (`baseline`: the live policy when it was replayed, else the first "
        "listed), e.g. `0.50x`."
    )
    utilization = serializers.CharField()
    preemptions = serializers.CharField()
    fairness = serializers.CharField()


class PolicyResultSerializer(serializers.Serializer[dict[str, Any]]):
    """One policy's replay, as ``corral simulate --json`` summarises it plus what the page adds. Times in seconds."""

    policy = serializers.CharField()
    live = serializers.BooleanField(help_text="The policy the cluster ran when the run was asked for.")
    clairvoyant = serializers.BooleanField(help_text="An oracle: it knows every job's duration and cannot run live.")
    jobs = serializers.IntegerField(help_text="Jobs replayed.")
    skipped = serializers.IntegerField(help_text=SKIPPED)
    avg_jct = serializers.FloatField(help_text="Average job completion time (finish - submit), seconds.")
    median_jct = serializers.FloatField()
    p95_jct = serializers.FloatField()
    p99_jct = serializers.FloatField()
    avg_queue = serializers.FloatField(help_text="Average time without GPUs, waits after a preemption included.")
    makespan = serializers.FloatField(help_text="First submission to last finish, seconds.")
    utilization = serializers.FloatField(help_text="Time-averaged share (0 to 1) of the cluster's GPUs busy.")
    preemptions = serializers.IntegerField()
    fairness = serializers.FloatField(help_text="Jain's index over the mean slowdown of `fairness_over`; 1 = alike.")
    fairness_over = serializers.CharField(help_text="tenants, users or jobs.")
    shown = PolicyShownSerializer()


class ObservedSerializer(serializers.Serializer[dict[str, Any]]):
    """What really happened to the replayed jobs on the live cluster, from the history. Times in seconds."""

    jobs = serializers.IntegerField()
    avg_jct = serializers.FloatField()
    median_jct = serializers.FloatField()
    p95_jct = serializers.FloatField()
    avg_queue = serializers.FloatField()
    shown = TimesShownSerializer()


class WhatIfResultsSerializer(serializers.Serializer[dict[str, Any]]):
    baseline = serializers.CharField(
        allow_null=True,
        help_text="The policy every `ratio` compares with: the live policy when it was replayed, else the first "
        "listed (as `corral simulate` does).",
    )
    skipped = serializers.IntegerField(help_text=SKIPPED)
    policies = PolicyResultSerializer(many=True, help_text="In the order asked for.")
    observed = ObservedSerializer(allow_null=True)
    sharing = ShareResultsSerializer(
        allow_null=True, help_text="The sharing replay, for a run with `sharing`; null otherwise."
    )
    elastic = ElasticResultsSerializer(allow_null=True, help_text="The elastic replay, for a run with `elastic`.")
    figures = serializers.ListField(
        child=serializers.DictField(),
        allow_null=True,
        help_text="The page's four plotly figures (JCT CDF, jobs waiting, GPU utilization, JCT per tenant) with "
        "every policy's traces, only with `?figures=1` (they are most of a run's size); null otherwise.",
    )


class ReplayedNodeSerializer(serializers.Serializer[dict[str, Any]]):
    """One node of a live copy, as it was when the run was asked for."""

    gpus = serializers.IntegerField(help_text="Its GPUs present then.")
    rack = serializers.CharField(help_text="The rack it names; empty when none.")


class TenantQuotaSerializer(serializers.Serializer[dict[str, Any]]):
    """One tenant's quota as the run applied it, copied when the run was asked for."""

    gpu_cap = serializers.IntegerField(allow_null=True, help_text="The most GPUs its jobs hold at once; null: none.")
    guaranteed_gpus = serializers.IntegerField(help_text="The GPUs it can always reclaim (`+quota` policies).")
    user_cap = serializers.IntegerField(allow_null=True, help_text="The most GPUs each member may hold; null: none.")
    edited = serializers.BooleanField(default=False, help_text="Changed for this run (`quota_changes`).")


class WhatIfRunSerializer(serializers.ModelSerializer[WhatIfRun]):
    """A what-if run: what was asked, by whom, where it is, and once done what it found."""

    # The context says whether to include the results ("results", default true: the list leaves them out) and the
    # charts ("figures", default false). One shape for list and detail: two would collide on the `state` enum's name.

    url = serializers.HyperlinkedIdentityField(view_name="api-whatif-detail")
    requested_by = serializers.CharField(source="requested_by.username", read_only=True)
    policies = serializers.ListField(child=serializers.CharField(), read_only=True)
    share_placers = serializers.ListField(child=serializers.CharField(), read_only=True)
    cluster = serializers.SerializerMethodField(
        help_text="`live`: a copy of the live nodes (`layout`); `uniform`: `nodes` x `gpus_per_node` over `racks`."
    )
    layout = serializers.SerializerMethodField(help_text="The nodes replayed, with `live`; empty with `uniform`.")
    quotas = serializers.DictField(
        child=TenantQuotaSerializer(),
        read_only=True,
        allow_null=True,
        help_text="Every tenant's quota applied, by slug, as it was when the run was asked for; null: none applied "
        "(no limits).",
    )
    cluster_text = serializers.SerializerMethodField(
        help_text='What the run replayed on, as its page says it: "Live nodes: 3 nodes, 20 GPUs (2 × 8 + 1 × 4), '
        '2 racks" or "Uniform: 2 × 4 GPUs, 1 rack".'
    )
    elastic = ElasticAskSerializer(read_only=True, allow_null=True, help_text="The elastic replay asked; null: none.")
    results = serializers.SerializerMethodField(help_text="Null until the run is done, and in the list.")

    class Meta:
        model = WhatIfRun
        fields = [
            "id",
            "url",
            "state",
            "requested_by",
            "created_at",
            "started_at",
            "finished_at",
            "since",
            "until",
            "policies",
            "live_policy",
            "placement",
            "preemption_overhead",
            "cluster",
            "cluster_text",
            "nodes",
            "gpus_per_node",
            "racks",
            "layout",
            "quotas",
            "fair_share_half_life_hours",
            "sharing",
            "share_placers",
            "shared_gpus",
            "elastic",
            "jobs",
            "error",
            "results",
        ]
        read_only_fields = fields
        extra_kwargs = {
            "error": {"help_text": "Why a failed run failed, in one sentence; empty otherwise."},
            "nodes": {"help_text": "The nodes replayed (with `live`, the layout's count)."},
            "gpus_per_node": {"help_text": "GPUs of each node (with `live`, of the largest)."},
            "racks": {"help_text": "The racks the nodes are spread over (with `live`, the layout's distinct racks)."},
            "fair_share_half_life_hours": {
                "help_text": "The usage half-life (hours) `+quota` policies replayed fair share with; null: none."
            },
        }

    @extend_schema_field(serializers.ChoiceField(choices=CLUSTERS))
    def get_cluster(self, run: WhatIfRun) -> str:
        return (ReplayCluster.LIVE if is_live_copy(run) else ReplayCluster.UNIFORM).value

    @extend_schema_field(ReplayedNodeSerializer(many=True))
    def get_layout(self, run: WhatIfRun) -> list[dict[str, Any]]:
        return [{"gpus": int(gpus), "rack": str(rack)} for gpus, rack in run.layout]

    def get_cluster_text(self, run: WhatIfRun) -> str:
        return cluster_text(run)

    @extend_schema_field(WhatIfResultsSerializer(allow_null=True))
    def get_results(self, run: WhatIfRun) -> dict[str, Any] | None:
        if run.state != WhatIfState.DONE or not self.context.get("results", True):
            return None
        stored: dict[str, Any] = run.results
        records: list[dict[str, Any]] = stored.get("policies", [])
        observed: dict[str, Any] = stored.get("observed") or {}
        rows = table_rows(records, live_policy=run.live_policy, observed=observed)
        policies = []
        for record, row in zip(records, rows, strict=True):
            shown = asdict(row)
            policies.append({**record, "live": shown.pop("live"), "shown": shown})
        observed_shown = observed_row(observed, records=records)
        results = {
            "baseline": baseline(records, live_policy=run.live_policy),
            "skipped": stored.get("skipped", 0),
            "policies": policies,
            "observed": None if observed_shown is None else {**observed, "shown": observed_shown},
            "sharing": stored.get("sharing"),
            "elastic": run.elastic_results,
            "figures": stored.get("figures", []) if self.context.get("figures") else None,
        }
        return dict(WhatIfResultsSerializer(results).data)
