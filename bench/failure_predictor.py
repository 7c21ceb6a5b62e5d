"""Benchmark: failure-prediction quality and cost on generated fleets (the "Measured" section of docs/telemetry.md).

For each seed it generates a fleet (default 2,000 GPUs x 60 days, hourly rows; no network, no files needed), runs
the same walk-forward evaluation as ``corral failures evaluate`` (threshold chosen on the training part only) and
reports alarm precision, recall and lead time per seed and pooled over seeds, recall per failure kind and what
raised each false alarm (ground truth the generator knows and labels.csv does not), and wall-clock costs. One
seed also goes through a CSV write and read, to time the file path a site's export takes.

    .venv/bin/python bench/failure_predictor.py --seeds 1 --no-csv    # the documented run: seeds 1 and 2, side by side
    .venv/bin/python bench/failure_predictor.py --gpus 400 --days 45 --seeds 1 --models gbdt   # quick look
    .venv/bin/python bench/failure_predictor.py --models ensemble --horizon-hours 72   # a longer horizon

Models: ``gbdt``, ``ensemble``, ``cascade`` (sliding training, as ``corral failures evaluate`` runs them) and
``gbdt-static`` (one boosted-tree model, not retrained during the test part: the paper's kind of baseline, and
the one the generator's difficulty was calibrated against; see docs/telemetry.md).
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from telemetry.csvio import read_labels, read_telemetry, write_labels, write_telemetry  # noqa: E402
from telemetry.predict.alarms import EARLY_HORIZONS  # noqa: E402
from telemetry.predict.estimators import ModelKind  # noqa: E402
from telemetry.predict.evaluate import EvalConfig, EvaluationReport, evaluate  # noqa: E402
from telemetry.synth import FleetConfig, generate  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--gpus", type=int, default=2000)
    parser.add_argument("--days", type=float, default=60)
    parser.add_argument("--seeds", default="1,2,3", help="comma-separated fleet seeds")
    parser.add_argument(
        "--models", default="gbdt-static,gbdt,ensemble,cascade", help="models to evaluate on every seed"
    )
    parser.add_argument("--slow-models-once", default="", help="models run on the first seed only")
    parser.add_argument("--false-precursor-rate", type=float, default=FleetConfig().false_precursor_rate)
    parser.add_argument("--marginal-bank-share", type=float, default=FleetConfig().marginal_bank_share)
    parser.add_argument(
        "--horizon-hours", type=float, default=24.0, help="prediction horizon (labels, alarms and cooldown)"
    )
    parser.add_argument("--no-csv", action="store_true", help="skip the CSV write/read timing")
    parser.add_argument("--json", type=Path, help="also write the results here")
    args = parser.parse_args()
    seeds = [int(s) for s in args.seeds.split(",")]
    variants = args.models.split(",")
    for v in variants:
        _eval_config(v, args.horizon_hours)  # fail fast on a typo
    once = {m for m in args.slow_models_once.split(",") if m}

    results: dict[str, object] = {
        "fleet": {
            "gpus": args.gpus,
            "days": args.days,
            "false_precursor_rate": args.false_precursor_rate,
            "marginal_bank_share": args.marginal_bank_share,
            "horizon_hours": args.horizon_hours,
        },
        "machine": {"python": platform.python_version(), "cpus": _cpus()},
        "runs": [],
    }
    runs: list[dict[str, object]] = results["runs"]  # type: ignore[assignment]
    for i, seed in enumerate(seeds):
        t0 = time.perf_counter()
        config = FleetConfig(
            gpus=args.gpus,
            days=args.days,
            seed=seed,
            false_precursor_rate=args.false_precursor_rate,
            marginal_bank_share=args.marginal_bank_share,
        )
        fleet = generate(config)
        gen_s = time.perf_counter() - t0
        table, labels = fleet.table, fleet.labels
        kinds_count = Counter(str(k) for k in fleet.kinds.values())
        print(
            f"seed {seed}: {len(table):,} rows, {len(table.gpu_names)} GPUs, {len(labels)} failures "
            f"{dict(kinds_count)}; generated in {gen_s:.1f} s",
            flush=True,
        )
        if i == 0 and not args.no_csv:
            results["csv"] = _csv_roundtrip(fleet)
            print(f"  csv: {results['csv']}", flush=True)
        for variant in variants:
            if variant in once and i > 0:
                continue
            t1 = time.perf_counter()
            report = evaluate(table, labels, _eval_config(variant, args.horizon_hours))
            wall = time.perf_counter() - t1
            row = _summarise(report, fleet, seed, wall)
            row["model"] = variant
            runs.append(row)
            print(f"  {variant}: {json.dumps(row)}", flush=True)

    pooled = {v: _pool([r for r in runs if r["model"] == v]) for v in variants}
    results["pooled"] = pooled
    for kind, summary in pooled.items():
        print(f"pooled {kind}:", json.dumps(summary), flush=True)
    if args.json:
        args.json.write_text(json.dumps(results, indent=2) + "\n")


def _eval_config(variant: str, horizon_hours: float) -> EvalConfig:
    kind, _, mode = variant.partition("-")
    if mode not in ("", "static"):
        raise SystemExit(f"unknown model variant {variant!r}")
    return EvalConfig(kind=ModelKind(kind), sliding=mode != "static", horizon_s=horizon_hours * 3600)


def _summarise(report: EvaluationReport, fleet: object, seed: int, wall: float) -> dict[str, object]:
    kinds = fleet.kinds  # type: ignore[attr-defined]
    caught = Counter(str(kinds[u]) for u, _ in report.caught_failures)
    missed = Counter(str(kinds[u]) for u, _ in report.missed_failures)
    data = report.as_dict()
    return {
        "seed": seed,
        "model": data["model"],
        "precision": data["precision"],
        "recall": data["recall"],
        "median_lead_hours": data["median_lead_hours"],
        "true_alarms": data["true_alarms"],
        "false_alarms": data["false_alarms"],
        "failures": data["failures"],
        "caught": data["caught"],
        "target_met_on_training_part": data["target_met_on_training_part"],
        "validation_precision": data["validation"]["precision"],
        "validation_recall": data["validation"]["recall"],
        "test_row_average_precision": data["test_row_average_precision"],
        "hindsight_precision_at_recall": data["hindsight_precision_at_recall"],
        "caught_by_kind": dict(caught),
        "missed_by_kind": dict(missed),
        "early_false_alarms": data["early_false_alarms"],
        "false_alarms_by_cause": dict(_false_alarm_causes(report, fleet)),
        "lead_hours": [round(h, 1) for h in report.test.lead_hours],
        "folds": data["folds"],
        "feature_seconds": data["feature_seconds"],
        "train_seconds": data["train_seconds"],
        "score_seconds": data["score_seconds"],
        "wall_seconds": round(wall, 1),
    }


#: A look-alike episode or node-wide event is blamed for a false alarm raised within this long after it began
#: (the longest look-alike, a hot spell, lasts six days).
CAUSE_WINDOW_S = 7 * 86400.0


def _false_alarm_causes(report: EvaluationReport, fleet: object) -> Counter[str]:
    """What raised each false alarm, from the generator's ground truth: a GPU that failed later than the horizon
    (``early``: within ``EARLY_HORIZONS`` horizons, as ``early_false_alarms`` counts them; ``failed later``), the
    look-alike episode(s) the GPU was in, a node-wide event on its node, or ``none`` (the healthy noise: soft
    errors, chronic heat or replays, switch events)."""
    horizon = report.config.horizon_s
    episodes: dict[str, list[tuple[float, str]]] = {}
    for uuid, episode, start in fleet.episodes:  # type: ignore[attr-defined]
        episodes.setdefault(uuid, []).append((start, str(episode)))
    node_events: dict[str, list[tuple[str, float, float]]] = {}
    for node, kind, start, end in fleet.node_events:  # type: ignore[attr-defined]
        node_events.setdefault(node, []).append((kind, start, end))
    table = fleet.table  # type: ignore[attr-defined]
    node_of = dict(zip((table.gpu_names[g] for g in table.gpu), (table.node_names[n] for n in table.node), strict=True))
    causes: Counter[str] = Counter()
    for uuid, t, next_failure in report.false_alarm_rows:
        if np.isfinite(next_failure):
            causes["early" if next_failure - t <= EARLY_HORIZONS * horizon else "failed later"] += 1
            continue
        found = sorted({e for start, e in episodes.get(uuid, ()) if 0 <= t - start <= CAUSE_WINDOW_S})
        found += sorted(
            {k for k, start, end in node_events.get(node_of[uuid], ()) if start <= t <= end + CAUSE_WINDOW_S}
        )
        causes["+".join(found) or "none"] += 1
    return causes


def _pool(runs: list[dict[str, object]]) -> dict[str, object]:
    true = sum(int(r["true_alarms"]) for r in runs)  # type: ignore[call-overload]
    false = sum(int(r["false_alarms"]) for r in runs)  # type: ignore[call-overload]
    caught = sum(int(r["caught"]) for r in runs)  # type: ignore[call-overload]
    failures = sum(int(r["failures"]) for r in runs)  # type: ignore[call-overload]
    leads = [h for r in runs for h in r["lead_hours"]]  # type: ignore[attr-defined]
    by_kind: Counter[str] = Counter()
    all_kind: Counter[str] = Counter()
    causes: Counter[str] = Counter()
    for r in runs:
        causes.update(r["false_alarms_by_cause"])  # type: ignore[arg-type]
        by_kind.update(r["caught_by_kind"])  # type: ignore[arg-type]
        all_kind.update(r["caught_by_kind"])  # type: ignore[arg-type]
        all_kind.update(r["missed_by_kind"])  # type: ignore[arg-type]
    return {
        "seeds": len(runs),
        "precision": round(true / (true + false), 3) if true + false else None,
        "recall": round(caught / failures, 3) if failures else None,
        "median_lead_hours": round(float(np.median(leads)), 1) if leads else None,
        "alarms": true + false,
        "failures": failures,
        "recall_by_kind": {k: f"{by_kind[k]}/{n}" for k, n in sorted(all_kind.items())},
        "false_alarms_by_cause": dict(causes.most_common()),
        "hindsight_precision_at_recall_0.5": [r["hindsight_precision_at_recall"].get("0.5") for r in runs],  # type: ignore[attr-defined]
        "validation_precision_recall": [(r["validation_precision"], r["validation_recall"]) for r in runs],
        "mean_train_seconds_per_fold": round(
            sum(float(r["train_seconds"]) for r in runs) / max(1, sum(int(r["folds"]) for r in runs)),
            2,  # type: ignore[arg-type]
        ),
    }


def _csv_roundtrip(fleet: object) -> dict[str, object]:
    table, labels = fleet.table, fleet.labels  # type: ignore[attr-defined]
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "telemetry.csv"
        t0 = time.perf_counter()
        write_telemetry(path, table)
        write_labels(Path(tmp) / "labels.csv", labels)
        t1 = time.perf_counter()
        back = read_telemetry(path)
        read_labels(Path(tmp) / "labels.csv")
        t2 = time.perf_counter()
        size_mb = path.stat().st_size / 1e6
    assert len(back) == len(table)
    return {
        "rows": len(table),
        "size_mb": round(size_mb),
        "write_seconds": round(t1 - t0, 1),
        "read_seconds": round(t2 - t1, 1),
    }


def _cpus() -> int:
    import os

    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 0


if __name__ == "__main__":
    main()
