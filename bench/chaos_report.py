"""The chaos benchmark's report (``bench/chaos.py``): what the API says happened to every job, what the stamps
say ran, what the driver's HTTP calls got, and the faults, as one JSON-ready dict. The definitions are in
``bench/chaos.py``'s docstring; times in the report are seconds since the chaos phase began."""

from __future__ import annotations

import argparse
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Any

from chaos_driver import TERMINAL, Driver, JobSpec, Tenant
from chaos_faults import Monkey
from chaos_stack import Stack, Timings
from chaos_stamps import CapSample, Instance, Overlap, StampReport, overlap_seconds, seconds_figure

LISTED = 10  # incidents and examples listed per kind
INCIDENTS = 5  # full timelines


def ts(value: str | None) -> float | None:
    return datetime.fromisoformat(value).timestamp() if value else None


def history_problems(job: dict[str, Any], events: list[dict[str, Any]], stamped_attempts: set[int]) -> list[str]:
    problems = []
    if not events or events[0]["kind"] != "submitted":
        problems.append("its history does not begin with 'submitted'")
    changes = [e for e in events if e.get("to_state")]
    if changes and changes[-1]["to_state"] != job["state"]:
        problems.append(f"its history ends in {changes[-1]['to_state']!r}, the job is {job['state']!r}")
    started = sum(e["kind"] == "started" for e in events)
    if started < job["attempt"]:
        problems.append(f"{started} 'started' events for attempt {job['attempt']}")
    unexplained = sorted(a for a in stamped_attempts if a > started)
    if unexplained:
        problems.append(f"attempt(s) {unexplained} ran (stamps) without a 'started' event")
    return problems


def _rel(t: float | None, t0: float) -> float | None:
    return None if t is None else round(t - t0, 2)


def _overlaps(items: Sequence[Overlap], t0: float) -> list[dict[str, Any]]:
    return [
        {"where": o.where, "a": o.a, "b": o.b, "at": _rel(o.start, t0), "seconds": seconds_figure(o.seconds)}
        for o in sorted(items, key=lambda o: o.start)[:LISTED]
    ]


def _caps(items: Sequence[CapSample], t0: float) -> list[dict[str, Any]]:
    return [
        {"tenant": c.tenant, "at": _rel(c.at, t0), "used": c.used, "cap": c.cap, "jobs": list(c.jobs)}
        for c in items[:LISTED]
    ]


def timeline(
    jobs: Iterable[int],
    window: tuple[float, float],
    collected: dict[int, dict[str, Any]],
    instances: Sequence[Instance],
    monkey: Monkey,
    t0: float,
) -> dict[str, Any]:
    """What the history, the stamps and the fault log say about ``jobs`` around ``window``."""
    jobs = sorted(set(jobs))
    events = []
    for job in jobs:
        for e in collected.get(job, {}).get("events", []):
            events.append((ts(e["at"]) or 0.0, job, e))
    start, end = window
    return {
        "jobs": jobs,
        "events": [
            f"t={t - t0:.2f} job {job} {e['kind']} {e['from_state']}->{e['to_state']} by {e['actor']}"
            f"{': ' + e['reason'] if e['reason'] else ''}"
            for t, job, e in sorted(events)
        ],
        "processes": [
            f"job {i.job} attempt {i.attempt} rank {i.rank} on {i.node} GPUs {list(i.gpus)}: "
            f"t={i.first - t0:.2f}..{i.last - t0:.2f} ({i.ended or 'killed'})"
            for i in sorted(instances, key=lambda i: i.first)
            if i.job in jobs
        ],
        "faults": [
            f"t={f.at - t0:.2f}..{f.ended - t0:.2f} {f.target} {f.action}"
            for f in monkey.faults
            if f.ended >= start - 30 and f.at <= end + 5
        ],
    }


