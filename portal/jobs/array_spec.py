"""The job-array index grammar, Slurm's ``--array`` syntax: which task indices an array has and how many may run at
once. Pure (no Django), so the rule is one function that the API, the form and the tests share.

Grammar: comma-separated terms, each an index (``7``), a range (``0-999``) or a stepped range (``0-15:4`` is 0, 4,
8, 12), then optionally ``%N``: at most N tasks of the array run at once. Indices are whole numbers from 0 to
:data:`MAX_ARRAY_INDEX`; terms may overlap (``1-5,3-9`` is 1 to 9) and come in any order. Examples: ``0-999``,
``1,3,5-9``, ``0-999%50``.
"""

from __future__ import annotations

import itertools
import re
from dataclasses import dataclass

#: The largest index an array may use: Slurm's ceiling for ``MaxArraySize`` (4,000,001, so indices up to 4,000,000).
MAX_ARRAY_INDEX = 4_000_000
#: The longest spec accepted, in characters: room for an explicit list of a few thousand indices (a rerun of the
#: failed ones), never a megabyte of text to parse inside a request.
MAX_SPEC_CHARS = 16_000
#: Digits in one number: enough for MAX_ARRAY_INDEX and any sane limit, and ``int()`` never sees a huge string.
_MAX_DIGITS = 9

# ASCII digits only: \d would also take other scripts' digits, which int() reads.
_TERM = re.compile(r"([0-9]+)(?:-([0-9]+)(?::([0-9]+))?)?")
_EXAMPLES = "e.g. 0-999, 1,3,5-9 or 0-15:4, optionally with %N to run at most N tasks at once (0-999%50)"


class ArraySpecError(ValueError):
    """The spec is not one the grammar allows; the message says why in words a user can act on."""


@dataclass(frozen=True, slots=True)
class ArraySpec:
    """A parsed array spec: its task indices (sorted, each once) and how many tasks may run at once (None: no
    limit)."""

    indices: tuple[int, ...]
    limit: int | None = None

    @property
    def count(self) -> int:
        return len(self.indices)

    @property
    def first(self) -> int:
        return self.indices[0]

    @property
    def last(self) -> int:
        return self.indices[-1]

    def text(self) -> str:
        """The spec in its shortest usual form (``0-999%50``, ``1,3,5-9``): what :func:`parse_array_spec` reads back
        into the same indices and limit."""
        body = format_indices(self.indices)
        return body if self.limit is None else f"{body}%{self.limit}"


def _number(text: str, what: str) -> int:
    if len(text) > _MAX_DIGITS:
        raise ArraySpecError(f"{what} {text[:12]}… is too large; indices go up to {MAX_ARRAY_INDEX:,}")
    return int(text)


def _shown(term: str) -> str:
    """A term quoted in a message: cut short, so a refusal never echoes kilobytes back."""
    return repr(term if len(term) <= 40 else term[:40] + "…")


def _term(raw: str) -> tuple[int, int, int]:
    """One term as ``(start, stop, step)``, stop inclusive; refused with the reason when it is not one."""
    term = raw.strip()
    if not term:
        raise ArraySpecError(f"an empty term between commas; write indices and ranges, {_EXAMPLES}")
    match = _TERM.fullmatch(term)
    if match is None:
        if term.startswith("-") or re.search(r"(^|[,:-])-[0-9]", term):
            raise ArraySpecError(f"{_shown(term)}: array indices cannot be negative; they start at 0")
        raise ArraySpecError(f"{_shown(term)} is not an index, a range or a stepped range; write {_EXAMPLES}")
    start = _number(match.group(1), "index")
    stop = start if match.group(2) is None else _number(match.group(2), "index")
    step = 1 if match.group(3) is None else _number(match.group(3), "step")
    if stop < start:
        raise ArraySpecError(f"the range {start}-{stop} goes down; write it low to high ({stop}-{start})")
    if step < 1:
        raise ArraySpecError(f"{_shown(term)}: the step after ':' must be at least 1")
    return start, stop, step


def _size(term: tuple[int, int, int]) -> int:
    start, stop, step = term
    return (stop - start) // step + 1


