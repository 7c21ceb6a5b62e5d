"""The cluster and tenant quotas a replay runs with, read from JSON.

Two writers share the shape: a what-if run's row (``layout`` as ``[gpus, rack]`` pairs) and the same run as
``GET /api/v1/whatif/<id>/`` returns it (``layout`` as ``{"gpus", "rack"}`` objects), which ``corral simulate
--setup`` reads, so a replay from a terminal can use exactly the nodes and quotas a run in the portal used.

- ``layout``: the nodes, in order. Empty or absent: a uniform cluster from ``nodes``, ``gpus_per_node`` and
  ``racks`` (if given).
- ``quotas``: ``{tenant: {"gpu_cap", "guaranteed_gpus", "user_cap"}}``, null or absent for none.
- ``fair_share_half_life_hours``: the usage half-life fair share replays with (``+quota`` policies); null, 0 or
  absent for none.

It checks the shapes of the JSON; the rules the values obey are :mod:`scheduling.sim.replay_rules`' (the portal's
what-if runs obey them too), worded here for a file. Pure: no Django, so the CLI and the portal's worker read it
alike.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from scheduling.core.model import TenantLimits
from scheduling.sim.replay_rules import (
    MAX_HALF_LIFE_HOURS,
    half_life_refusal,
    negative_quota_refusal,
    racks_refusal,
    size_refusal,
)
from scheduling.sim.simulator import Cluster

__all__ = ["MAX_HALF_LIFE_HOURS", "ReplaySetup", "SetupError", "read_setup"]


class SetupError(ValueError):
    """JSON that does not describe a cluster or quotas; the message says what is wrong, in a few words."""


@dataclass(frozen=True, slots=True)
class ReplaySetup:
    cluster: Cluster | None  # None: the JSON names no cluster (the caller's size is needed)
    tenants: dict[str, TenantLimits] = field(default_factory=dict)
    usage_half_life: float | None = None  # seconds; None: no fair share


def read_setup(data: object) -> ReplaySetup:
    """The setup ``data`` (parsed JSON) describes; raises :class:`SetupError`."""
    fields = _mapping(data, "the setup")
    return ReplaySetup(
        cluster=_cluster(fields),
        tenants=_tenants(fields.get("quotas")),
        usage_half_life=_half_life(fields.get("fair_share_half_life_hours")),
    )


def _half_life(hours: object) -> float | None:
    if hours is None or hours == 0:
        return None
    if not isinstance(hours, int | float) or isinstance(hours, bool) or half_life_refusal(hours) is not None:
        raise SetupError(
            f"fair_share_half_life_hours is {hours!r}, not a number of hours from 0 to {MAX_HALF_LIFE_HOURS:.0f}"
        )
    return float(hours) * 3600.0


def _cluster(fields: Mapping[str, Any]) -> Cluster | None:
    layout = fields.get("layout") or []
    if not isinstance(layout, list):
        raise SetupError("layout is not a list of nodes")
    if layout:
        try:
            return Cluster.of_nodes([_node(entry) for entry in layout])
        except ValueError as exc:
            raise SetupError(str(exc)) from None
    if fields.get("nodes") is None and fields.get("gpus_per_node") is None:
        return None
    nodes, gpus = _whole(fields.get("nodes"), "nodes"), _whole(fields.get("gpus_per_node"), "gpus_per_node")
    racks = _whole(fields.get("racks", 1), "racks")
    if size_refusal("nodes", nodes) or size_refusal("gpus_per_node", gpus) or racks_refusal(nodes=nodes, racks=racks):
        raise SetupError("nodes and gpus_per_node must be at least 1, racks from 1 to the nodes")
    return Cluster(nodes, gpus, racks)


def _node(entry: object) -> tuple[int, str]:
    if isinstance(entry, Mapping):
        return _whole(entry.get("gpus"), "a node's gpus"), str(entry.get("rack") or "")
    if isinstance(entry, list) and len(entry) == 2:
        return _whole(entry[0], "a node's gpus"), str(entry[1] or "")
    raise SetupError(f"a node is {entry!r}, not [gpus, rack] or {{gpus, rack}}")


def _tenants(quotas: object) -> dict[str, TenantLimits]:
    if quotas is None:
        return {}
    tenants = {}
    for slug, value in _mapping(quotas, "quotas").items():
        limits = _mapping(value, f"the quota of {slug}")
        cap, user_cap = limits.get("gpu_cap"), limits.get("user_cap")
        guaranteed = _whole(limits.get("guaranteed_gpus", 0), f"{slug}'s guaranteed_gpus")
        tenants[str(slug)] = TenantLimits(
            gpu_cap=None if cap is None else _whole(cap, f"{slug}'s gpu_cap"),
            guaranteed_gpus=guaranteed,
            user_cap=None if user_cap is None else _whole(user_cap, f"{slug}'s user_cap"),
        )
        if negative_quota_refusal(str(slug), tenants[str(slug)]) is not None:
            raise SetupError(f"{slug}'s quota has a negative number")
    return tenants


def _mapping(value: object, what: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise SetupError(f"{what} is not a JSON object")
    return value


def _whole(value: object, what: str) -> int:
    if not isinstance(value, int) or isinstance(value, bool):
        raise SetupError(f"{what} is {value!r}, not a whole number")
    return value
