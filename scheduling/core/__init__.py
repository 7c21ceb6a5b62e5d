"""The pure scheduling core: no Django, no Celery, no clock.

``decide(snapshot, now=..., policy=..., placement=...)`` is the whole interface the live loop needs; the
simulator (``scheduling.sim``) drives the same policies, placements and round through :mod:`.engine`.
"""

from __future__ import annotations

from scheduling.core.decide import decide
from scheduling.core.model import (
    Decision,
    FinishedJob,
    GpuSlot,
    JobId,
    JobView,
    NodeView,
    Placement,
    Snapshot,
    TenantLimits,
    Wait,
    WaitReason,
)
from scheduling.core.placement import PLACEMENTS, PlacementModel, resolve_placement
from scheduling.core.policies import POLICIES, Policy, resolve_policy
from scheduling.core.states import JobState

__all__ = [
    "PLACEMENTS",
    "POLICIES",
    "Decision",
    "FinishedJob",
    "GpuSlot",
    "JobId",
    "JobState",
    "JobView",
    "NodeView",
    "Placement",
    "PlacementModel",
    "Policy",
    "Snapshot",
    "TenantLimits",
    "Wait",
    "WaitReason",
    "decide",
    "resolve_placement",
    "resolve_policy",
]
