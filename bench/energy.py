"""Benchmark: energy saving by forecast (issue #19) on Philly's node demand, 1-14 December 2017.

Replays the shared ``philly_node_sequence.csv.gz`` (read in place) under Corral's forecast policy, the Slurm-style
idle timeout and the Helios CES rule, exactly as ``corral energy replay`` does, and checks the issue's goal: more
nodes powered off than Helios CES with no more node-minutes short of demand. Context rows: the idle timeout at
other SuspendTimes, every policy with a slower wake-up.

    .venv/bin/python bench/energy.py --markdown          # the documented run (about a minute on 2 cores)
    .venv/bin/python bench/energy.py --tune --markdown   # also re-derive Corral's knobs on Oct-Nov (3-5 min)

``--tune`` is how the defaults of ``ForecastPolicy`` were chosen, on the history before December only: six
one-week windows (17 October to 27 November), each replayed with a forecaster trained on the history before it;
among the grid's policies that are short of demand no more than Helios CES in *every* week, the one with the most
nodes powered off on average (ties: fewer wake-ups).
"""

from __future__ import annotations

import argparse
import itertools
import json
import platform
import sys
import time
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from pathlib import Path

import numpy as np
import numpy.typing as npt

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from scheduling.energy.compare import Window, compare, forecasts_for  # noqa: E402
from scheduling.energy.forecast import DemandForecaster  # noqa: E402
from scheduling.energy.policies import ForecastPolicy, HeliosCesPolicy, IdleTimeoutPolicy, PowerPolicy  # noqa: E402
from scheduling.energy.replay import ReplayConfig, replay  # noqa: E402
from scheduling.energy.series import StepSeries, fill_outages, read_series  # noqa: E402

SERIES = ROOT.parent / "shared" / "traces" / "philly_node_sequence.csv.gz"
TEST = (datetime(2017, 12, 1), datetime(2017, 12, 15))  # 1-14 December inclusive
TUNE_WEEKS = tuple(datetime(2017, 10, 17) + timedelta(days=7 * k) for k in range(6))  # 17 Oct - 27 Nov
COLUMNS = ("powered_off_mean_nodes", "short_node_minutes", "wakeups_per_day", "wake_events_per_day")


@dataclass
class Prepared:
    window: Window
    forecasts: npt.NDArray[np.float64]


def prepare(series: StepSeries, start: datetime, stop: datetime, config: ReplayConfig) -> Prepared:
    window = Window(series.index_at(start), series.index_at(stop))
    forecaster = DemandForecaster.fit(series, until=window.start)
    return Prepared(window, forecasts_for(series, window, forecaster, config))


def run(series: StepSeries, policy: PowerPolicy, prepared: Prepared, config: ReplayConfig) -> dict[str, float | int]:
    w = prepared.window
    return replay(series, policy, start=w.start, stop=w.stop, forecasts=prepared.forecasts, config=config).summary()


def tune(series: StepSeries, config: ReplayConfig) -> tuple[ForecastPolicy, list[dict[str, object]]]:
    weeks = [prepare(series, start, start + timedelta(days=7), config) for start in TUNE_WEEKS]
    helios = [run(series, HeliosCesPolicy(), p, config) for p in weeks]
    # The rule (power down when the trend *and* the forecast fall); docs/energy.md reports the other one.
    grid = itertools.product((True,), range(12, 40, 4), (0.0, 0.5, 1.0), (0, 3, 6, 12), (6,), (0, 1))
    found: list[tuple[float, float, ForecastPolicy, list[int]]] = []
    for must_fall, buffer, spread, keep, future, lead in grid:
        policy = ForecastPolicy(
            buffer=buffer, spread=spread, keep=keep, future=future, lead=lead, forecast_must_fall=must_fall
        )
        results = [run(series, policy, p, config) for p in weeks]
        if all(r["short_node_minutes"] <= h["short_node_minutes"] for r, h in zip(results, helios, strict=True)):
            off = float(np.mean([r["powered_off_mean_nodes"] for r in results]))
            wakes = float(np.mean([r["wakeups_per_day"] for r in results]))
            found.append((off, -wakes, policy, [int(r["short_node_minutes"]) for r in results]))
    found.sort(key=lambda f: (f[0], f[1]), reverse=True)
    rows: list[dict[str, object]] = [
        {
            "policy": "helios_ces",
            "powered_off_mean_nodes": round(float(np.mean([h["powered_off_mean_nodes"] for h in helios])), 2),
            "short_by_week": [h["short_node_minutes"] for h in helios],
        }
    ]
    for off, neg_wakes, policy, shorts in found[:5]:
        rows.append(
            {
                "policy": _knobs(policy),
                "powered_off_mean_nodes": round(off, 2),
                "wakeups_per_day": round(-neg_wakes, 1),
                "short_by_week": shorts,
            }
        )
    if not found:
        return ForecastPolicy(), rows
    return found[0][2], rows


