"""What a what-if run replayed on, in words: the cluster and the tenant quotas copied onto its row.

The page, the run list and the API say the same thing, so an admin reading a run knows whether it is a copy of the
live cluster with today's quotas or a "what if we had more" experiment.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from portal.whatif.models import WhatIfRun


@dataclass(frozen=True, slots=True)
class QuotaRow:
    """One tenant's quota as the run applied it; ``-`` for a limit it did not have. ``edited``: changed for this
    run from the quota of the day (``quota_changes``)."""

    tenant: str
    guaranteed: str
    cap: str
    user_cap: str
    edited: bool = False


def is_live_copy(run: WhatIfRun) -> bool:
    return bool(run.layout)


def cluster_text(run: WhatIfRun) -> str:
    """``Live nodes: 3 nodes, 20 GPUs (2 × 8 + 1 × 4), 2 racks`` or ``Uniform: 2 × 4 GPUs, 1 rack``."""
    if not run.layout:
        return f"Uniform: {run.nodes} × {run.gpus_per_node} GPUs, {_count(run.racks, 'rack')}"
    return f"Live nodes: {layout_text(run.layout)}"


def layout_text(layout: Sequence[Sequence[Any]]) -> str:
    """``3 nodes, 20 GPUs (2 × 8 + 1 × 4), 2 racks`` for ``(gpus, rack)`` nodes: the run's page and the form's
    live choice word a copy alike. Nodes with no rack count as one more rack, as placement groups them."""
    sizes = Counter(int(gpus) for gpus, _ in layout)
    total = sum(gpus * count for gpus, count in sizes.items())
    mix = " + ".join(f"{count} × {gpus}" for gpus, count in sorted(sizes.items(), reverse=True))
    racks = len({str(rack) for _, rack in layout})
    return f"{_count(len(layout), 'node')}, {total} GPUs ({mix}), {_count(racks, 'rack')}"


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}{'s' * (n != 1)}"


def cluster_brief(run: WhatIfRun) -> str:
    """The run list's column: ``live, 20 GPUs`` or ``2 × 4 GPUs``."""
    if not run.layout:
        return f"{run.nodes} × {run.gpus_per_node} GPUs"
    return f"live, {sum(int(gpus) for gpus, _ in run.layout)} GPUs"


def quota_rows(run: WhatIfRun) -> list[QuotaRow] | None:
    """The tenants the run limited, by slug; None when it applied no quotas. Tenants with no limit at all are
    left out (the page says the others had none), unless the run edited them (lifting a limit is worth showing)."""
    if run.quotas is None:
        return None
    rows = []
    for slug, limits in sorted(run.quotas.items()):
        if not _limited(limits) and not limits.get("edited"):
            continue
        rows.append(
            QuotaRow(
                tenant=slug,
                guaranteed=_gpus(limits.get("guaranteed_gpus") or None),
                cap=_gpus(limits.get("gpu_cap")),
                user_cap=_gpus(limits.get("user_cap")),
                edited=bool(limits.get("edited")),
            )
        )
    return rows


def _limited(limits: dict[str, Any]) -> bool:
    capped = limits.get("gpu_cap") is not None or limits.get("user_cap") is not None
    return capped or bool(limits.get("guaranteed_gpus"))


def _gpus(value: object) -> str:
    return "-" if value is None else str(value)
