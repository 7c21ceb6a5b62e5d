"""A job's output: writing the chunks agents ship, bounded by ``CORRAL_JOB_LOG_MAX_CHARS``, and whether all of it
has arrived (:func:`job_output_progress`). Reading the text is ``portal.jobs.selectors.job_log_read``; its tail
and earlier pieces for the job page and ``?tail=`` (:func:`job_log_window`), and the whole of it for a download
(:func:`job_log_pieces`), are read through it.

Agents count each task's output in bytes of its log file; the portal stores characters. Output arrives two ways,
in heartbeats (as text, the agent's older path) and as raw bytes through ``POST /api/v1/agent/logs/``, and both
go through one rule, :func:`task_log_receive`. Raw bytes become text by :func:`decode_log_bytes`, one character
per byte that is not UTF-8, so the byte offsets acknowledged to the agent always match its file.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from enum import StrEnum

from django.conf import settings
from django.db import transaction
from django.db.models.functions import Length

from portal.errors import NotFound
from portal.jobs.models import Job, JobLogChunk, JobTask, TaskState
from portal.jobs.selectors import job_log_read

#: The most characters one stored chunk holds. An agent sends megabytes at a time; storing them in pieces keeps the
#: log cap's granularity (it drops whole chunks) and lets readers take a page without loading a whole request.
LOG_PIECE_CHARS = 256 * 1024
#: A byte that is not part of valid UTF-8, as ``surrogateescape`` decodes it.
_UNDECODABLE = re.compile("[\udc80-\udcff]")


def decode_log_bytes(data: bytes) -> str:
    """``data`` as text of exactly ``len(data)`` UTF-8 bytes: every byte that is not valid UTF-8, and every NUL
    (which PostgreSQL text cannot hold), becomes one ``?``. The agent's heartbeat text follows the same rule
    (``agent.task_log``), so both paths store the same characters for the same bytes."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        text = _UNDECODABLE.sub("?", data.decode("utf-8", errors="surrogateescape"))
    return text.replace("\x00", "?") if "\x00" in text else text


def task_log_receive(*, task: JobTask, offset: int, text: str, end: int) -> int:
    """Store output an agent sent for ``task`` if it starts where the portal's copy ends; return the bytes held.

    The protocol's one offset rule, for heartbeats and ``POST /api/v1/agent/logs/`` alike: ``text`` is the task's
    log file from byte ``offset`` to byte ``end``, and it is appended only when ``offset`` equals
    ``task.log_received``. Anything else (a retry of a chunk already stored, a chunk after a gap) changes nothing,
    and the answer, the bytes held, tells the agent where to send from. Retries are therefore harmless.

    Precondition: ``task.job`` is the job's row-locked instance (``job_log_append`` appends at its size).
    """
    if text and end > offset == task.log_received:
        job_log_append(job=task.job, data=text)
        task.log_received = end
        task.save(update_fields=["log_received"])
    return task.log_received


def task_log_post(*, node_id: int, job_id: int, attempt: int, rank: int, offset: int, data: bytes) -> int:
    """Take raw bytes ``[offset, offset + len(data))`` of one task's log from the agent of node ``node_id``, under
    :func:`task_log_receive`'s rule; return the bytes of that log the portal holds.

    Raises ``NotFound`` when the node runs no such task (another node's task, or one the portal never assigned):
    a node reports only its own output. Any state of the task is accepted, a lost one included: what the agent of
    a node marked down still sends before it registers again is kept. One transaction, holding the job's row lock
    (as the heartbeat does); the bytes are decoded before it, so a heartbeat waits only for the write. Side
    effects: the job's log grows (``job_log_append``, which may drop older output past the cap) and
    ``task.log_received`` moves to the end of the stored bytes.
    """
    text = decode_log_bytes(data)
    with transaction.atomic():
        job = Job.objects.select_for_update().filter(pk=job_id).first()
        task = JobTask.objects.filter(job_id=job_id, attempt=attempt, rank=rank, node_id=node_id).first()
        if job is None or task is None:
            raise NotFound(f"this node has no task {job_id}:{attempt}:{rank}")
        task.job = job
        return task_log_receive(task=task, offset=offset, text=text, end=offset + len(data))


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
    chunks += (
        JobLogChunk(job=job, offset=start + at, data=data[at : at + LOG_PIECE_CHARS])
        for at in range(0, len(data), LOG_PIECE_CHARS)
    )
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


class OutputState(StrEnum):
    """How much of a job's output the portal holds (:func:`job_output_progress`)."""

    LIVE = "live"  # the job has not finished: more output will come
    ARRIVING = "arriving"  # it has finished, but output it printed is still on its way from a node
    COMPLETE = "complete"  # every byte every task printed is here
    INCOMPLETE = "incomplete"  # finished, nothing more will come, and a lost node's output may be missing


@dataclass(frozen=True, slots=True)
class OutputProgress:
    """A job's :class:`OutputState` and, when there is something to say, the sentence pages and clients show."""

    state: OutputState
    text: str = ""

    @property
    def complete(self) -> bool:
        return self.state is OutputState.COMPLETE

    @property
    def settled(self) -> bool:
        """Nothing more will arrive: a reader who has read to the end may stop following."""
        return self.state in (OutputState.COMPLETE, OutputState.INCOMPLETE)


