"""Reads of jobs for views, the API and the scheduling adapter. Visibility always goes through
``Job.objects.visible_to``."""

from __future__ import annotations

from typing import TYPE_CHECKING

from django.db.models import QuerySet

from portal.jobs.models import Job, JobLogChunk

if TYPE_CHECKING:
    from django.contrib.auth.models import AbstractBaseUser, AnonymousUser


def job_list(*, user: AbstractBaseUser | AnonymousUser) -> QuerySet[Job]:
    """Jobs ``user`` may see, with what list pages show, in one query."""
    return Job.objects.visible_to(user).select_related("tenant", "user")


def job_get(*, user: AbstractBaseUser | AnonymousUser, job_id: int) -> Job | None:
    """One job if ``user`` may see it, else None (callers answer 404: a job of another tenant does not exist)."""
    return job_list(user=user).filter(pk=job_id).first()


def job_log_read(*, job: Job, offset: int = 0, limit: int = 1_000_000) -> tuple[str, int]:
    """Output of ``job`` from character ``offset``: returns (text, next offset). At most about ``limit``
    characters per call so a follower of a chatty job gets it in pieces."""
    offset = max(0, offset)
    chunks = JobLogChunk.objects.filter(job=job, offset__gte=_chunk_start(job, offset)).order_by("offset")
    parts: list[str] = []
    size = 0
    position = offset
    for chunk in chunks.iterator():
        data = chunk.data
        if chunk.offset < offset:
            data = data[offset - chunk.offset :]
        parts.append(data)
        size += len(data)
        position = chunk.offset + len(chunk.data)
        if size >= limit:
            break
    return "".join(parts), max(position, offset) if parts else min(offset, job.log_size)


def _chunk_start(job: Job, offset: int) -> int:
    """Offset of the chunk that contains character ``offset``."""
    start = (
        JobLogChunk.objects.filter(job=job, offset__lte=offset).order_by("-offset").values_list("offset", flat=True)
    ).first()
    return start if start is not None else 0
