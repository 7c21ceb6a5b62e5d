"""The goals of issue #16 and the markdown report of ``bench/api_load.py`` (pure: no processes, no Django).

Every figure the benchmark judges is shown next to its goal with PASS or MISS; figures without a goal are shown
as they are. ``None`` (a phase not run, or a feature not there yet) reads "not available" and is no verdict.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

#: The goals (issue #16): 2-core machine, generator on it.
SUBMIT_RATE = 500.0  # submissions/s at c = 32
SUBMIT_P99_MS = 200.0
SUBMIT_LEVEL = 32
ARRAY_ACCEPT_S = 2.0  # a 10,000-task array
ARRAY_TASKS_PER_S = 20_000.0
ROUND_P99_MS = 1000.0  # at 50k pending on 10k GPUs
LIST_P50_MS = 30.0
IDLE_CPU_PERCENT = 10.0


@dataclass(frozen=True)
class Row:
    figure: str
    value: str
    goal: str = ""
    verdict: str = ""  # PASS, MISS or ""


def verdict(ok: bool | None) -> str:
    return "" if ok is None else ("PASS" if ok else "MISS")


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100); NaN for none."""
    if not values:
        return math.nan
    ordered = sorted(values)
    return ordered[min(len(ordered), max(1, math.ceil(q / 100 * len(ordered)))) - 1]


def fmt(value: float | None, digits: int = 1) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "n/a"
    return f"{value:,.{digits}f}"


# --- phase a ----------------------------------------------------------------------------------------------------------
def submit_failures(level: dict[str, Any]) -> int:
    """Answers other than 201, plus requests that got no answer (connection errors, timeouts)."""
    gen = level["load"]
    return int(gen["answered"] - gen["statuses"].get("201", 0) + sum(gen["errors"].values()))


def submit_ok(level: dict[str, Any]) -> bool:
    gen = level["load"]
    p99 = gen["latency_ms"]["p99"]
    return bool(
        gen["rate_per_s"] >= SUBMIT_RATE and p99 is not None and p99 < SUBMIT_P99_MS and submit_failures(level) == 0
    )


def submit_rows(levels: list[dict[str, Any]]) -> list[Row]:
    rows = []
    for level in levels:
        gen = level["load"]
        lat = gen["latency_ms"]
        judged = level["concurrency"] == SUBMIT_LEVEL
        rounds = level.get("rounds") or {}
        rows.append(
            Row(
                f"`POST /api/v1/jobs/` c={level['concurrency']}",
                f"{fmt(gen['rate_per_s'])}/s; p50 {fmt(lat['p50'])} / p95 {fmt(lat['p95'])} / p99 {fmt(lat['p99'])}"
                f" ms; {submit_failures(level)} not 201; worker {fmt(level['cpu_s']['worker'])} CPU-s,"
                f" web {fmt(level['cpu_s']['web'])}, PostgreSQL {fmt(level['cpu_s']['postgres'])},"
                f" generator {fmt(gen['generator_cpu_s'])}, other processes {fmt(level['cpu_s'].get('others'))}"
                f" in {fmt(gen['elapsed_s'])} s;"
                f" {rounds.get('count', 'n/a')} rounds (p50 {fmt(rounds.get('p50_ms'), 0)} ms);"
                f" Redis queue after: {level['queue_after']}",
                f"≥ {SUBMIT_RATE:.0f}/s, p99 < {SUBMIT_P99_MS:.0f} ms, 0 errors" if judged else "",
                verdict(submit_ok(level)) if judged else "",
            )
        )
    return rows


# --- phase b ----------------------------------------------------------------------------------------------------------
def array_rows(array: dict[str, Any]) -> list[Row]:
    if not array.get("available"):
        return [Row(f"{array.get('size', 10_000):,}-task array", f"not available: {array.get('why', '')}")]
    accepts = [r["seconds"] for r in array["reps"]]
    tasks = int(array["reps"][0].get("tasks", array["size"]))
    median = percentile(accepts, 50)
    rate = tasks / median if median > 0 else math.nan
    return [
        Row(
            f'{tasks:,}-task array `"array": "{array["spec"]}"`, accept time (median of {len(accepts)})',
            f"{fmt(median, 3)} s (each: {', '.join(fmt(a, 3) for a in accepts)})",
            f"< {ARRAY_ACCEPT_S:.0f} s",
            verdict(median < ARRAY_ACCEPT_S),
        ),
        Row(
            "array tasks accepted per second",
            f"{fmt(rate, 0)}/s",
            f"≥ {ARRAY_TASKS_PER_S:,.0f}/s",
            verdict(rate >= ARRAY_TASKS_PER_S),
        ),
    ]


