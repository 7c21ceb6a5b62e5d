"""The job-array index grammar (Slurm's --array): what it reads, what it refuses and why. Pure: no database.
Ref: #16"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from portal.jobs.array_spec import MAX_ARRAY_INDEX, ArraySpec, ArraySpecError, format_indices, parse_array_spec

CAP = 100_000


def parse(text: str, max_tasks: int = CAP) -> ArraySpec:
    return parse_array_spec(text, max_tasks=max_tasks)


@pytest.mark.parametrize(
    ("text", "indices", "limit"),
    [
        ("0-9", tuple(range(10)), None),
        ("1,3,5-9", (1, 3, 5, 6, 7, 8, 9), None),
        ("0-15:4", (0, 4, 8, 12), None),
        ("0-999%50", tuple(range(1000)), 50),
        ("7", (7,), None),
        ("5-9,1-6,3", (1, 2, 3, 4, 5, 6, 7, 8, 9), None),  # overlaps and duplicates merge
        (" 2 , 0-1 %3 ", (0, 1, 2), 3),
        (f"{MAX_ARRAY_INDEX}", (MAX_ARRAY_INDEX,), None),
    ],
)
def test_it_reads_slurm_specs(text: str, indices: tuple[int, ...], limit: int | None) -> None:
    spec = parse(text)
    assert (spec.indices, spec.limit) == (indices, limit)
    assert (spec.count, spec.first, spec.last) == (len(indices), indices[0], indices[-1])


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("5-1", "goes down"),
        ("0-10000000", "at most 100,000"),
        ("a-b", "not an index"),
        ("0-9%0", "at least 1"),
        ("", "give the array's task indices"),
        ("   ", "give the array's task indices"),
        ("-1", "cannot be negative"),
        ("-5-3", "cannot be negative"),
        ("0--3", "cannot be negative"),
        ("4000001", "above the largest allowed, 4,000,000"),
        ("0-9:0", "step"),
        ("0-9%x", "not a limit"),
        ("0-9%", "not a limit"),
        ("1,,2", "empty term"),
        ("1.5", "not an index"),
        ("9999999999999", "too large"),
        ("0-60000,50000-100000", "more than 100,000"),  # each term fits, their union does not
        ("1," * 9000, "longer than"),
    ],
)
def test_it_refuses_bad_specs_with_a_reason(text: str, words: str) -> None:
    with pytest.raises(ArraySpecError, match=words):
        parse(text)


def test_the_task_cap_counts_distinct_indices() -> None:
    assert parse("0-99999,0-99999").count == CAP  # duplicates are not tasks
    assert parse("0-60000,50000-99999").count == CAP
    with pytest.raises(ArraySpecError, match="at most 10"):
        parse("0-10", max_tasks=10)


def test_a_huge_range_is_refused_without_building_it() -> None:
    # Sized arithmetically: were the indices built first, this would take seconds and gigabytes.
    with pytest.raises(ArraySpecError, match="4,000,001 tasks"):
        parse(f"0-{MAX_ARRAY_INDEX}")


def test_the_shortest_form_reads_as_people_write_it() -> None:
    assert parse("1,3,5-9").text() == "1,3,5-9"
    assert parse("0-15:4%2").text() == "0-12:4%2"
    assert format_indices([0, 2, 4, 6, 7, 8]) == "0-4:2,6-8"


terms = st.tuples(st.integers(0, 5000), st.integers(0, 300), st.integers(1, 20)).map(
    lambda t: (t[0], t[0] + t[1], t[2])
)


@st.composite
def specs(draw: st.DrawFn) -> tuple[str, set[int], int | None]:
    """A spec written the way a person might (singles, ranges, stepped ranges, in any order, overlapping), and the
    indices and limit it means."""
    chosen = draw(st.lists(terms, min_size=1, max_size=8))
    parts, indices = [], set()
    for start, stop, step in chosen:
        indices.update(range(start, stop + 1, step))
        if start == stop:
            parts.append(str(start))
        elif step == 1:
            parts.append(f"{start}-{stop}")
        else:
            parts.append(f"{start}-{stop}:{step}")
    limit = draw(st.none() | st.integers(1, 10_000))
    return ",".join(parts) + (f"%{limit}" if limit is not None else ""), indices, limit


@given(specs())
def test_generated_specs_mean_what_they_say_and_round_trip(case: tuple[str, set[int], int | None]) -> None:
    text, indices, limit = case
    spec = parse(text)
    assert spec.indices == tuple(sorted(indices)) and spec.limit == limit
    again = parse(spec.text())
    assert again == spec  # the short form reads back into the same indices and limit


@given(st.text(max_size=40))
def test_any_text_is_read_or_refused_with_a_message(text: str) -> None:
    try:
        spec = parse(text)
    except ArraySpecError as exc:
        assert str(exc)
    else:
        assert spec.count >= 1 and list(spec.indices) == sorted(set(spec.indices))
