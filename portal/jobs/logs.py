"""Writing a job's output: the chunks agents ship, bounded by ``CORRAL_JOB_LOG_MAX_CHARS`` (reading is
``portal.jobs.selectors.job_log_read``)."""

from __future__ import annotations

from django.conf import settings
from django.db.models.functions import Length

from portal.jobs.models import Job, JobLogChunk


def job_log_append(*, job: Job, data: str) -> int:
    """Append ``data`` to ``job``'s output and return the log's new size: every character the job has printed.

    Storage is bounded by ``CORRAL_JOB_LOG_MAX_CHARS`` (0: unbounded), because one job printing in a loop must not
    fill the database. Its first half is the *head*, how the job began, and is kept for good; the rest holds the
    most recent output, where the error that ended the job will be. Once more is stored than the cap, whole chunks
    after the head are deleted, oldest first, until it fits (never the newest chunk: new output that alone exceeds
    the tail keeps only its end). What is deleted is counted in ``log_dropped`` and leaves one gap in the chunk
    offsets, which ``job_log_read`` shows as a marker line. Offsets never move, so the byte counts acknowledged to
    the agent are untouched and it is never asked to resend.

    Precondition: ``job`` is row-locked by the caller (the new chunk's offset is the job's current size, and the
    counts are read, changed and written back).
    """
    if not data:
        return job.log_size
    cap = settings.CORRAL_JOB_LOG_MAX_CHARS
    start = job.log_size
    job.log_size += len(data)
    chunks: list[JobLogChunk] = []
    head = cap // 2
    if cap > 0:
        if start < head < job.log_size:
            # Split at the head's end, so the head is exactly the first ``head`` characters, never a chunk more.
            chunks.append(JobLogChunk(job=job, offset=start, data=data[: head - start]))
            data, start = data[head - start :], head
        cut = len(data) - (cap - head)
        if start >= head and cut > 0:
            data, start = data[cut:], start + cut
            job.log_dropped += cut
    chunks.append(JobLogChunk(job=job, offset=start, data=data))
    JobLogChunk.objects.bulk_create(chunks)
    if cap > 0:
        _log_drop_oldest(job, head=head, newest=start, excess=job.log_size - job.log_dropped - cap)
    job.save(update_fields=["log_size", "log_dropped"])
    return job.log_size


def _log_drop_oldest(job: Job, *, head: int, newest: int, excess: int) -> None:
    """Delete whole chunks that start in ``[head, newest)``, oldest first, until ``excess`` characters are gone,
    counting them in ``job.log_dropped``. Lengths are read a few chunks at a time: typically one or two go per
    append, and reading the length of every stored chunk would touch the whole log."""
    while excess > 0:
        batch = (
            JobLogChunk.objects.filter(job=job, offset__gte=head, offset__lt=newest)
            .order_by("offset")
            .annotate(chars=Length("data"))
            .values_list("pk", "chars")[:8]
        )
        doomed = []
        for pk, chars in batch:
            if excess <= 0:
                break
            doomed.append(pk)
            excess -= chars
            job.log_dropped += chars
        if not doomed:
            return  # nothing left to drop but the head and the newest output (the cap was lowered since)
        JobLogChunk.objects.filter(pk__in=doomed).delete()