#: Ranks named in an "output still arriving" sentence; more are counted.
OUTPUT_NAMED_RANKS = 3


def job_output_progress(*, job: Job, tasks: Sequence[JobTask] | None = None) -> OutputProgress:
    """Whether the portal holds all of ``job``'s output: the one definition of "output still arriving".

    A finished job's output is complete once every task of every attempt has exited and the portal has received its
    log up to the size the agent reported at the exit (``log_received >= log_final_size``); an agent ships a log
    beside its heartbeats, so the last chunks can land well after the job has ended. A task still running after
    its job ended (a rank being stopped) still prints. A task lost with its node is not waited for: its node is
    fenced until its agent registers again, having dropped the task, so no end is ever reported for it and its
    output "may be incomplete (node lost)" (what the agent still sent is kept). A task that ended without a report
    (it never started) had nothing to send.

    ``tasks``: the job's tasks with their nodes, when the caller has them (a prefetched list), else one query.
    """
    if not job.is_terminal:
        return OutputProgress(OutputState.LIVE)
    if tasks is None:
        tasks = list(job.tasks.select_related("node"))
    arriving: list[str] = []
    lost: list[str] = []
    for task in sorted(tasks, key=lambda t: (t.attempt, t.rank)):
        where = f"rank {task.rank}" + ("" if task.attempt == job.attempt else f" of attempt {task.attempt}")
        final = task.log_final_size
        behind = final is not None and task.log_received < final
        if task.state in (TaskState.ASSIGNED, TaskState.RUNNING):
            arriving.append(f"{where} on {task.node.name} is still stopping")
        elif task.state == TaskState.LOST and (final is None or behind):
            lost.append(f"{where} on node {task.node.name}")
        elif final is not None and task.log_received < final:
            arriving.append(f"{where} on {task.node.name} has sent {_bytes(task.log_received)} of {_bytes(final)}")
    sentences = []
    if arriving:
        sentences.append(f"Output still arriving: {_first_few(arriving, '; ')}.")
    if lost:
        sentences.append(f"Output of {_first_few(lost, ', ')} may be incomplete (node lost).")
    state = OutputState.ARRIVING if arriving else OutputState.INCOMPLETE if lost else OutputState.COMPLETE
    return OutputProgress(state, " ".join(sentences))


def _first_few(items: list[str], separator: str) -> str:
    more = len(items) - OUTPUT_NAMED_RANKS
    named = separator.join(items[:OUTPUT_NAMED_RANKS])
    return f"{named} and {more} more" if more > 0 else named


def _bytes(count: int) -> str:
    """``52428800`` as ``50.0 MiB``: sizes of log files, as agents count them."""
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if count >= scale:
            return f"{count / scale:.1f} {unit}"
    return f"{count} bytes"


#: How far into a window :func:`job_log_window` looks for a line's end to start it at the next line.
LINE_SEARCH_CHARS = 4096


def job_log_window(*, job: Job, end: int, chars: int) -> tuple[str, int]:
    """About the last ``chars`` characters of ``job``'s log before character ``end``: (text, where it starts).

    The job page loads a log from its end (``end`` = ``log_size``: the error that ended a job is the first thing
    seen) and then earlier pieces, each ending where the text shown begins; ``GET .../log/?tail=N`` reads the same.
    A window starts at the beginning of a line when one begins within :data:`LINE_SEARCH_CHARS`, and, when its cut
    falls in dropped output, at the first character kept after it, so that the pieces a reader joins meet exactly
    and a gap's marker line is shown once.
    """
    end = max(0, min(end, job.log_size))
    start = max(0, end - chars)
    if start > 0:
        holder = (
            JobLogChunk.objects.filter(job=job, offset__lte=start)
            .order_by("-offset")
            .annotate(chars=Length("data"))
            .values_list("offset", "chars")
            .first()
        )
        if holder is None or holder[0] + holder[1] <= start:  # the cut lies in dropped output
            after = JobLogChunk.objects.filter(job=job, offset__gt=start, offset__lt=end).order_by("offset")
            start = after.values_list("offset", flat=True).first() or end
    text, _ = job_log_read(job=job, offset=start, limit=max(chars, 1), end=end)
    if start > 0:
        cut = text.find("\n", 0, LINE_SEARCH_CHARS) + 1
        if 0 < cut < len(text) and "[..." not in text[:cut]:
            text, start = text[cut:], start + cut
    return text, start


#: Characters a download reads from the database at a time: a few stored chunks, never the whole log at once.
DOWNLOAD_PIECE_CHARS = 4 * LOG_PIECE_CHARS


def job_log_pieces(*, job: Job) -> Iterator[str]:
    """``job``'s whole log as it stands now (up to its current ``log_size``, with a marker line where output was
    dropped), a few chunks at a time: what ``GET .../log/?download=1`` streams. A log still growing is read to
    where it ended when the download began."""
    end = job.log_size
    offset = 0
    while offset < end:
        text, next_offset = job_log_read(job=job, offset=offset, limit=DOWNLOAD_PIECE_CHARS, end=end)
        if text:
            yield text
        if next_offset <= offset:
            return
        offset = next_offset
