"""Celery tasks of node liveness. Thin: each calls one service and is safe to run twice."""

from __future__ import annotations

from celery import shared_task

from portal.nodes.services import nodes_mark_stale_down
from portal.queue import RETRY_ON_DB_ERROR, SWEEP_NODES


@shared_task(name=SWEEP_NODES, **RETRY_ON_DB_ERROR)
def sweep_nodes() -> list[str]:
    """Mark silent nodes down; their jobs are requeued and a scheduling round is asked for."""
    return nodes_mark_stale_down()