def _too_many(count: int | str, max_tasks: int) -> ArraySpecError:
    return ArraySpecError(f"this makes {count} tasks; an array may have at most {max_tasks:,}")


def parse_array_spec(text: str, *, max_tasks: int, max_index: int = MAX_ARRAY_INDEX) -> ArraySpec:
    """Read ``text`` (``0-999%50``): its indices, sorted and each once, and its limit.

    Refused with :class:`ArraySpecError` (its message names the problem): an empty spec, a term that is no index or
    range, a negative index, a range that goes down, a step or limit below 1, an index above ``max_index``, more than
    ``max_tasks`` distinct indices, a spec longer than :data:`MAX_SPEC_CHARS`. The size is checked before any index
    list is built, so ``0-10000000`` is refused at once, not after building ten million numbers.
    """
    text = (text or "").strip()
    if not text:
        raise ArraySpecError(f"give the array's task indices, {_EXAMPLES}")
    if len(text) > MAX_SPEC_CHARS:
        raise ArraySpecError(f"the spec is longer than {MAX_SPEC_CHARS:,} characters; use ranges (0-999) for runs")
    body, percent, limit_text = text.partition("%")
    limit: int | None = None
    if percent:
        limit_text = limit_text.strip()
        if not re.fullmatch(r"[0-9]+", limit_text):
            shown = _shown("%" + limit_text)
            raise ArraySpecError(f"{shown} is not a limit: write %N with N a whole number, e.g. 0-999%50")
        limit = _number(limit_text, "limit")
        if limit < 1:
            raise ArraySpecError(f"the limit %{limit} would never run a task: it must be at least 1")
    terms = {_term(raw) for raw in body.split(",")}
    for term in terms:
        if _size(term) > max_tasks:
            raise _too_many(f"{_size(term):,}", max_tasks)
        if term[1] > max_index:
            raise ArraySpecError(f"index {term[1]:,} is above the largest allowed, {max_index:,}")
    return ArraySpec(indices=_union(sorted(terms), max_tasks=max_tasks), limit=limit)


def _union(terms: list[tuple[int, int, int]], *, max_tasks: int) -> tuple[int, ...]:
    """The indices the terms name, sorted, each once; refused past ``max_tasks``. Each term is at most
    ``max_tasks`` long (checked by the caller), so work stays bounded by the terms' total size."""
    if len(terms) == 1:
        start, stop, step = terms[0]
        return tuple(range(start, stop + 1, step))
    if sum(_size(t) for t in terms) <= max_tasks:
        return tuple(sorted(set(itertools.chain.from_iterable(range(a, b + 1, s) for a, b, s in terms))))
    # Overlapping terms that might still fit: mark them in a byte mask (C loops, no Python per index) and stop as
    # soon as the union is too large.
    low = min(t[0] for t in terms)
    mask = bytearray(max(t[1] for t in terms) - low + 1)
    count = 0
    for start, stop, step in terms:
        window = slice(start - low, stop - low + 1, step)
        size = _size((start, stop, step))
        count += size - mask[window].count(1)
        if count > max_tasks:
            raise _too_many(f"more than {max_tasks:,}", max_tasks)
        mask[window] = b"\x01" * size
    return tuple(itertools.compress(range(low, low + len(mask)), mask))


def format_indices(indices: tuple[int, ...] | list[int]) -> str:
    """Sorted distinct indices as a spec body: runs as ``a-b``, evenly spaced runs of three or more as ``a-b:s``,
    the rest one by one (``0-3,7,10-20:5``)."""
    parts: list[str] = []
    i, n = 0, len(indices)
    while i < n:
        if i + 1 < n:
            step = indices[i + 1] - indices[i]
            j = i + 1
            while j + 1 < n and indices[j + 1] - indices[j] == step:
                j += 1
            if step != 1 and j + 1 < n and indices[j + 1] - indices[j] == 1:
                j -= 1  # leave the start of a run of consecutive indices to that run: 1,3,5-9 not 1-5:2,6-9
            if step == 1 or j - i >= 2:
                parts.append(f"{indices[i]}-{indices[j]}" + (f":{step}" if step != 1 else ""))
                i = j + 1
                continue
        parts.append(str(indices[i]))
        i += 1
    return ",".join(parts)
