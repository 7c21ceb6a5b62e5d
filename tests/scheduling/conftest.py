"""Builders shared by the scheduling tests: small snapshots in the Ray-autoscaler test style (build a request with
a helper, call the pure function, compare plain values)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

import pytest

from scheduling.core import GpuSlot, JobState, JobView, NodeView, Snapshot, TenantLimits


@dataclass(frozen=True)
class Builders:
    node: Callable[..., NodeView]
    job: Callable[..., JobView]
    running: Callable[..., JobView]
    snapshot: Callable[..., Snapshot]


def _node(name: str, total: int = 4, free: Iterable[int] | None = None, *, rack: str = "", up: bool = True) -> NodeView:
    """A node whose GPU ids are ``<node number> * 100 + k`` unless ``free`` names them."""
    base = int("".join(ch for ch in name if ch.isdigit()) or 0) * 100
    ids = tuple(range(base, base + total)) if free is None else tuple(free)
    return NodeView(name=name, total_gpus=total, free_gpus=ids, rack=rack, schedulable=up)


def _job(job_id: int | str, gpus: int = 1, submit: float = 0.0, *, tenant: str = "t", user: str = "u", **kw) -> JobView:
    return JobView(id=job_id, tenant=tenant, user=user, gpus=gpus, submit_time=submit, **kw)


def _running(job_id: int | str, slots: Iterable[tuple[str, int]], submit: float = 0.0, **kw) -> JobView:
    alloc = tuple(GpuSlot(n, g) for n, g in slots)
    kw.setdefault("last_started", submit)
    return _job(job_id, len(alloc), submit, state=JobState.RUNNING, allocation=alloc, **kw)


def _snapshot(
    nodes: Iterable[NodeView], jobs: Iterable[JobView], tenants: Mapping[str, TenantLimits] | None = None
) -> Snapshot:
    return Snapshot(nodes=tuple(nodes), jobs=tuple(jobs), tenants=dict(tenants or {}))


@pytest.fixture
def b() -> Builders:
    return Builders(node=_node, job=_job, running=_running, snapshot=_snapshot)
