"""The policy registry: every policy by its CLI name, and ``resolve_policy`` for names or objects.

A ``+quota`` suffix wraps any policy in the tenant layer (guaranteed shares first, idle quota borrowable,
borrowed GPUs reclaimed), e.g. ``tiresias-las+quota``.
"""

from __future__ import annotations

from collections.abc import Callable

from scheduling.core.policies.base import ClairvoyanceError, Key, Policy
from scheduling.core.policies.fifo import Fifo, FifoBackfill
from scheduling.core.policies.gittins import TiresiasGittins
from scheduling.core.policies.las import TiresiasLas
from scheduling.core.policies.oracles import Sjf, Srsf, Srtf
from scheduling.core.policies.qssf import Qssf
from scheduling.core.policies.quota import Quota

POLICIES: dict[str, Callable[[], Policy]] = {
    Fifo.name: Fifo,
    FifoBackfill.name: FifoBackfill,
    Srtf.name: Srtf,
    Srsf.name: Srsf,
    Sjf.name: Sjf,
    TiresiasLas.name: TiresiasLas,
    TiresiasGittins.name: TiresiasGittins,
    Qssf.name: Qssf,
}

QUOTA_SUFFIX = "+quota"


def resolve_policy(policy: str | Policy) -> Policy:
    """A policy object from its name (a fresh one, without history) or itself."""
    if isinstance(policy, Policy):
        return policy
    base_name, _, _ = policy.partition(QUOTA_SUFFIX)
    try:
        base = POLICIES[base_name]()
    except KeyError:
        raise ValueError(f"unknown policy {policy!r}; choose one of {', '.join(POLICIES)}") from None
    if policy.endswith(QUOTA_SUFFIX):
        return Quota(base)
    return base


__all__ = [
    "POLICIES",
    "ClairvoyanceError",
    "Fifo",
    "FifoBackfill",
    "Key",
    "Policy",
    "Qssf",
    "Quota",
    "Sjf",
    "Srsf",
    "Srtf",
    "TiresiasGittins",
    "TiresiasLas",
    "resolve_policy",
]
