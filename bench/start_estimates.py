"""How right are start estimates? Replays traces and scores the live forecast against the starts that happened.

Each trace is replayed in the simulator (``scheduling.sim``) under the live policy and placement (``fifo`` and
``topology`` by default: the portal's defaults). Every ``--every`` seconds of simulated time the benchmark builds the
snapshot the live loop would build at that instant (nodes with their free GPUs, running jobs with their GPUs and
start times, waiting jobs) and asks the same code the live loop asks, ``scheduling.core.forecast.forecast_starts``,
for every waiting job's start. Run times are what the live loop knows, not the trace's: the live rule
(``remaining_run_time``: time limit, else the mean of similar finished jobs from ``DurationPredictor``, learned only
from jobs that finished before that instant). Each estimate is then compared with when that job really started in
the replay.

Reported: error = predicted - actual (positive: the job started earlier than said); the median and p90 of |error|
in time and relative to the actual wait from that instant, and the bias (median signed error), for the fresh forecast
and for what a page shows under the live display rule (``scheduling.core.start_range.keeps_shown``), by how far
ahead the shown estimate looks and by the job's whole wait; how often the range of ``scheduling.core.start_range``
held the real start; and how often the shown estimate moves, and how right it is, under five display rules (every
change of a minute, as before; only when the new forecast leaves the shown range; when it moved 10, 25 or 50 % of
the wait, the last being the live rule).

``--write-calibration`` fits the range table (p10 and p90 of actual / shown wait per band of shown wait, every trace
of the run weighing the same in a band) and writes it into ``scheduling/core/start_range.py``, between its markers.

Run: ``.venv/bin/python bench/start_estimates.py`` (the Philly-derived Poisson trace on 8 x 8 GPUs and the
Tiresias 60-job trace on 2 x 4; about a minute on one core). Size: ``--jobs N`` (first N jobs of each trace),
``--every S`` (seconds of simulated time between forecasts; by default per trace its submission span / 4000, between
30 s, the live period, and 600 s), ``--trace PATH@NODESxGPUS`` (repeatable, replaces the defaults; a history export
from ``corral history`` works). Figures: docs/benchmarks.md, "Start estimate accuracy".
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from bisect import bisect_left, bisect_right, insort
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from scheduling.core import start_range as calibration  # noqa: E402
from scheduling.core.duration_predict import DurationPredictor  # noqa: E402
from scheduling.core.duration_predict import _groups as duration_groups  # noqa: E402  (the live groups, for an experiment)
from scheduling.core.engine import needs_preemptive_walk  # noqa: E402
from scheduling.core.forecast import forecast_starts, remaining_run_time, round_budget  # noqa: E402
from scheduling.core.model import FinishedJob, GpuSlot, JobState, JobView, NodeView, Snapshot  # noqa: E402
from scheduling.core.placement import PlacementModel, resolve_placement  # noqa: E402
from scheduling.core.policies import Policy, resolve_policy  # noqa: E402
from scheduling.core.start_range import Band, keeps_shown, quantile, start_range  # noqa: E402
from scheduling.sim.simulator import Cluster, can_ever_run, simulate  # noqa: E402
from scheduling.sim.trace import TraceJob, read_trace  # noqa: E402

TRACES = ROOT.parent / "shared" / "traces"
DEFAULT_TRACES = (
    f"{TRACES / 'philly_poisson_n1000_g64_load0.9_seed0.csv.gz'}@8x8",
    f"{TRACES / 'tiresias_60job.csv'}@2x4",
)
#: Bands of the reports (seconds): by predicted wait (how far ahead an estimate looks) and by the job's whole wait.
LEAD_BUCKETS = (300.0, 900.0, 3600.0, 4 * 3600.0, 12 * 3600.0, 86_400.0, math.inf)
WAIT_BUCKETS = (900.0, 3600.0, 4 * 3600.0, 12 * 3600.0, 86_400.0, math.inf)


@dataclass(frozen=True, slots=True)
class Estimate:
    """One waiting job's forecast at one instant, and (filled in after the replay) its real start."""

    job: int
    at: float  # when the estimate was made (the reader's now)
    queued: float  # when the job entered the queue it waits in
    predicted: float | None  # the expected start; None when the outlook gave no time
    outlook: str
    actual: float = math.nan  # the job's next start after ``at``
    shown: float | None = None  # what the page shows then under the live display rule (``keeps_shown``)


