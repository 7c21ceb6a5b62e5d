"""The start-estimate benchmark (``bench/start_estimates.py``) on tiny generated traces: its replay asks the live
forecast at the right instants with the right cluster state, and its report and calibration come out. Ref: #18."""

from __future__ import annotations

import importlib.util
import math
import sys
from pathlib import Path
from types import ModuleType

import pytest

from scheduling.core import start_range
from scheduling.sim.simulator import Cluster
from scheduling.sim.trace import TraceJob, write_trace

BENCH = Path(__file__).resolve().parents[3] / "bench" / "start_estimates.py"


def _bench() -> ModuleType:
    spec = importlib.util.spec_from_file_location("start_estimates", BENCH)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["start_estimates"] = module  # dataclasses look their module up while the class is built
    spec.loader.exec_module(module)
    return module


bench = _bench()


def test_with_exact_history_every_estimate_after_the_first_finish_is_right(tmp_path: Path) -> None:
    # Ten identical 1-GPU jobs of 100 s on 2 GPUs under FIFO: once one has finished, the live rule knows the run
    # time exactly and nothing unforeseen happens, so a forecast built from a correct snapshot is exact.
    trace = [
        TraceJob(job_id=f"j{i}", submit_time=float(i), duration=100.0, gpus=1, user="u", name="n") for i in range(10)
    ]
    path = tmp_path / "same.csv"
    write_trace(trace, path)
    result = bench.replay(str(path), Cluster(1, 2), policy="fifo", placement="topology", every=30.0, limit=None)
    assert result.jobs == 10 and result.forecasts > 0
    before = [e for e in result.estimates if e.at < 100.0]
    after = [e for e in result.estimates if e.at > 101.0]
    assert before and all(e.outlook == "unknown_end" for e in before)  # no history, no limit: no time yet
    assert after and all(e.outlook == "estimated" for e in after)
    for e in after:
        assert e.predicted == pytest.approx(e.actual), e
    # The real starts are the replay's: two at a time, every 100 s.
    assert sorted({e.actual for e in after}) == [200.0, 201.0, 300.0, 301.0, 400.0, 401.0]


def test_the_report_and_the_calibration_come_out(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    durations = [60.0, 600.0, 120.0, 1800.0, 300.0, 90.0, 900.0, 240.0] * 5
    trace = [
        TraceJob(job_id=f"j{i}", submit_time=20.0 * i, duration=d, gpus=1 + i % 2, user=f"u{i % 3}", name=f"n{i % 4}")
        for i, d in enumerate(durations)
    ]
    path = tmp_path / "mixed.csv"
    write_trace(trace, path)
    module = tmp_path / "start_range.py"
    module.write_text(Path(start_range.__file__).read_text())
    code = bench.main(["--trace", f"{path}@1x4", "--every", "30", "--write-calibration", "--module", str(module)])
    assert code == 0
    out = capsys.readouterr().out
    for title in ("All estimates", "by how far ahead it looks", "by the job's whole wait", "share of real starts",
                  "When the shown estimate moves", "Range table fitted"):  # fmt: skip
        assert title in out
    namespace: dict[str, object] = {}
    exec(compile(module.read_text(), str(module), "exec"), namespace)
    bands = namespace["CALIBRATION"]
    assert isinstance(bands, tuple) and bands and math.isinf(bands[-1].below)
    assert "mixed.csv; fifo, topology" in str(namespace["CALIBRATED_ON"])


def test_the_run_time_experiments_replay_too(tmp_path: Path) -> None:
    trace = [
        TraceJob(job_id=f"j{i}", submit_time=10.0 * i, duration=100.0 * (1 + i % 5), gpus=1, user="u", name="n")
        for i in range(30)
    ]
    path = tmp_path / "t.csv"
    write_trace(trace, path)
    for runtime in ("residual", "median"):
        result = bench.replay(str(path), Cluster(1, 2), policy="fifo", placement="topology", every=30.0, limit=None,
                              runtime=runtime)  # fmt: skip
        assert any(e.outlook == "estimated" for e in result.estimates)


def test_bad_arguments_are_refused() -> None:
    with pytest.raises(SystemExit, match="PATH@NODESxGPUS"):
        bench.main(["--trace", "nowhere.csv"])
    with pytest.raises(SystemExit):  # a calibration is of the live forecast only
        bench.main(["--runtime", "median", "--write-calibration"])
