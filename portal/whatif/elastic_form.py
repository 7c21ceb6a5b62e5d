"""The what-if form's elastic inputs (issue #19): a switch and the five numbers of ``ElasticAsk``.

Added to ``WhatIfForm`` at its end, after the sharing inputs, and cleaned into the one ``elastic`` keyword
``whatif_create`` takes (an ``ElasticAsk``, or None when the switch is off). With the switch off the numbers are
ignored, their errors too: nothing of them is used, so a run without elastic replay is asked for as before. Empty
numbers take their defaults (the ones shown). The rules are ``elastic_refusal``'s, said next to the input at fault.
"""

from __future__ import annotations

from typing import Any

from django import forms

from portal.whatif.elastic_replay import ASK_FIELDS, DEMAND_STEP, MAX_ELASTIC_FACTOR, ElasticAsk, elastic_refusal
from scheduling.sim.replay_rules import MAX_GPUS_PER_NODE, MAX_NODES

DEFAULTS = ElasticAsk()
NUMBER = {"invalid": "Enter a number."}
WHOLE_NUMBER = {"invalid": "Enter a whole number."}


def elastic_fields() -> dict[str, forms.Field]:
    """The switch and its five inputs, each form its own copies, in the order the page shows them."""
    share = "Enter a share of jobs from 0 to 1."
    return {
        "elastic": forms.BooleanField(
            required=False,
            label="Also replay with elastic jobs and a loaned inference pool",
            help_text="The first ticked policy the elastic replay takes (fifo, fifo-backfill, sjf or qssf: "
            "non-preemptive, without +quota) is replayed twice on this cluster plus the pool: with no loaning and "
            "no elasticity, then with them. The pool serves a diurnal demand. See docs/elastic.md.",
        ),
        "elastic_share": forms.FloatField(
            required=False,
            min_value=0,
            max_value=1,
            initial=DEFAULTS.elastic_share,
            label="Elastic share of jobs",
            help_text="The share of the window's jobs (drawn at random) that may grow. 0 to 1.",
            error_messages={"invalid": share, "min_value": share, "max_value": share},
        ),
        "elastic_factor": forms.IntegerField(
            required=False,
            min_value=1,
            max_value=MAX_ELASTIC_FACTOR,
            initial=DEFAULTS.elastic_factor,
            label="Growth factor",
            help_text="An elastic job may grow to this many times its size, in multiples of it.",
            error_messages=WHOLE_NUMBER,
        ),
        "loan_pool_servers": forms.IntegerField(
            required=False,
            min_value=0,
            max_value=MAX_NODES,
            initial=DEFAULTS.loan_pool_servers,
            label="Loan pool servers",
            help_text="Inference servers that lend their idle GPUs to training and reclaim them. 0: no pool.",
            error_messages=WHOLE_NUMBER,
        ),
        "loan_pool_gpus": forms.IntegerField(
            required=False,
            min_value=1,
            max_value=MAX_GPUS_PER_NODE,
            initial=DEFAULTS.loan_pool_gpus,
            label="GPUs per pool server",
            error_messages=WHOLE_NUMBER,
        ),
        "reclaim_deadline": forms.FloatField(
            required=False,
            min_value=0,
            initial=DEFAULTS.reclaim_deadline,
            label="Reclaim deadline (seconds)",
            help_text=f"How long the pool gives training to vacate a server it takes back; under {DEMAND_STEP:.0f}.",
            error_messages=NUMBER,
        ),
    }


def clean_elastic(form: forms.Form, data: dict[str, Any]) -> None:
    """Replace the elastic inputs in ``data`` by ``elastic``: an ``ElasticAsk``, or None with the switch off (or
    with an input in error, which the form then shows). A rule broken is said next to its input."""
    on = bool(data.pop("elastic", False))
    values = {name: data.pop(name, None) for name in ASK_FIELDS}
    data["elastic"] = None
    if not on:
        for name in ("elastic", *ASK_FIELDS):
            form.errors.pop(name, None)
        return
    if any(form.has_error(name) for name in ASK_FIELDS):
        return
    ask = ElasticAsk(**{name: getattr(DEFAULTS, name) if v is None else v for name, v in values.items()})
    refusal = elastic_refusal(data.get("policies") or [], ask)
    if refusal is not None and not (refusal.field == "elastic" and form.has_error("policies")):
        form.add_error(refusal.field, refusal.message[:1].upper() + refusal.message[1:] + ".")
    elif refusal is None:
        data["elastic"] = ask