def _knobs(p: ForecastPolicy) -> str:
    rule = "trend+forecast" if p.forecast_must_fall else "trend"
    return f"buffer={p.buffer} spread={p.spread:g} keep={p.keep} future={p.future} lead={p.lead} down-when={rule}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--series", type=Path, default=SERIES)
    parser.add_argument("--tune", action="store_true", help="re-derive Corral's knobs on 17 Oct - 27 Nov first")
    parser.add_argument("--markdown", action="store_true", help="print Markdown tables")
    parser.add_argument("--json", type=Path, help="also write the results here")
    parser.add_argument("--outage-minutes", type=int, default=30, help="as corral energy replay's (0: off)")
    args = parser.parse_args()
    began = time.perf_counter()
    # The two runs of zero nodes in use (18 h on 26 October, 30 min on 6 December) are monitoring outages, not demand.
    series = fill_outages(read_series(args.series), min_steps=args.outage_minutes // 10)
    config = ReplayConfig()
    corral = ForecastPolicy()
    tuned_rows: list[dict[str, object]] = []
    if args.tune:
        t0 = time.perf_counter()
        corral, tuned_rows = tune(series, config)
        print(f"tuned on 17 Oct - 27 Nov in {time.perf_counter() - t0:.0f} s: {_knobs(corral)}", file=sys.stderr)
        if corral != ForecastPolicy():
            print(f"note: the code's defaults are {_knobs(ForecastPolicy())}", file=sys.stderr)
    t0 = time.perf_counter()
    window = Window(series.index_at(TEST[0]), series.index_at(TEST[1]))
    forecaster = DemandForecaster.fit(series, until=window.start)  # trained on 3 Oct - 30 Nov only
    policies = (corral, IdleTimeoutPolicy(), HeliosCesPolicy())
    main_run = compare(series, window, policies=policies, replay_config=config, forecaster=forecaster)
    headline = main_run.as_dict(series, config)
    seconds = time.perf_counter() - t0
    ready = Prepared(window, forecasts_for(series, window, forecaster, config))
    context: list[tuple[str, dict[str, float | int]]] = []
    for minutes in (10, 60, 120):
        idle = IdleTimeoutPolicy(suspend_steps=minutes // 10)
        context.append((f"idle_timeout SuspendTime {minutes} min", run(series, idle, ready, config)))
    slow = replace(config, wake_minutes=20)  # same warm-up, so the same forecasts
    for policy in policies:
        context.append((f"{policy.name}, wake-up 20 min", run(series, policy, ready, slow)))
    goal = (
        headline["forecast"]["powered_off_mean_nodes"] > headline["helios_ces"]["powered_off_mean_nodes"]  # type: ignore[index]
        and headline["forecast"]["short_node_minutes"] <= headline["helios_ces"]["short_node_minutes"]  # type: ignore[index]
    )
    report = {
        "series": str(args.series.name),
        "window": "2017-12-01..2017-12-14",
        "machine": platform.platform(),
        "corral_policy": _knobs(corral),
        "result": headline,
        "goal_met": goal,
        "context": dict(context),
        "tuning": tuned_rows,
        "seconds_main_run": round(seconds, 1),
        "seconds_total": round(time.perf_counter() - began, 1),
    }
    _print(report, markdown=args.markdown)
    if args.json:
        args.json.write_text(json.dumps(report, indent=2), encoding="utf-8")


def _print(report: dict[str, object], *, markdown: bool) -> None:
    result = report["result"]
    assert isinstance(result, dict)
    info = result["replay"]
    rows = [(name, result[name]) for name in ("forecast", "idle_timeout", "helios_ces")]
    context = report["context"]
    assert isinstance(context, dict)
    head = ("policy", "powered off (mean nodes)", "short (node-min)", "wake-ups/day", "wake events/day", "used rate")
    lines = []
    if markdown:
        lines += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for name, r in [*rows, *context.items()]:
        cells = [
            name,
            f"{r['powered_off_mean_nodes']:.1f}",
            str(r["short_node_minutes"]),
            f"{r['wakeups_per_day']:.1f}",
            f"{r['wake_events_per_day']:.1f}",
            f"{100 * r['used_rate_powered_on']:.1f} %",
        ]
        lines.append("| " + " | ".join(cells) + " |" if markdown else "  ".join(f"{c:>14}" for c in cells))
    print(
        f"Philly node demand {info['from']} to {info['to']}: {info['nodes_mean']:g} nodes, mean demand "
        f"{info['demand_mean']:g}, forecast error {info['forecast_mae_nodes']:g} nodes (one wake-up ahead)"
    )
    print(f"Corral policy: {report['corral_policy']}")
    print("\n".join(lines))
    print(f"goal (more powered off than helios_ces, no more short): {'MET' if report['goal_met'] else 'NOT MET'}")
    tuning = report["tuning"]
    assert isinstance(tuning, list)
    for row in tuning:
        print(f"tuning: {row}")
    print(f"main run {report['seconds_main_run']} s, all {report['seconds_total']} s on {report['machine']}")


if __name__ == "__main__":
    main()
