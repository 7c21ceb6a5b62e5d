"""A smoke run of ``bench/share_scale.py`` (the share placers and the share start forecast with a long queue), so
the benchmark keeps working; its figures are in docs/benchmarks.md, never checked here. Ref: #17"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]


def test_the_share_scale_benchmark_runs_and_places_on_every_cluster() -> None:
    run = subprocess.run(
        [sys.executable, "bench/share_scale.py", "--gpus", "8", "--waiting", "40", "--repeat", "1"],
        cwd=ROOT, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    rows = [line.split("|")[1:-1] for line in run.stdout.splitlines()[2:]]
    assert len(rows) == 3 * 4  # three clusters, three placers and the forecast
    assert all(int(cells[-1].replace(",", "")) > 0 for cells in rows)
