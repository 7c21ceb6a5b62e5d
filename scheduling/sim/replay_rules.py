"""The rules a replay's parameters obey, each written once: for what-if runs and ``corral simulate --setup`` alike.

The what-if form, ``whatif_create`` (which the API's requests reach after their serializer's shape checks), the
replay of a stored run and the setup reader (:mod:`scheduling.sim.replay_setup`) all judge with these functions.
Each returns None for values that pass, or a :class:`Refusal` naming the field at fault and saying why. The bounds
are also the form's and the serializer's field bounds, so a shape check and a rule never disagree. Pure: no Django.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from scheduling.core.model import TenantLimits
from scheduling.core.placement import PLACEMENTS
from scheduling.core.policies import POLICIES, QUOTA_SUFFIX
from scheduling.core.preemption import PreemptionCost
from scheduling.core.share_placement import PLACERS

#: Bounds of a cluster the portal replays on: the simulator builds every node up front, so an absurd size would
#: only exhaust the worker's memory. (``corral simulate`` on one's own machine has none.)
MAX_NODES = 10_000
MAX_GPUS_PER_NODE = 64
#: The most GPUs a sharing replay takes as a uniform count of shared GPUs (the replay keeps every GPU's state).
MAX_SHARED_GPUS = 100_000
#: The longest fair-share half-life a replay takes: ten years, which already means "never forget".
MAX_HALF_LIFE_HOURS = 87_600.0

OVERHEAD_RULE = "enter a number of seconds (0 or more) or helios"
HALF_LIFE_RULE = f"enter a number of hours from 0 (no fair share) to {MAX_HALF_LIFE_HOURS:.0f}"
UNIFORM_SIZE = "give the uniform cluster's size"


@dataclass(frozen=True, slots=True)
class Refusal:
    """A rule broken. ``field`` names the input at fault; ``message`` is a phrase in the words the service and the
    API answer with under that field; ``beside`` is the sentence the form shows next to its input, where the form
    words it otherwise (its label already says what the number is); empty where no form shows this rule."""

    field: str
    message: str
    beside: str = ""


def half_life_refusal(hours: float | None) -> Refusal | None:
    """A fair-share half-life is from 0 (none) to :data:`MAX_HALF_LIFE_HOURS` hours; None is none, NaN is refused."""
    if hours is None or 0 <= hours <= MAX_HALF_LIFE_HOURS:
        return None
    return Refusal("fair_share_half_life_hours", HALF_LIFE_RULE)


def policies_refusal(policies: Sequence[str]) -> Refusal | None:
    """At least one policy, each a known one (with or without the ``+quota`` suffix)."""
    if not policies:
        return Refusal("policies", "choose at least one policy")
    unknown = [p for p in policies if p.removesuffix(QUOTA_SUFFIX) not in POLICIES]
    if unknown:
        return Refusal("policies", f"unknown policy {', '.join(unknown)}; choose from {', '.join(POLICIES)}")
    return None


def placement_refusal(placement: str) -> Refusal | None:
    """A known placement."""
    if placement in PLACEMENTS:
        return None
    return Refusal("placement", f"unknown placement {placement}; choose from {', '.join(PLACEMENTS)}")


def parse_overhead(text: str) -> PreemptionCost | None:
    """``corral simulate --preemption-overhead``'s values ("0", "30", "helios"), or None for anything else (a
    negative, infinite or non-numeric value)."""
    try:
        cost = PreemptionCost.parse(text)
    except ValueError:
        return None
    return cost if math.isfinite(cost.multi_node) else None


def overhead_refusal(text: str) -> Refusal | None:
    """A preemption overhead :func:`parse_overhead` takes."""
    if parse_overhead(text) is not None:
        return None
    return Refusal("preemption_overhead", OVERHEAD_RULE, beside=_sentence(OVERHEAD_RULE))


def size_refusal(field: str, value: int, most: int | None = None) -> Refusal | None:
    """A cluster's ``nodes`` or ``gpus_per_node``: at least 1, and at most ``most`` where there is a bound (the
    portal's :data:`MAX_NODES` and :data:`MAX_GPUS_PER_NODE`)."""
    if value >= 1 and (most is None or value <= most):
        return None
    bound = f"from 1 to {most}" if most is not None else "of at least 1"
    return Refusal(field, f"must be a whole number {bound}")