# --- phase c ----------------------------------------------------------------------------------------------------------
def scale_rows(scale: dict[str, Any]) -> list[Row]:
    seed = scale["seed"]
    rows = [
        Row(
            "seeded",
            f"{seed['gpus']:,} GPUs on {seed['nodes']:,} nodes, {seed['busy_gpus']:,} busy ({seed['running_jobs']:,}"
            f" running jobs), {seed['pending_jobs']:,} pending, {seed['finished_jobs']:,} finished, in"
            f" {fmt(seed['seconds'])} s",
        )
    ]
    fill = scale.get("fill_round")
    if fill:
        rows.append(Row("first round after seeding (fills the free GPUs)",
                        f"{fmt(fill['seconds'] * 1000, 0)} ms, {fill.get('started')} jobs started"))  # fmt: skip
    durations = [r["ms"] for r in scale["rounds"]]
    p99 = percentile(durations, 99)
    rows.append(
        Row(
            f"live rounds at {scale.get('pending_in_rounds', 'n/a')} pending (`SchedulerRound.duration_ms`)",
            f"{len(durations)} rounds ({scale['rounds_in_window']} by the worker in {fmt(scale['window_s'], 0)} s,"
            f" {len(durations) - scale['rounds_in_window']} run directly): p50 {fmt(percentile(durations, 50), 0)}"
            f" / p99 {fmt(p99, 0)} / max {fmt(max(durations) if durations else None, 0)} ms",
            f"p99 < {ROUND_P99_MS:.0f} ms",
            verdict(None if not durations else p99 < ROUND_P99_MS),
        )
    )
    others = scale.get("window_cpu_s", {}).get("others")
    rows.append(Row("worker CPU during that window",
                    f"{fmt(scale['window_worker_cpu_percent'])} % of a core; other processes on the machine:"
                    f" {fmt(others)} CPU-s"))  # fmt: skip
    fc = scale["forecast"]
    secs = [f["seconds"] for f in fc["forecasts"]]
    rows.append(
        Row(
            f"start-forecast refresh ×{len(secs)} ({fc['forecasts'][0].get('pending') if secs else 'n/a'} pending)",
            ", ".join(f"{fmt(s, 2)} s" for s in secs),
            f"< its interval ({fmt(fc['every_s'], 0)} s)",
            verdict(None if not secs else max(secs) < fc["every_s"]),
        )
    )
    for entry in scale["lists"]:
        lat = entry["load"]["latency_ms"]
        bad = entry["load"]["answered"] - entry["load"]["statuses"].get("200", 0)
        rows.append(
            Row(
                f"`GET {entry['path']}` as {entry['who']}",
                f"p50 {fmt(lat['p50'])} / p99 {fmt(lat['p99'])} ms ({entry['load']['answered']} pages"
                + (f", {bad} not 200" if bad else "")
                + f", {entry.get('count', 'n/a')} jobs listed; other processes {fmt(entry.get('others_cpu_s'))}"
                f" CPU-s)",
                f"p50 < {LIST_P50_MS:.0f} ms",
                verdict(None if lat["p50"] is None else lat["p50"] < LIST_P50_MS and bad == 0),
            )
        )
    idle = scale.get("idle")
    if idle:
        rows.append(
            Row(
                f"worker CPU with nothing changing ({fmt(idle['seconds'], 0)} s after {fmt(idle['wait_s'], 0)} s)",
                f"{fmt(idle['percent'])} % of a core ({fmt(idle['cpu_s'], 2)} CPU-s; {idle['rounds']} rounds;"
                f" other processes {fmt(idle['all_cpu_s'].get('others'))} CPU-s)",
                f"< {IDLE_CPU_PERCENT:.0f} %",
                verdict(idle["percent"] < IDLE_CPU_PERCENT),
            )
        )
    return rows


def round_missed(scale: dict[str, Any]) -> bool:
    durations = [r["ms"] for r in scale["rounds"]]
    return not durations or percentile(durations, 99) >= ROUND_P99_MS


def forecast_missed(scale: dict[str, Any]) -> bool:
    fc = scale["forecast"]
    return not fc["forecasts"] or max(f["seconds"] for f in fc["forecasts"]) >= fc["every_s"]


# --- the whole report -------------------------------------------------------------------------------------------------
def table(rows: list[Row]) -> str:
    lines = ["| figure | measured | goal | |", "|---|---|---|---|"]
    lines += [f"| {r.figure} | {r.value} | {r.goal} | {r.verdict} |" for r in rows]
    return "\n".join(lines)


def markdown(report: dict[str, Any]) -> str:
    head = report["run"]
    parts = [
        f"## `bench/api_load.py` on {head['code']}",
        "",
        f"{head['machine']}; {head['shape']}; {head['started']}",
        "",
    ]
    cal = report.get("calibration")
    if cal:
        parts += [
            f"Generator alone against a null server, c={cal['concurrency']}: {fmt(cal['rate_per_s'], 0)} requests/s"
            f" at {fmt(cal['generator_cpu_percent'], 0)} % of a core (so it is not what limits the figures below).",
            "",
        ]
    rows: list[Row] = []
    if "submit" in report:
        rows += submit_rows(report["submit"])
    if "array" in report:
        rows += array_rows(report["array"])
    if "scale" in report:
        rows += scale_rows(report["scale"])
    parts.append(table(rows))
    profiles = [report.get("submit_profiles", {}).get("submit")]
    profiles += [report.get("scale", {}).get("profiles", {}).get(name) for name in ("round", "forecast")]
    for prof in profiles:
        if prof:
            parts += ["", profile_text(prof)]
    return "\n".join(parts) + "\n"


def profile_text(prof: dict[str, Any]) -> str:
    what = {
        "round": "one live round",
        "forecast": "one start-forecast refresh",
        "submit": f"{prof.get('count', 1)} submissions through Django in one process (no gunicorn, no network)",
    }[prof["kind"]]
    lines = [
        f"### Profile of {what}: {fmt(prof['seconds'], 3)} s, of which {fmt(prof['sql_seconds'], 3)} s in"
        f" {prof['sql_queries']} SQL queries",
        "",
    ]
    if prof.get("answers"):
        lines += [f"Answers: {prof['answers']}", ""]
    lines += ["Costliest SQL:", ""]
    lines += [f"- {q['ms']:,.1f} ms in {q['calls']} call(s): `{q['sql'][:160]}`" for q in prof["sql_top"][:6]]
    lines += ["", "Top entries by cumulative time (cProfile):", "", "```", prof["cumulative"], "```"]
    return "\n".join(lines)
