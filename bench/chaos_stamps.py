"""What really ran, read from the stamps the chaos benchmark's jobs write (``bench/chaos.py``), and what is wrong
with it. Pure: files in, numbers out; no portal, no clock.

Every task process (one rank of one attempt of one job) appends lines to its own file in the stamp directory::

    <event> <job> <attempt> <rank> <node> <CUDA_VISIBLE_DEVICES> <epoch seconds with nanoseconds>

``event`` is ``start`` (first thing the process does), ``tick`` (once a second), ``term`` (it caught SIGTERM and
exits at once) or ``end`` (it finished its work and exits). ``node`` is read from the process's working directory,
which the agent that started it chose, so it says where the process really ran. One file is one *instance*.

The 1-second rule. An instance is *proven alive* from its first stamp to its last: it wrote both. Two instances
overlap only where their proven intervals intersect, measured with the stamps' sub-second times. So a hand-over
inside one wall-clock second (A's last stamp at 10.3, B's first at 10.8) is no overlap, while two processes both
proven alive in one second (A's last stamp at 10.8, B's first at 10.3) overlap for 0.5 s. The proven figures are
lower bounds: a process that was SIGKILLed (no ``term``/``end`` line) may have lived up to one stamp period past
its last stamp. The ``possible`` figures extend such instances to when a watcher polling every 0.1 s first saw the
process gone (``chaos_stack.DeathWatch``), or by ``slack`` seconds (the period plus the cost of a stamp) when it
has no such time, and are upper bounds. A fencing fix must bring the proven figures to 0 and should bring the
possible ones to 0 too.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

EVENTS = ("start", "tick", "term", "end")
CLEAN_ENDS = ("term", "end")
#: Seconds an instance that did not end cleanly may have lived past its last stamp (1 s period + a slow `date`).
DEFAULT_SLACK = 1.5


@dataclass
class Instance:
    """One task process, as its stamp file tells it."""

    path: str
    job: int
    attempt: int
    rank: int
    node: str
    gpus: tuple[int, ...]
    first: float
    last: float
    ended: str | None  # "term" or "end" when the last line says the process was about to exit; None otherwise
    lines: int
    events: dict[str, int] = field(default_factory=dict)
    died_by: float | None = None  # when a watcher first saw the process gone (an upper bound on its end)

    @property
    def ident(self) -> str:
        return f"job {self.job} attempt {self.attempt} rank {self.rank} on {self.node}"

    def span(self, slack: float = 0.0) -> tuple[float, float]:
        """The proven interval, or (``slack`` > 0) the possible one: to the last stamp plus ``slack`` or to when
        the process was seen gone, whichever is earlier, for a process that did not end cleanly."""
        if self.ended or not slack:
            return (self.first, self.last)
        end = self.last + slack
        if self.died_by is not None:
            end = min(end, max(self.died_by, self.last))
        return (self.first, end)


def parse_line(line: str) -> tuple[str, int, int, int, str, tuple[int, ...], float] | None:
    """One stamp line, or None when it is malformed (a process killed in the middle of a write)."""
    parts = line.split()
    if len(parts) != 7 or parts[0] not in EVENTS:
        return None
    try:
        gpus = () if parts[5] in ("-", "") else tuple(int(g) for g in parts[5].split(","))
        return parts[0], int(parts[1]), int(parts[2]), int(parts[3]), parts[4], gpus, float(parts[6])
    except ValueError:
        return None


def read_instance(path: Path) -> Instance | None:
    """The instance a stamp file describes; None for a file without one well-formed line."""
    instance: Instance | None = None
    for line in path.read_text(errors="replace").splitlines():
        parsed = parse_line(line)
        if parsed is None:
            continue
        event, job, attempt, rank, node, gpus, at = parsed
        if instance is None:
            instance = Instance(str(path.name), job, attempt, rank, node, gpus, at, at, None, 0)
        instance.first = min(instance.first, at)
        if at >= instance.last:  # the latest line says whether the process was about to exit
            instance.last = at
            instance.ended = event if event in CLEAN_ENDS else None
        instance.lines += 1
        instance.events[event] = instance.events.get(event, 0) + 1
    return instance


def read_stamps(directory: Path, deaths: Mapping[str, float] | None = None) -> list[Instance]:
    """Every instance in ``directory``; ``deaths`` (file name -> when its writer was seen gone) bounds the
    possible intervals (``chaos_stack.DeathWatch``)."""
    found = [i for i in (read_instance(p) for p in sorted(directory.iterdir()) if p.is_file()) if i is not None]
    for instance in found:
        instance.died_by = (deaths or {}).get(instance.path)
    return found


# --- overlaps -----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Overlap:
    """Two instances alive at once where they must not be."""

    where: str  # "job 17" or "chaos-2 GPU 3"
    a: str
    b: str
    start: float
    end: float
    jobs: tuple[int, int] = (0, 0)

    @property
    def seconds(self) -> float:
        return self.end - self.start


def union_length(intervals: Iterable[tuple[float, float]]) -> float:
    total, reach = 0.0, -math.inf
    for start, end in sorted(intervals):
        if end <= reach:
            continue
        total += end - max(start, reach)
        reach = end
    return total


def _overlaps(
    groups: Mapping[str, Sequence[Instance]],
    conflict: Callable[[Instance, Instance], bool],
    slack: float,
) -> list[Overlap]:
    found = []
    for where, members in groups.items():
        ordered = sorted(members, key=lambda i: i.first)
        for n, a in enumerate(ordered):
            a_start, a_end = a.span(slack)
            for b in ordered[n + 1 :]:
                b_start, b_end = b.span(slack)
                if b_start >= a_end:
                    break  # sorted by start: no later instance can meet a
                if conflict(a, b):
                    start, end = max(a_start, b_start), min(a_end, b_end)
                    if end > start:
                        found.append(Overlap(where, a.ident, b.ident, start, end, (a.job, b.job)))
    return found


def _seconds(overlaps: Iterable[Overlap]) -> float:
    """Total time in which at least one overlap holds, per place, summed over places."""
    by_place: dict[str, list[tuple[float, float]]] = defaultdict(list)
    for o in overlaps:
        by_place[o.where].append((o.start, o.end))
    return sum(union_length(spans) for spans in by_place.values())


def double_runs(instances: Sequence[Instance], slack: float = 0.0) -> list[Overlap]:
    """Two instances of one job alive at once that are not ranks of the same attempt: the job ran twice (two
    attempts at once, or one (attempt, rank) started twice)."""
    by_job: dict[str, list[Instance]] = defaultdict(list)
    for i in instances:
        by_job[f"job {i.job}"].append(i)
    return _overlaps(by_job, lambda a, b: a.attempt != b.attempt or a.rank == b.rank, slack)


def gpu_overlaps(instances: Sequence[Instance], slack: float = 0.0) -> list[Overlap]:
    """Two instances alive at once on one (node, GPU). Distinct instances always conflict: even two ranks of one
    attempt must not share a GPU."""
    by_gpu: dict[str, list[Instance]] = defaultdict(list)
    for i in instances:
        for gpu in i.gpus:
            by_gpu[f"{i.node} GPU {gpu}"].append(i)
    return _overlaps(by_gpu, lambda a, b: True, slack)


# --- tenant caps --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class CapSample:
    tenant: str
    at: int  # whole epoch second at which the sample was taken
    used: int
    cap: int
    jobs: tuple[int, ...]


def over_cap(
    instances: Sequence[Instance],
    tenant_of: Mapping[int, str],
    caps: Mapping[str, int | None],
    slack: float = 0.0,
) -> list[CapSample]:
    """Per-second samples (at each whole epoch second) in which a tenant's GPUs in use exceed its cap. An instance
    counts at instant ``s`` when ``s`` lies in its (proven, or with ``slack`` possible) interval; every instance
    counts, so a job running twice counts twice: these are the GPUs really busy."""
    used: dict[tuple[str, int], int] = defaultdict(int)
    holders: dict[tuple[str, int], list[int]] = defaultdict(list)
    for i in instances:
        tenant = tenant_of.get(i.job)
        if tenant is None or caps.get(tenant) is None:
            continue
        start, end = i.span(slack)
        for second in range(math.ceil(start), math.floor(end) + 1):
            used[(tenant, second)] += len(i.gpus)
            holders[(tenant, second)].append(i.job)
    samples = []
    for (tenant, second), gpus in sorted(used.items()):
        cap = caps[tenant]
        assert cap is not None
        if gpus > cap:
            samples.append(CapSample(tenant, second, gpus, cap, tuple(sorted(holders[(tenant, second)]))))
    return samples


# --- the summary --------------------------------------------------------------------------------------------


def seconds_figure(value: float) -> float:
    """Seconds for the report: milliseconds, but never a real overlap rounded down to 0."""
    return 0.0 if value <= 0 else max(0.001, round(value, 3))


@dataclass
class StampReport:
    instances: int
    lines: int
    double_runs: list[Overlap]
    double_runs_possible: list[Overlap]
    gpu_overlaps: list[Overlap]
    gpu_overlaps_possible: list[Overlap]
    over_cap: list[CapSample]
    over_cap_possible: list[CapSample]

    @property
    def double_run_seconds(self) -> float:
        return seconds_figure(_seconds(self.double_runs))

    @property
    def gpu_overlap_seconds(self) -> float:
        return seconds_figure(_seconds(self.gpu_overlaps))


def analyse(
    instances: Sequence[Instance],
    tenant_of: Mapping[int, str],
    caps: Mapping[str, int | None],
    slack: float = DEFAULT_SLACK,
) -> StampReport:
    return StampReport(
        instances=len(instances),
        lines=sum(i.lines for i in instances),
        double_runs=double_runs(instances),
        double_runs_possible=double_runs(instances, slack),
        gpu_overlaps=gpu_overlaps(instances),
        gpu_overlaps_possible=gpu_overlaps(instances, slack),
        over_cap=over_cap(instances, tenant_of, caps),
        over_cap_possible=over_cap(instances, tenant_of, caps, slack),
    )


def overlap_seconds(overlaps: Iterable[Overlap]) -> float:
    return seconds_figure(_seconds(overlaps))