def racks_refusal(*, nodes: int, racks: int) -> Refusal | None:
    """The racks a uniform cluster's nodes are spread over: from 1 to the number of nodes."""
    if 1 <= racks <= nodes:
        return None
    return Refusal(
        "racks",
        f"must be a whole number from 1 to the number of nodes ({nodes})",
        beside=f"Cannot exceed the number of nodes ({nodes}).",
    )


def uniform_size_refusals(*, nodes: int | None, gpus_per_node: int | None) -> list[Refusal]:
    """A uniform cluster needs both its sizes: one refusal for each left out, ``nodes`` first."""
    sizes = (("nodes", nodes, "the number of nodes"), ("gpus_per_node", gpus_per_node, "the GPUs per node"))
    return [
        Refusal(field, UNIFORM_SIZE, beside=f"Give {what} for a uniform cluster.")
        for field, value, what in sizes
        if value is None
    ]


def window_refusal(since: datetime | None, until: datetime | None) -> Refusal | None:
    """A window of history ends after it starts (either end may be open)."""
    if since is None or until is None or until > since:
        return None
    return Refusal(
        "until", "must be after the start of the window", beside="Must be a later day than the start of the window."
    )


def negative_quota_refusal(tenant: str, limits: TenantLimits) -> Refusal | None:
    """No GPU count of a quota is negative. ``field`` is the first negative one of ``limits``."""
    for field in ("gpu_cap", "guaranteed_gpus", "user_cap"):
        value: int | None = getattr(limits, field)
        if value is not None and value < 0:
            return Refusal(field, f"{tenant}: GPU counts cannot be negative")
    return None


def guarantee_refusal(tenant: str, limits: TenantLimits) -> Refusal | None:
    """A tenant's guarantee is at most its GPU cap (as the live quota table has it)."""
    if limits.gpu_cap is None or limits.guaranteed_gpus <= limits.gpu_cap:
        return None
    return Refusal(
        "guaranteed_gpus",
        f"{tenant}: the guarantee ({limits.guaranteed_gpus}) cannot exceed the cap ({limits.gpu_cap})",
        beside=f"Cannot exceed the GPU cap ({limits.gpu_cap}).",
    )


def quota_refusal(tenant: str, limits: TenantLimits) -> Refusal | None:
    """Both quota rules, the counts first."""
    return negative_quota_refusal(tenant, limits) or guarantee_refusal(tenant, limits)


def replay_refusal(
    *,
    policies: Sequence[str],
    placement: str,
    preemption_overhead: str,
    nodes: int,
    gpus_per_node: int,
    racks: int,
    since: datetime | None,
    until: datetime | None,
    half_life_hours: float | None,
) -> Refusal | None:
    """The first rule a what-if run's parameters break, in a fixed order (the one the API has always reported
    them in), or None. The run's cluster here is its size, whether a live copy's or a uniform one's."""
    return (
        half_life_refusal(half_life_hours)
        or policies_refusal(policies)
        or placement_refusal(placement)
        or overhead_refusal(preemption_overhead)
        or size_refusal("nodes", nodes, MAX_NODES)
        or size_refusal("gpus_per_node", gpus_per_node, MAX_GPUS_PER_NODE)
        or racks_refusal(nodes=nodes, racks=racks)
        or window_refusal(since, until)
    )


def share_refusal(*, sharing: bool, placers: Sequence[str], shared_gpus: int | None) -> Refusal | None:
    """A sharing replay (issue #17) names known share placers (at least one) and replays on at least one shared
    GPU, at most :data:`MAX_SHARED_GPUS`; ``shared_gpus`` is None when none is known (no live GPU is shared and no
    count was given). Without sharing, nothing of it is read."""
    if not sharing:
        return None
    unknown = [p for p in placers if p not in PLACERS]
    if unknown:
        return Refusal("share_placers", f"unknown share placer {', '.join(unknown)}; choose from {', '.join(PLACERS)}")
    if not placers:
        return Refusal("share_placers", "choose at least one share placer")
    if shared_gpus is None:
        return Refusal(
            "shared_gpus",
            "no live GPU accepts shares; give a number of shared GPUs to replay the shares on",
            beside="No live GPU accepts shares: give how many shared GPUs to replay on.",
        )
    return size_refusal("shared_gpus", shared_gpus, MAX_SHARED_GPUS)


def _sentence(phrase: str) -> str:
    return phrase[:1].upper() + phrase[1:] + "."