class ResidualLife:
    """An experiment, not the live rule (``--runtime residual`` or ``median``). The live rule gives a running job that
    has run ``x`` seconds "its group's mean minus ``x``", which heavy-tailed run times make too short for a job that
    has run a while, and too long for most jobs. ``residual`` gives instead the mean of ``d - x`` over similar
    finished jobs that ran longer than ``x`` (their residual life); ``median`` the median of it, and a waiting job the
    median of its group instead of the mean. Groups and their order are ``DurationPredictor``'s; a group needs
    :attr:`MIN_LONGER` such jobs, else the live rule answers."""

    MIN_LONGER = 5

    def __init__(self, live: DurationPredictor, *, median: bool) -> None:
        self.live = live
        self.median = median
        self.durations: dict[tuple[str, ...], list[float]] = defaultdict(list)
        self.suffix: dict[tuple[str, ...], list[float]] = {}

    def observe(self, record: FinishedJob) -> None:
        for group in duration_groups(record.user, record.name, record.gpus):
            insort(self.durations[group], record.executed_time)
            self.suffix.pop(group, None)

    def remaining(self, job: JobView, now: float) -> float | None:
        if job.time_limit is not None:
            return remaining_run_time(job, now=now, predictor=self.live)
        ran = job.executed_at(now) if job.state == JobState.RUNNING else job.executed_time
        for group in duration_groups(job.user, job.name, job.gpus):
            durations = self.durations.get(group)
            if not durations:
                continue
            k = bisect_right(durations, ran)
            longer = len(durations) - k
            if longer < self.MIN_LONGER:
                continue
            if self.median:
                return quantile(durations[k:], 0.5) - ran
            if job.state != JobState.RUNNING:
                break
            suffix = self.suffix.get(group)
            if suffix is None:
                suffix = self.suffix[group] = [0.0] * (len(durations) + 1)
                for i in range(len(durations) - 1, -1, -1):
                    suffix[i] = suffix[i + 1] + durations[i]
            return suffix[k] / longer - ran
        return remaining_run_time(job, now=now, predictor=self.live)


