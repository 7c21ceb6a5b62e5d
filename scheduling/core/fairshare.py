"""Fair share by decayed usage: which tenant borrows idle quota first.

Each tenant's *usage* is the GPU-seconds its jobs held, each second weighted by ``2 ** -(age / half_life)``: a
GPU-hour used one half-life ago counts half, two half-lives ago a quarter (Slurm's ``PriorityDecayHalfLife``). With
the quota layer (``+quota``), jobs that would borrow idle quota are handed it in order of their tenant's usage per
guaranteed GPU, lowest first, so a tenant that used little of its share lately borrows before one that used a lot.

Fair share decides who *gets* borrowable GPUs, never who *loses* them. The wrapped policy's walk first decides, as
without fair share, which running borrowers keep their GPUs; what it hands to waiting borrowers, with what it would
free from running ones, is then lent again in fair-share order (the ``lend_fairly`` phase of ``preemptive_walk``). A
running borrower the policy keeps is never preempted for fair share; one it would preempt may be spared. Ranking
running borrowers by usage instead would swap two tenants back and forth every time their usage crossed, a
preemption each time, because the one that runs is the one whose usage grows.

Tenants with no guaranteed GPUs hold no share: they borrow after every tenant that has one, in order of their own
usage. Pure: the caller passes every time in.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

from scheduling.core.model import TenantLimits, UsageHistory

#: Slurm's default decay half-life: a week.
DEFAULT_HALF_LIFE = 7 * 86_400.0

#: A tenant's place in the borrowing order: (holds no share, usage per guaranteed GPU). Smaller borrows first.
BorrowRank = tuple[int, float]
#: The rank of a tenant missing from both usage and limits: no share, no usage.
NO_SHARE: BorrowRank = (1, 0.0)


def decay_factor(elapsed: float, half_life: float) -> float:
    """How much of a GPU-second used ``elapsed`` seconds ago still counts."""
    return math.exp(-math.log(2) * elapsed / half_life)


class UsageMeter:
    """Decayed usage per tenant, kept up to date as jobs start and stop (the simulator and the forecast).

    Between two changes a tenant holds a constant number of GPUs ``g``, so its usage moves exactly as
    ``u(t + d) = u(t) * f + g * (half_life / ln 2) * (1 - f)`` with ``f = decay_factor(d)``: no sampling error.
    """

    __slots__ = ("half_life", "usage", "gpus", "at")

    def __init__(self, half_life: float, *, usage: Mapping[str, float] | None = None, at: float = 0.0) -> None:
        UsageHistory(half_life, {})  # validates the half-life
        self.half_life = half_life
        self.usage: dict[str, float] = dict(usage or {})
        self.gpus: dict[str, int] = {}
        self.at: dict[str, float] = dict.fromkeys(self.usage, at)

    @classmethod
    def starting_from(cls, history: UsageHistory, now: float) -> UsageMeter:
        return cls(history.half_life, usage=history.usage, at=now)

    def _advance(self, tenant: str, now: float) -> float:
        at = self.at.get(tenant, now)
        value = self.usage.get(tenant, 0.0)
        if now > at:
            f = decay_factor(now - at, self.half_life)
            value = value * f + self.gpus.get(tenant, 0) * self.half_life / math.log(2) * (1.0 - f)
        self.usage[tenant] = value
        self.at[tenant] = max(now, at)
        return value

    def change(self, tenant: str, gpus: int, now: float) -> None:
        """``tenant`` holds ``gpus`` more GPUs (fewer when negative) from ``now`` on."""
        self._advance(tenant, now)
        self.gpus[tenant] = self.gpus.get(tenant, 0) + gpus

    def history(self, now: float) -> UsageHistory:
        """Every tenant's usage as of ``now`` (not before the last change)."""
        return UsageHistory(self.half_life, {tenant: self._advance(tenant, now) for tenant in list(self.at)})


def borrow_ranks(history: UsageHistory, limits: Mapping[str, TenantLimits]) -> dict[str, BorrowRank]:
    """Every tenant's place in the borrowing order (see :data:`BorrowRank`); tenants in neither map are absent and
    rank as a tenant with no share and no usage."""
    ranks: dict[str, BorrowRank] = {}
    for tenant in set(history.usage) | set(limits):
        used = history.usage.get(tenant, 0.0)
        share = limits[tenant].guaranteed_gpus if tenant in limits else 0
        ranks[tenant] = (0, used / share) if share > 0 else (1, used)
    return ranks


@dataclass(frozen=True, slots=True)
class Standing:
    """One tenant's fair-share standing, as the tenants page and API show it.

    ``usage_share`` is its part of all tenants' decayed usage; ``entitled_share`` its part of all guaranteed GPUs.
    ``ratio`` is the first over the second (1.0: it used exactly its share; None: it holds no share).
    """

    tenant: str
    usage: float
    usage_share: float
    entitled_share: float
    ratio: float | None
    order: int  # 1 borrows first


def standings(history: UsageHistory, limits: Mapping[str, TenantLimits]) -> list[Standing]:
    """Every tenant's standing, in borrowing order."""
    ranks = borrow_ranks(history, limits)
    total_usage = sum(history.usage.get(t, 0.0) for t in ranks)
    total_share = sum(limits[t].guaranteed_gpus for t in ranks if t in limits)
    rows = []
    for order, tenant in enumerate(sorted(ranks, key=lambda t: (ranks[t], t)), start=1):
        used = history.usage.get(tenant, 0.0)
        share = limits[tenant].guaranteed_gpus if tenant in limits else 0
        usage_share = used / total_usage if total_usage > 0 else 0.0
        entitled = share / total_share if total_share > 0 else 0.0
        rows.append(Standing(tenant, used, usage_share, entitled, usage_share / entitled if entitled else None, order))
    return rows