def build(
    *,
    args: argparse.Namespace,
    timings: Timings,
    tenants: list[Tenant],
    specs: list[JobSpec],
    driver: Driver,
    monkey: Monkey,
    stack: Stack,
    collected: dict[int, dict[str, Any]],
    named: dict[str, list[int]],
    instances: Sequence[Instance],
    stamps: StampReport,
    left: list[tuple[int, str]],
    times: dict[str, Any],
) -> dict[str, Any]:
    t0 = times["t0"]
    spec_of = {driver.ids[s.key]: s for s in specs if s.key in driver.ids}
    stamped: dict[int, set[int]] = defaultdict(set)
    for i in instances:
        stamped[i.job].add(i.attempt)

    lost: dict[int, str] = {}
    states: Counter[str] = Counter()
    requeues = Counter[str]()
    mismatches, late = [], []
    slack = timings.kill_grace + 2 * timings.heartbeat + timings.schedule_every + 2.0
    last_stamp: dict[int, float] = defaultdict(float)
    for i in instances:
        last_stamp[i.job] = max(last_stamp[i.job], i.last)
    for job_id, record in sorted(collected.items()):
        if record.get("vanished") or record.get("unreadable"):
            lost[job_id] = "vanished (404)" if record.get("vanished") else "could not be read"
            states["vanished"] += 1
            continue
        job, events = record["job"], record["events"]
        states[job["state"]] += 1
        requeues.update(e["kind"] for e in events if e["kind"] in ("requeued", "preempted"))
        problems = [] if job["state"] in TERMINAL else [f"still {job['state']} at the deadline"]
        problems += history_problems(job, events, stamped.get(job_id, set()))
        if problems:
            lost[job_id] = "; ".join(problems)
        spec = spec_of[job_id]
        expected = spec.expected()
        gave_up = "hardware retries" in " ".join(e["reason"] for e in events)
        if job["state"] in TERMINAL and expected != "any" and job["state"] != expected and not gave_up:
            mismatches.append(
                {
                    "job": job_id,
                    "kind": spec.kind,
                    "expected": expected,
                    "state": job["state"],
                    "exit_code": job["exit_code"],
                }
            )
        finished = ts(job.get("finished_at"))
        if job["state"] in TERMINAL and finished and last_stamp.get(job_id, 0.0) > finished + slack:
            late.append(
                {
                    "job": job_id,
                    "kind": spec.kind,
                    "finished": _rel(finished, t0),
                    "last_stamp": _rel(last_stamp[job_id], t0),
                    "seconds_after": round(last_stamp[job_id] - finished, 2),
                }
            )

    ours = {s.name for s in specs}
    duplicates = {name: ids for name, ids in named.items() if name in ours and len(ids) > 1}

    outages = stack.pg.outages if stack.pg else []
    records = driver.api.records
    fivexx = [r for r in records if r.status is not None and r.status >= 500]
    outside = [r for r in fivexx if not any(r.began <= end and r.ended >= start for start, end in outages)]

    faults = Counter(f"{'agent' if f.target.startswith('chaos-') else f.target}:{f.action}" for f in monkey.faults)
    incidents = []
    for o in sorted(stamps.double_runs + stamps.gpu_overlaps, key=lambda o: o.start)[:INCIDENTS]:
        incidents.append(
            {
                "what": f"{o.where}: {o.a} / {o.b}",
                "at": _rel(o.start, t0),
                **timeline(o.jobs, (o.start, o.end), collected, instances, monkey, t0),
            }
        )
    if not incidents and stamps.over_cap:
        c = stamps.over_cap[0]
        incidents.append(
            {
                "what": f"tenant {c.tenant} over its cap",
                "at": _rel(c.at, t0),
                **timeline(c.jobs, (c.at, c.at), collected, instances, monkey, t0),
            }
        )

    report: dict[str, Any] = {
        "jobs": len(driver.ids),
        "lost": len(lost),
        "double_run_seconds": stamps.double_run_seconds,
        "gpu_overlap_seconds": stamps.gpu_overlap_seconds,
        "over_cap_samples": len(stamps.over_cap),
        "requeues": requeues["requeued"] + requeues["preempted"],
        "http_5xx_outside_db_outage": len(outside),
        "double_run_seconds_possible": overlap_seconds(stamps.double_runs_possible),
        "gpu_overlap_seconds_possible": overlap_seconds(stamps.gpu_overlaps_possible),
        "over_cap_samples_possible": len(stamps.over_cap_possible),
        "double_run_jobs": sorted({o.jobs[0] for o in stamps.double_runs}),
        "gpu_overlap_jobs": sorted({j for o in stamps.gpu_overlaps for j in o.jobs}),
        "over_cap_tenants": dict(Counter(c.tenant for c in stamps.over_cap)),
        "refused": len(driver.refused),
        "refused_examples": list(driver.refused.values())[:3],
        "settled": times["settled"],
        "final_states": dict(states),
        "lost_jobs": {str(k): v for k, v in list(lost.items())[:50]},
        "requeue_events": dict(requeues),
        "duplicates": duplicates,
        "cancels_sent": driver.cancels_sent,
        "outcome_mismatches": mismatches[:LISTED],
        "outcome_mismatch_count": len(mismatches),
        "ran_after_terminal": late[:LISTED],
        "ran_after_terminal_count": len(late),
        "job_processes_left": [cwd.rsplit("/", 1)[-1] for _, cwd in left],
        "stamps": {"instances": stamps.instances, "lines": stamps.lines},
        "double_runs": _overlaps(stamps.double_runs, t0),
        "gpu_overlaps": _overlaps(stamps.gpu_overlaps, t0),
        "over_cap": _caps(stamps.over_cap, t0),
        "http": {
            "requests": len(records),
            "no_answer": sum(r.status is None for r in records),
            "by_status": dict(Counter(str(r.status) for r in records if r.status is not None)),
            "5xx": len(fivexx),
            "5xx_outside_db_outage": [
                {"at": _rel(r.began, t0), "method": r.method, "path": r.path, "status": r.status}
                for r in outside[:LISTED]
            ],
        },
        "faults": dict(faults),
        "fault_count": len(monkey.faults),
        "aimed_faults": sum(f.aimed for f in monkey.faults),
        "fault_log": [f.as_dict(t0) for f in monkey.faults],
        "db_outages": [[_rel(a, t0), _rel(b, t0)] for a, b in outages],
        "unexpected_exits": {p.name: len(p.unexpected_exits) for p in stack.procs.values() if p.unexpected_exits},
        "incidents": incidents,
        "job_mix": dict(Counter(s.kind for s in specs)),
        "tenants": {t.slug: t.cap for t in tenants},
        "config": {
            "agents": args.agents,
            "gpus_per_agent": args.gpus_per_agent,
            "duration": args.duration,
            "deadline": args.deadline,
            "fault_every": None if args.no_faults else args.fault_every,
            "heartbeat": timings.heartbeat,
            "node_timeout": timings.node_timeout,
            "schedule_every": timings.schedule_every,
            "kill_grace": timings.kill_grace,
            "web": "gunicorn (2 workers x 8 threads, CORRAL_PRODUCTION=1)",
        },
        "seed": args.seed,
        "durations_s": {
            "set_up": round(times["set_up"] - times["started"], 1),
            "chaos": round(times["chaos_end"] - t0, 1),
            "settle": round(times["settle_end"] - times["chaos_end"], 1),
            "total": round(times["settle_end"] - times["started"], 1),
        },
    }
    report["ok"] = not (
        report["lost"] or report["double_run_seconds"] or report["gpu_overlap_seconds"] or report["over_cap_samples"]
    )
    return report