class Probe:
    """A simulator observer (``scheduling.sim.simulator.SimObserver``) that forecasts at regular instants.

    Hooks arrive in time order; the first hook of a new instant still sees the state left by the previous one, so
    the samples due before it are taken then, with the cluster as it stood between the two events.
    """

    def __init__(
        self,
        jobs: Sequence[TraceJob],
        cluster: Cluster,
        policy: Policy,
        placement: PlacementModel,
        every: float,
        runtime: str = "live",
    ) -> None:
        pool = cluster.free_pool()
        self.nodes = [
            (pool.names[i], pool.racks[i], tuple(pool.free[i]), pool.capacity[i]) for i in range(len(pool.names))
        ]
        self.jobs = list(jobs)
        self.index = {t.job_id: i for i, t in enumerate(self.jobs)}
        self.policy, self.placement, self.every = policy, placement, every
        self.running: dict[int, tuple[tuple[GpuSlot, ...], float]] = {}  # job -> (its GPUs, when this run began)
        self.executed: dict[int, float] = defaultdict(float)  # seconds run by finished runs of each job
        self.queued: dict[int, float] = {}  # when each waiting job entered the queue
        self.waiting: list[JobView] = []
        self.predictor = DurationPredictor()
        self.residual = None if runtime == "live" else ResidualLife(self.predictor, median=runtime == "median")
        self.next_sample = self.jobs[0].submit_time if self.jobs else 0.0
        self.estimates: list[Estimate] = []
        self.starts: dict[int, list[float]] = defaultdict(list)
        self.forecasts = 0
        self.forecast_seconds = 0.0

    # -- SimObserver ----------------------------------------------------------------------------------------------
    def started(self, job_id: str, slots: tuple[GpuSlot, ...], now: float) -> None:
        self._advance(now)
        i = self.index[job_id]
        self.running[i] = (slots, now)
        self.starts[i].append(now)

    def stopped(self, job_id: str, slots: tuple[GpuSlot, ...], now: float, *, finished: bool) -> None:
        self._advance(now)
        i = self.index[job_id]
        _, began = self.running.pop(i)
        self.executed[i] += now - began
        self.queued[i] = now  # a preempted job waits again from now (a finished one never reads it)
        if finished:
            t = self.jobs[i]
            record = FinishedJob(
                id=i, tenant=t.tenant, user=t.user, gpus=t.gpus, submit_time=t.submit_time, finish_time=now,
                executed_time=self.executed[i], name=t.name, model=t.model,
            )  # fmt: skip
            self.predictor.observe(record)
            if self.residual is not None:
                self.residual.observe(record)

    def round_done(self, now: float, free_gpus: int, waiting: Sequence[JobView]) -> None:
        self._advance(now)
        # What the live loop knows of a waiting job: never its true duration.
        self.waiting = [replace(v, duration=None) for v in waiting]

    # -- sampling -------------------------------------------------------------------------------------------------
    def _advance(self, now: float) -> None:
        while self.next_sample < now:
            if self.waiting:
                self._sample(self.next_sample)
            self.next_sample += self.every

    def _snapshot(self, now: float) -> Snapshot:
        held = {(s.node, s.gpu) for slots, _ in self.running.values() for s in slots}
        nodes = tuple(
            NodeView(
                name=name, total_gpus=capacity, free_gpus=tuple(g for g in ids if (name, g) not in held), rack=rack
            )
            for name, rack, ids, capacity in self.nodes
        )
        running = []
        for i, (slots, began) in self.running.items():
            t = self.jobs[i]
            done = self.executed[i]
            running.append(
                JobView(id=i, tenant=t.tenant, user=t.user, gpus=t.gpus, submit_time=t.submit_time,
                        state=JobState.RUNNING, allocation=slots, attained_service=t.gpus * done, executed_time=done,
                        last_started=began, last_queued=self.queued.get(i, t.submit_time), name=t.name,
                        model=t.model, service_at=began)
            )  # fmt: skip
        return Snapshot(nodes=nodes, jobs=(*running, *self.waiting))

    def _sample(self, now: float) -> None:
        snapshot = self._snapshot(now)
        if self.residual is None:
            remaining = {v.id: remaining_run_time(v, now=now, predictor=self.predictor) for v in snapshot.jobs}
        else:
            remaining = {v.id: self.residual.remaining(v, now) for v in snapshot.jobs}
        began = time.perf_counter()
        answers = forecast_starts(
            snapshot,
            now=now,
            remaining=remaining,
            policy=self.policy,
            placement=self.placement,
            max_rounds=round_budget(len(snapshot.jobs), preemptive=needs_preemptive_walk(self.policy)),
        )
        self.forecast_seconds += time.perf_counter() - began
        self.forecasts += 1
        for view in self.waiting:
            answer = answers[view.id]
            i = int(view.id)
            queued = self.queued.get(i, self.jobs[i].submit_time)
            self.estimates.append(Estimate(i, now, queued, answer.at, answer.outlook.value))

    def finish(self) -> list[Estimate]:
        """Every estimate with the start it was about: the job's first start after the estimate was made."""
        out = []
        for e in self.estimates:
            starts = self.starts[e.job]
            k = bisect_left(starts, e.at)
            out.append(replace(e, actual=starts[k] if k < len(starts) else math.nan))
        return out


@dataclass
class Replay:
    name: str
    jobs: int
    every: float
    estimates: list[Estimate] = field(default_factory=list)
    forecasts: int = 0
    forecast_seconds: float = 0.0
    wall: float = 0.0


def replay(
    path: str,
    cluster: Cluster,
    *,
    policy: str,
    placement: str,
    every: float | None,
    limit: int | None,
    runtime: str = "live",
) -> Replay:
    trace = read_trace(path)
    if limit:
        trace = trace[:limit]
    runnable = [t for t in trace if can_ever_run(t, cluster, {})]
    if every is None:
        span = runnable[-1].submit_time - runnable[0].submit_time if runnable else 0.0
        every = min(600.0, max(30.0, span / 4000))
    live_policy, live_placement = resolve_policy(policy), resolve_placement(placement)
    probe = Probe(runnable, cluster, live_policy, live_placement, every, runtime)
    began = time.perf_counter()
    simulate(runnable, live_policy, cluster=cluster, placement=live_placement, observer=probe)
    out = Replay(Path(path).name, len(runnable), every, probe.finish(), probe.forecasts, probe.forecast_seconds)
    out.wall = time.perf_counter() - began
    return out


# -- statistics ---------------------------------------------------------------------------------------------------
#: Display rules compared: does the shown estimate stay although the forecast now says ``new``?
KeepRule = Callable[[float, float, float], bool]
LIVE_RULE = "when moved ≥ 50 % of the wait (live)"


