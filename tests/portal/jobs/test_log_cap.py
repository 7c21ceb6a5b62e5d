"""A job's stored output is bounded by CORRAL_JOB_LOG_MAX_CHARS: its start and its latest output are kept, the
middle is dropped, and readers see one marker line where it was, at offsets that never move."""

from __future__ import annotations

import pytest
from django.db import connection, transaction

from portal.jobs.logs import job_log_append
from portal.jobs.models import Job, JobLogChunk
from portal.jobs.selectors import job_log_read
from portal.jobs.services import job_submit
from tests.concurrency import run_together
from tests.fixtures import World

CAP = 40  # head: the first 20 characters; tail: at most the latest 20
LINES = [f"line {i:02d}\n" for i in range(10)]  # 8 characters each, 80 in all
HEAD = "line 00\nline 01\nline"  # the first 20 characters: the head is cut mid-line, exactly at half the cap
TAIL = "line 08\nline 09\n"  # the newest whole chunks that fit in the other 20
DROPPED = 80 - len(HEAD) - len(TAIL)  # 44


def marker(chars: int) -> str:
    return (
        f"[... {chars:,} characters of output dropped: this job printed more than the {CAP:,} characters Corral"
        " keeps per job; its start and its latest output are kept ...]\n"
    )


@pytest.fixture
def capped(settings) -> None:  # noqa: ANN001
    settings.CORRAL_JOB_LOG_MAX_CHARS = CAP


def printed(world: World, pieces: list[str]) -> Job:
    job = job_submit(user=world.alice, command="python loop.py", gpus=1)
    for piece in pieces:
        job_log_append(job=job, data=piece)
    return job


def stored(job: Job) -> list[tuple[int, str]]:
    return list(JobLogChunk.objects.filter(job=job).order_by("offset").values_list("offset", "data"))


def test_the_head_stays_and_the_tail_rolls(world: World, capped: None) -> None:
    job = printed(world, LINES)
    job.refresh_from_db()
    assert (job.log_size, job.log_dropped) == (80, DROPPED)  # log_size still counts everything printed
    chunks = stored(job)
    assert "".join(data for _, data in chunks) == HEAD + TAIL
    assert [offset for offset, _ in chunks] == [0, 8, 16, 64, 72]  # the head split at 20; the tail at its own offsets


def test_a_reader_from_the_start_sees_one_marker_with_the_count(world: World, capped: None) -> None:
    job = printed(world, LINES)
    text, next_offset = job_log_read(job=job, offset=0)
    assert text == HEAD + "\n" + marker(DROPPED) + TAIL  # the marker gets a line of its own
    assert text.count("characters of output dropped") == 1 and next_offset == 80


@pytest.mark.parametrize(
    ("offset", "text"),
    [
        (8, "line 01\nline" + "\n" + marker(DROPPED) + TAIL),  # before the gap
        (20, "\n" + marker(DROPPED) + TAIL),  # exactly where it begins
        (50, "\n" + marker(64 - 50) + TAIL),  # inside it: only what this reader never got
        (68, " 08\nline 09\n"),  # after it: nothing odd
        (80, ""),  # at the end
    ],
)
def test_readers_before_inside_and_after_the_gap(world: World, capped: None, offset: int, text: str) -> None:
    job = printed(world, LINES)
    assert job_log_read(job=job, offset=offset) == (text, 80)


def test_a_follower_reading_small_pieces_gets_everything_once_and_ends(world: World, capped: None) -> None:
    job = printed(world, LINES)
    offset, pieces = 0, []
    for _ in range(20):
        text, next_offset = job_log_read(job=job, offset=offset, limit=1)
        assert next_offset >= offset
        if next_offset == offset:
            break
        pieces.append(text)
        offset = next_offset
    assert offset == 80 and "".join(pieces) == HEAD + "\n" + marker(DROPPED) + TAIL


def test_a_follower_that_keeps_up_never_sees_a_gap(world: World, capped: None) -> None:
    job = job_submit(user=world.alice, command="python loop.py", gpus=1)
    offset, seen = 0, ""
    for line in LINES:
        job_log_append(job=job, data=line)
        text, offset = job_log_read(job=job, offset=offset)
        seen += text
    assert seen == "".join(LINES) and Job.objects.get(pk=job.pk).log_dropped == DROPPED


def test_output_bigger_than_the_tail_keeps_its_end(world: World, capped: None) -> None:
    job = printed(world, ["a" * 10, "b" * 60 + "c" * 20 + "\n"])  # 91 characters at once
    job.refresh_from_db()
    assert (job.log_size, job.log_dropped) == (91, 51)
    assert stored(job) == [(0, "a" * 10), (10, "b" * 10), (71, "c" * 19 + "\n")]
    assert job_log_read(job=job, offset=0) == ("a" * 10 + "b" * 10 + "\n" + marker(51) + "c" * 19 + "\n", 91)


def test_storage_never_exceeds_the_cap_whatever_the_pieces(world: World, capped: None) -> None:
    everything = "".join(f"{i}:" + "x" * (i % 37) + "\n" for i in range(60))
    pieces, rest = [], everything
    for size in (1, 3, 7, 19, 29, 2, 41, 5) * 20:
        pieces.append(rest[:size])
        rest = rest[size:]
    job = printed(world, [*pieces, rest])
    job.refresh_from_db()
    kept = "".join(data for _, data in stored(job))
    assert job.log_size == len(everything) and len(kept) == job.log_size - job.log_dropped <= CAP
    first_tail_offset = stored(job)[-1][0]
    assert kept.startswith(everything[:20]) and kept.endswith(everything[first_tail_offset:])
    text, next_offset = job_log_read(job=job, offset=0)
    assert text.count("characters of output dropped") == 1 and f"[... {job.log_dropped:,} characters" in text
    assert next_offset == job.log_size


def test_zero_means_no_limit(world: World, settings) -> None:  # noqa: ANN001
    settings.CORRAL_JOB_LOG_MAX_CHARS = 0
    job = printed(world, LINES)
    job.refresh_from_db()
    assert (job.log_size, job.log_dropped) == (80, 0)
    assert job_log_read(job=job, offset=0) == ("".join(LINES), 80)


def test_a_log_whose_end_is_gone_still_lets_followers_finish(world: World, capped: None) -> None:
    """job_log_append always keeps the newest output; a log pruned by hand must still not trap a follower."""
    job = printed(world, LINES)
    JobLogChunk.objects.filter(job=job, offset=72).delete()
    assert job_log_read(job=job, offset=0) == (HEAD + "\n" + marker(DROPPED) + "line 08\n" + marker(8), 80)
    assert job_log_read(job=job, offset=76) == ("\n" + marker(4), 80)


@pytest.mark.django_db(transaction=True)
@pytest.mark.skipif(connection.vendor != "postgresql", reason="row locks need PostgreSQL (make test runs it)")
def test_racing_heartbeats_keep_the_counts_exact_under_the_row_lock(world: World, capped: None) -> None:
    job = job_submit(user=world.alice, command="python loop.py", gpus=1)

    def append() -> int:
        with transaction.atomic():
            return job_log_append(job=Job.objects.select_for_update().get(pk=job.pk), data="racing!\n")

    outcomes = run_together(append, threads=10)
    assert sorted(o for o in outcomes if isinstance(o, int)) == list(range(8, 81, 8)), outcomes  # each its own end
    job.refresh_from_db()
    assert (job.log_size, job.log_dropped) == (80, DROPPED)
    assert stored(job) == [(0, "racing!\n"), (8, "racing!\n"), (16, "raci"), (64, "racing!\n"), (72, "racing!\n")]
