"""The chaos benchmark (``bench/chaos.py``), short: a real stack with its own PostgreSQL and Redis runs 40 jobs
while agents, the worker, beat, web, Redis and PostgreSQL are killed, frozen and restarted; no job may be lost,
run twice, share a GPU or push its tenant over its cap. About 3 minutes. Ref: #15

The first tests check the stamp rules the benchmark judges by (pure, no stack): a hand-over inside one second is
not an overlap, two processes alive in the same second are.
"""

from __future__ import annotations

import glob
import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "bench"
PG_GLOB = "/usr/lib/postgresql/*/bin/postgres"
#: About 3 minutes on 2 cores: 4 agents x 4 fake GPUs, 40 jobs over 90 s, a fault every 5 s on average.
SHORT_RUN = "--jobs 40 --agents 4 --duration 90 --deadline 150 --fault-every 5 --seed 15"


def _bench_module(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, BENCH / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up while the class is built
    spec.loader.exec_module(module)
    return module


stamps = _bench_module("chaos_stamps")


def write(directory: Path, name: str, lines: list[str]) -> None:
    (directory / name).write_text("".join(line + "\n" for line in lines))


def task(
    directory: Path, job: int, attempt: int, rank: int, node: str, gpus: str, times: list[float], last: str = "end"
) -> None:
    events = ["start"] + ["tick"] * (len(times) - 2) + [last]
    write(
        directory,
        f"{job}.{attempt}.{rank}.{node}.{len(list(directory.iterdir()))}",
        [f"{e} {job} {attempt} {rank} {node} {gpus} {t}" for e, t in zip(events, times, strict=True)],
    )


def test_a_hand_over_within_one_second_is_no_overlap(tmp_path: Path) -> None:
    task(tmp_path, 1, 1, 0, "n1", "0", [100.0, 101.0, 102.0, 110.3], last="term")  # requeued, exits at 110.3
    task(tmp_path, 1, 2, 0, "n1", "0", [110.8, 111.8, 112.8])  # the next attempt, same GPU, same second
    report = stamps.analyse(stamps.read_stamps(tmp_path), {1: "t"}, {"t": 1})
    assert (report.double_run_seconds, report.gpu_overlap_seconds, report.over_cap) == (0.0, 0.0, [])


def test_two_attempts_alive_in_the_same_second_overlap(tmp_path: Path) -> None:
    task(tmp_path, 1, 1, 0, "n1", "0", [100.0, 101.0, 110.8], last="tick")  # SIGKILLed after its 110.8 stamp
    task(tmp_path, 1, 2, 0, "n1", "0,1", [110.3, 111.3, 112.3])
    report = stamps.analyse(stamps.read_stamps(tmp_path), {1: "t"}, {"t": 2})
    assert report.double_run_seconds == pytest.approx(0.5)
    assert report.gpu_overlap_seconds == pytest.approx(0.5)
    assert [o.where for o in report.gpu_overlaps] == ["n1 GPU 0"]
    # No whole second falls inside both proven intervals, so no cap sample sees 3 GPUs; the possible one does.
    assert report.over_cap == []
    assert [(c.at, c.used) for c in report.over_cap_possible] == [(111, 3), (112, 3)]


def test_ranks_of_one_attempt_are_one_run(tmp_path: Path) -> None:
    task(tmp_path, 7, 1, 0, "n1", "0,1,2,3", [10.0, 11.0, 12.0])
    task(tmp_path, 7, 1, 1, "n2", "0,1", [10.1, 11.1, 12.1])
    found = stamps.read_stamps(tmp_path)
    at_cap = stamps.analyse(found, {7: "t"}, {"t": 6})
    assert (at_cap.double_run_seconds, at_cap.gpu_overlap_seconds, at_cap.over_cap) == (0.0, 0.0, [])
    # Both ranks count: at whole seconds 11 and 12 the gang holds 6 GPUs (at 10 rank 1 had not stamped yet).
    assert [(c.at, c.used, c.cap) for c in stamps.over_cap(found, {7: "t"}, {"t": 5})] == [(11, 6, 5), (12, 6, 5)]


def test_the_possible_end_of_a_killed_process_is_when_it_was_seen_gone(tmp_path: Path) -> None:
    task(tmp_path, 1, 1, 0, "n1", "0", [100.0, 101.0, 110.0], last="tick")  # SIGKILLed after 110.0, seen gone 110.2
    task(tmp_path, 2, 1, 0, "n1", "0", [110.9, 111.9, 112.9])  # the next job on its GPU
    found = stamps.read_stamps(tmp_path)
    assert stamps.gpu_overlaps(found, 1.5)  # the slack alone cannot tell this hand-over from an overlap
    watched = stamps.read_stamps(tmp_path, {found[0].path: 110.2})
    assert watched[0].span(1.5) == (100.0, 110.2)
    assert stamps.gpu_overlaps(watched, 1.5) == []


def test_a_process_killed_mid_write_keeps_its_whole_lines(tmp_path: Path) -> None:
    write(tmp_path, "3.1.0.n1.1", ["start 3 1 0 n1 2 50.5", "tick 3 1 0 n1 2 51.5", "tick 3 1 0 n1"])
    (instance,) = stamps.read_stamps(tmp_path)
    assert (instance.first, instance.last, instance.ended, instance.gpus) == (50.5, 51.5, None, (2,))
    assert instance.span(1.5) == (50.5, 53.0)


# --- the short run -----------------------------------------------------------------------------------------


def _why_skip() -> str | None:
    url = os.environ.get("DATABASE_URL", "")
    if not url.startswith(("postgres://", "postgresql://")) or not os.environ.get("REDIS_URL"):
        return (
            "the chaos run is part of `make test` (about 3 minutes, its own PostgreSQL and Redis); run it alone "
            f"with `.venv/bin/python bench/chaos.py {SHORT_RUN}`"
        )
    if shutil.which("redis-server") is None or (shutil.which("postgres") is None and not glob.glob(PG_GLOB)):
        return "the PostgreSQL or Redis binaries are missing"
    return None


@pytest.mark.e2e
@pytest.mark.timeout(600)
def test_chaos_short_run_loses_nothing_and_runs_nothing_twice(tmp_path: Path) -> None:
    reason = _why_skip()
    if reason:
        pytest.skip(reason)
    out = tmp_path / "chaos.json"
    argv = [sys.executable, str(BENCH / "chaos.py"), *SHORT_RUN.split(), "--json-out", str(out)]
    done = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=560)
    assert out.exists(), f"status {done.returncode}, no report:\n{done.stderr[-4000:]}"
    report = json.loads(out.read_text())
    assert report["jobs"] == 40 and report["settled"], report
    assert report["fault_count"] >= 5 and report["stamps"]["instances"] >= 40, report  # it did break things
    bad = {key: report[key] for key in ("lost", "double_run_seconds", "gpu_overlap_seconds", "over_cap_samples")}
    assert bad == {"lost": 0, "double_run_seconds": 0.0, "gpu_overlap_seconds": 0.0, "over_cap_samples": 0}, json.dumps(
        {
            key: report[key]
            for key in ("lost_jobs", "double_runs", "gpu_overlaps", "over_cap", "incidents", "fault_log", "seed")
        },
        indent=1,
    )
    assert done.returncode == 0, done.stderr[-4000:]