def rules(bands: Sequence[Band]) -> dict[str, KeepRule]:
    def inside_range(shown: float, new: float, now: float) -> bool:
        r = start_range(shown, now=now, table=bands)
        return r is not None and r.earliest <= new <= r.latest

    return {
        "every change ≥ 1 min (before)": lambda shown, new, now: abs(new - shown) < 60.0,
        "only when outside the shown range": inside_range,
        "when moved ≥ 10 % of the wait": lambda shown, new, now: abs(new - shown) < max(60.0, 0.1 * (new - now)),
        "when moved ≥ 25 % of the wait": lambda shown, new, now: abs(new - shown) < max(60.0, 0.25 * (new - now)),
        LIVE_RULE: lambda shown, new, now: keeps_shown(shown, new, now=now),
    }


def shown_under(estimates: Sequence[Estimate], keep: KeepRule) -> tuple[list[Estimate], list[int]]:
    """The estimates with ``shown`` set as a page following ``keep`` would show them, one wait at a time, and the
    number of times the shown estimate moved in each wait."""
    waits: dict[tuple[int, float], list[Estimate]] = defaultdict(list)
    for e in estimates:
        waits[(e.job, e.actual)].append(e)
    out: list[Estimate] = []
    moves: list[int] = []
    for seq in waits.values():
        seq.sort(key=lambda e: e.at)
        shown: float | None = None
        n = 0
        for e in seq:
            if e.predicted is None:
                continue
            if shown is None:
                shown = e.predicted
            elif not keep(shown, e.predicted, e.at):
                shown = e.predicted
                n += 1
            out.append(replace(e, shown=shown))
        if shown is not None:
            moves.append(n)
    return out, moves


def fmt_s(seconds: float) -> str:
    """Seconds as people read them: 45 s, 12 min, 3.4 h, 2.1 d."""
    if math.isnan(seconds):
        return "-"
    sign = "-" if seconds < 0 else ""
    s = abs(seconds)
    if s < 90:
        return f"{sign}{s:.0f} s"
    if s < 5400:
        return f"{sign}{s / 60:.0f} min"
    if s < 2 * 86_400:
        return f"{sign}{s / 3600:.1f} h"
    return f"{sign}{s / 86_400:.1f} d"


def bucket_label(edges: Sequence[float], k: int) -> str:
    low = 0.0 if k == 0 else edges[k - 1]
    high = edges[k]
    return f"≥ {fmt_s(low)}" if math.isinf(high) else f"{fmt_s(low)} – {fmt_s(high)}".replace("0 s – ", "0 – ")


def said(e: Estimate, shown: bool) -> float:
    value = e.shown if shown else e.predicted
    assert value is not None
    return value


def error_row(group: Sequence[Estimate], *, shown: bool = True) -> list[str]:
    """n, bias, median and p90 of |error|, median and p90 of |error| / actual wait from the estimate's instant."""
    if not group:
        return ["0", "-", "-", "-", "-", "-"]
    errors = sorted(said(e, shown) - e.actual for e in group)
    absolute = sorted(abs(x) for x in errors)
    relative = sorted(abs(said(e, shown) - e.actual) / max(e.actual - e.at, calibration.MIN_LEAD) for e in group)
    return [
        str(len(errors)),
        fmt_s(quantile(errors, 0.5)),
        fmt_s(quantile(absolute, 0.5)),
        fmt_s(quantile(absolute, 0.9)),
        f"{quantile(relative, 0.5):.0%}",
        f"{quantile(relative, 0.9):.0%}",
    ]


