"""Celery tasks of loanable pools. Thin: each calls one service and is safe to run twice."""

from __future__ import annotations

from celery import shared_task
from django.utils import timezone

from portal.pools.services import reclaims_progress
from portal.queue import RECLAIMS_PROGRESS, RETRY_ON_DB_ERROR


@shared_task(name=RECLAIMS_PROGRESS, **RETRY_ON_DB_ERROR)
def progress_reclaims() -> list[int]:
    """Hand back the reclaimed nodes that are empty, and those past their deadline; the ids of reclaims done."""
    return reclaims_progress(now=timezone.now())
