"""The elastic replay in the what-if API (issue #19): what a request asks of it, what a run stored of that ask, and
its two arms as ``corral simulate --loan-pool N --elastic-share F --json`` gives them; ``portal.whatif.serializers``
builds on these. The request fields check shapes and bounds; ``whatif_create`` judges the rules
(``elastic_refusal``: a deadline shorter than a demand step, something to compare, a policy the replay takes) and
its refusals land on the field they name."""

from __future__ import annotations

from typing import Any

from rest_framework import serializers

from portal.whatif.elastic_replay import ASK_FIELDS, DEMAND_STEP, MAX_ELASTIC_FACTOR, ElasticAsk
from scheduling.sim.replay_rules import MAX_GPUS_PER_NODE, MAX_NODES

DEFAULTS = ElasticAsk()
POLICY = (
    "The policy replayed: the first of `policies` the elastic replay takes (non-preemptive, without `+quota`: "
    "fifo, fifo-backfill, sjf, qssf)."
)


class ElasticRequestFields(serializers.Serializer[dict[str, Any]]):
    """What a what-if request says about the elastic replay; ``WhatIfRequestSerializer`` has these besides its own.
    Validated, they become the one ``elastic`` argument of ``whatif_create``: an ``ElasticAsk``, or None."""

    elastic = serializers.BooleanField(
        required=False,
        default=False,
        help_text="Also replay one policy with no loaning and no elasticity, then with elastic jobs and a loaned "
        "inference pool serving a diurnal demand (issue #19). " + POLICY + " Default: false.",
    )
    elastic_share = serializers.FloatField(
        required=False,
        default=DEFAULTS.elastic_share,
        min_value=0,
        max_value=1,
        help_text="With `elastic`, the share of the window's jobs (drawn at random) that may grow. Default: 0.5.",
    )
    elastic_factor = serializers.IntegerField(
        required=False,
        default=DEFAULTS.elastic_factor,
        min_value=1,
        max_value=MAX_ELASTIC_FACTOR,
        help_text="With `elastic`, an elastic job grows to at most this many times its size. Default: 4.",
    )
    loan_pool_servers = serializers.IntegerField(
        required=False,
        default=DEFAULTS.loan_pool_servers,
        min_value=0,
        max_value=MAX_NODES,
        help_text="With `elastic`, inference servers that lend idle GPUs and reclaim them; 0: no pool (then "
        "`elastic_share` must be above 0). Default: 0.",
    )
    loan_pool_gpus = serializers.IntegerField(
        required=False,
        default=DEFAULTS.loan_pool_gpus,
        min_value=1,
        max_value=MAX_GPUS_PER_NODE,
        help_text="With `elastic`, GPUs of each pool server. Default: 8.",
    )
    reclaim_deadline = serializers.FloatField(
        required=False,
        default=DEFAULTS.reclaim_deadline,
        min_value=0,
        help_text=f"With `elastic`, seconds training gets to vacate a reclaimed server; under {DEMAND_STEP:.0f} "
        "(the pool's demand step). Default: 60.",
    )

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        on = attrs.pop("elastic", False)
        ask = {name: attrs.pop(name) for name in ASK_FIELDS if name in attrs}
        attrs["elastic"] = ElasticAsk(**ask) if on else None
        return attrs


class ElasticAskSerializer(serializers.Serializer[dict[str, Any]]):
    """The elastic replay a run asked for, as it stored it (the request's fields, and the policy chosen)."""

    policy = serializers.CharField(help_text=POLICY)
    elastic_share = serializers.FloatField(help_text="The share of jobs that may grow.")
    elastic_factor = serializers.IntegerField(help_text="How many times its size an elastic job may grow to.")
    loan_pool_servers = serializers.IntegerField(help_text="Servers of the loan pool; 0: none.")
    loan_pool_gpus = serializers.IntegerField(help_text="GPUs of each pool server.")
    reclaim_deadline = serializers.FloatField(help_text="Seconds training gets to vacate a reclaimed server.")


class ElasticArmSerializer(serializers.Serializer[dict[str, Any]]):
    """One arm of the elastic replay, as ``ElasticResult.summary()`` gives it. Times in seconds, usage 0 to 1."""

    arm = serializers.ChoiceField(
        choices=["baseline", "elastic"],
        help_text="`baseline`: no loaning (the pool only serves) and no elasticity; `elastic`: the pool lends and "
        "reclaims, and elastic jobs grow.",
    )
    jobs = serializers.IntegerField(help_text="Jobs finished.")
    avg_queue = serializers.FloatField(help_text="Mean time without GPUs, seconds.")
    avg_jct = serializers.FloatField(help_text="Mean job completion time (finish - submit), seconds.")
    makespan = serializers.FloatField(help_text="First submission to last finish, seconds.")
    usage = serializers.FloatField(
        help_text="The fleet's (cluster + pool) GPU-time busy training or serving, as a share, from the first "
        "submission to the last."
    )
    training_usage = serializers.FloatField(help_text="The training part of `usage`.")
    usage_whole_run = serializers.FloatField(help_text="`usage` from the first submission to the last finish.")
    preemptions = serializers.IntegerField(help_text="Jobs stopped by reclaims.")
    resizes = serializers.IntegerField(help_text="Changes of a job's size, chosen or forced.")
    reclaims = serializers.IntegerField(help_text="Reclaims by the pool, each of one or more servers.")
    reclaims_on_time = serializers.IntegerField(help_text="Of them, those whose servers were empty in the deadline.")
    reclaim_cost_gpu_hours = serializers.FloatField(help_text="GPU-hours of training the reclaims cost.")
    lent_node_hours = serializers.FloatField(help_text="Server-hours the pool lent.")


class ElasticResultsSerializer(serializers.Serializer[dict[str, Any]]):
    policy = serializers.CharField(help_text=POLICY)
    arms = ElasticArmSerializer(many=True, help_text="`baseline`, then `elastic`.")