def table(title: str, header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    lines = [f"**{title}**", "", "| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines) + "\n"


def lead_of(e: Estimate) -> float:
    """How far ahead the shown estimate looks from the instant it is read."""
    return said(e, True) - e.at


def by_bucket(
    estimates: Sequence[Estimate], edges: Sequence[float], key: Callable[[Estimate], float]
) -> list[list[str]]:
    groups: list[list[Estimate]] = [[] for _ in edges]
    for e in estimates:
        groups[min(bisect_right(edges, key(e)), len(edges) - 1)].append(e)
    return [[bucket_label(edges, k), *error_row(g)] for k, g in enumerate(groups) if g]


def coverage_rows(estimates: Sequence[Estimate], bands: Sequence[Band]) -> list[list[str]]:
    """Per predicted-wait band: how often the real start fell inside the range, and the range's median width."""
    groups: list[list[Estimate]] = [[] for _ in LEAD_BUCKETS]
    for e in estimates:
        groups[min(bisect_right(LEAD_BUCKETS, lead_of(e)), len(LEAD_BUCKETS) - 1)].append(e)
    rows = []
    total = inside_all = 0
    for k, group in enumerate(groups):
        if not group:
            continue
        inside, widths = 0, []
        for e in group:
            r = start_range(said(e, True), now=e.at, table=bands)
            assert r is not None
            inside += r.earliest <= e.actual <= r.latest
            widths.append(r.latest - r.earliest)
        widths.sort()
        total += len(group)
        inside_all += inside
        row = [
            bucket_label(LEAD_BUCKETS, k),
            str(len(group)),
            f"{inside / len(group):.0%}",
            fmt_s(quantile(widths, 0.5)),
        ]
        rows.append(row)
    rows.append(["all", str(total), f"{inside_all / max(1, total):.0%}", ""])
    return rows


def ratio_rows(estimates: Sequence[Estimate]) -> list[list[str]]:
    """Per predicted-wait band: the spread of actual wait / shown wait (p10, median, p90) and how often the job
    started within twice the shown wait or more than ten times later. Where a band is two kinds of wait (on time,
    or hours late behind a job that overran), this says so where p10 and p90 alone cannot (docs/scheduling.md, "How
    a short wait reads")."""
    groups: list[list[float]] = [[] for _ in LEAD_BUCKETS]
    for e in estimates:
        k = min(bisect_right(LEAD_BUCKETS, lead_of(e)), len(LEAD_BUCKETS) - 1)
        groups[k].append(calibration.lead_ratio(lead_of(e), e.actual - e.at))
    rows = []
    for k, ratios in enumerate(groups):
        if not ratios:
            continue
        ratios.sort()
        n = len(ratios)
        rows.append([
            bucket_label(LEAD_BUCKETS, k), str(n), *(f"{quantile(ratios, q):.2f}" for q in (0.1, 0.5, 0.9)),
            f"{sum(x <= 2 for x in ratios) / n:.0%}", f"{sum(x > 10 for x in ratios) / n:.0%}",
        ])  # fmt: skip
    return rows


def parse_trace_arg(value: str) -> tuple[str, Cluster]:
    path, _, shape = value.rpartition("@")
    nodes, _, gpus = shape.partition("x")
    if not path or not nodes.isdigit() or not gpus.isdigit():
        raise SystemExit(f"--trace {value!r}: write PATH@NODESxGPUS, e.g. trace.csv@8x8")
    return path, Cluster(int(nodes), int(gpus))


HEADER = ["", "estimates", "bias (median pred − actual)", "median abs error", "p90 abs error",
          "median abs error / actual wait", "p90"]  # fmt: skip


def report(r: Replay, bands: Sequence[Band], which: str) -> str:
    """One replay's tables, as docs/benchmarks.md shows them."""
    answered = [e for e in r.estimates if not math.isnan(e.actual)]
    outlooks: dict[str, int] = defaultdict(int)
    for e in answered:
        outlooks[e.outlook] += 1
    timed = [e for e in answered if e.predicted is not None]
    shown, _ = shown_under(timed, rules(bands)[LIVE_RULE])
    waits = len({(e.job, e.actual) for e in answered})
    out = [
        f"### {r.name}: {r.jobs} jobs, {waits} waits, {len(answered)} estimates (a forecast every {r.every:.0f} s; "
        f"{', '.join(f'{k} {v}' for k, v in sorted(outlooks.items()))})\n",
        table(
            "All estimates",
            HEADER,
            [["fresh forecast", *error_row(shown, shown=False)], ["as shown (live rule)", *error_row(shown)]],
        ),
        table(
            "As shown, by how far ahead it looks (shown start − now)", HEADER, by_bucket(shown, LEAD_BUCKETS, lead_of)
        ),
        table(
            "As shown, by the job's whole wait", HEADER, by_bucket(shown, WAIT_BUCKETS, lambda e: e.actual - e.queued)
        ),
        table(
            f"The range ({which}): share of real starts inside it",
            ["shown start − now", "estimates", "inside", "median width"],
            coverage_rows(shown, bands),
        ),
        table(
            "Actual wait / shown wait, by how far ahead it looks",
            ["shown start − now", "estimates", "p10", "median", "p90", "within 2×", "over 10×"],
            ratio_rows(shown),
        ),
    ]
    rows = []
    for label, keep in rules(bands).items():
        seen, moves = shown_under(timed, keep)
        moves.sort()
        absolute = sorted(abs(said(e, True) - e.actual) for e in seen)
        rows.append([label, f"{sum(moves) / max(1, len(moves)):.1f}", f"{quantile(moves, 0.9):.0f}",
                     fmt_s(quantile(absolute, 0.5)), fmt_s(quantile(absolute, 0.9))])  # fmt: skip
    out.append(
        table(
            "When the shown estimate moves",
            ["it moves", "moves per wait (mean)", "p90", "median abs error", "p90 abs error"],
            rows,
        )
    )
    return "\n".join(out)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--trace", action="append", help="PATH@NODESxGPUS (repeatable; default: the shared traces)")
    parser.add_argument("--jobs", type=int, default=None, help="replay only the first N jobs of each trace")
    parser.add_argument(
        "--every",
        type=float,
        default=None,
        help="seconds of simulated time between forecasts (default: per trace, "
        "its submission span / 4000, between 30 s, the live refresh period, and 600 s)",
    )
    parser.add_argument("--policy", default="fifo", help="the live policy (CORRAL_POLICY)")
    parser.add_argument("--placement", default="topology", help="the live placement (CORRAL_PLACEMENT)")
    parser.add_argument(
        "--runtime",
        choices=("live", "residual", "median"),
        default="live",
        help="run-time estimates: the live rule, or an experiment (similar jobs' residual life; see ResidualLife)",
    )
    parser.add_argument("--write-calibration", action="store_true", help="write the fitted range table into the core")
    parser.add_argument(
        "--module", default=str(ROOT / "scheduling" / "core" / "start_range.py"), help=argparse.SUPPRESS
    )
    args = parser.parse_args(argv)
    if args.write_calibration and args.runtime != "live":
        parser.error("--write-calibration calibrates the live forecast: leave --runtime at live")

    replays = []
    for value in args.trace or DEFAULT_TRACES:
        path, cluster = parse_trace_arg(value)
        r = replay(
            path,
            cluster,
            policy=args.policy,
            placement=args.placement,
            every=args.every,
            limit=args.jobs,
            runtime=args.runtime,
        )
        replays.append(r)
        done = f"{r.forecasts} forecasts ({r.forecast_seconds:.1f} s of {r.wall:.1f} s), {len(r.estimates)} estimates"
        print(f"{r.name} on {cluster.describe()}: {r.jobs} jobs, {done}", file=sys.stderr)

    # The range is fitted to what readers see: the shown estimate, under the live display rule.
    # Each trace weighs the same within a band (``fit_calibration``), however often it was sampled.
    sources: dict[str, list[tuple[float, float]]] = {}
    for i, r in enumerate(replays):
        timed = [e for e in r.estimates if not math.isnan(e.actual) and e.predicted is not None]
        shown, _ = shown_under(timed, rules(())[LIVE_RULE])
        sources[f"{i}:{r.name}"] = [(lead_of(e), e.actual - e.at) for e in shown]
    fitted = calibration.fit_calibration(sources)
    stamp = f"{', '.join(r.name for r in replays)}; {args.policy}, {args.placement}; {datetime.now(UTC):%Y-%m-%d}"
    if args.write_calibration:
        module = Path(args.module)
        module.write_text(calibration.with_calibration(module.read_text(), fitted, calibrated_on=stamp))
        print(f"wrote {len(fitted)} bands to {module}", file=sys.stderr)
    stored = bool(calibration.CALIBRATION) and not args.write_calibration
    bands = calibration.CALIBRATION if stored else fitted
    which = "stored in scheduling/core/start_range.py" if stored else "fitted in this run"

    today = f"{datetime.now(UTC):%Y-%m-%d}"
    print(f"Start estimate accuracy: {args.policy}, {args.placement}, {args.runtime} run times; {today}.\n")
    for r in replays:
        print(report(r, bands, which))
    band_rows = [
        [bucket_label([b.below for b in fitted], k), str(b.samples), f"{b.low:.2f}", f"{b.high:.2f}"]
        for k, b in enumerate(fitted)
    ]
    print(
        table(
            "Range table fitted in this run (actual wait / shown wait, p10 and p90)",
            ["shown start − now", "estimates", "p10", "p90"],
            band_rows,
        )
    )
    unanswered = sum(1 for r in replays for e in r.estimates if math.isnan(e.actual))
    if unanswered:
        print(f"{unanswered} estimates were about jobs that never started", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
