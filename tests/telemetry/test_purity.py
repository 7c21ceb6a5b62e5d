"""The telemetry core must import without Django or Celery: the node agent runs it with neither configured."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

PURE_MODULES = [
    "telemetry.sample",
    "telemetry.throttle",
    "telemetry.xid",
    "telemetry.buffer",
    "telemetry.health",
    "telemetry.retry",
    "telemetry.probe",
    "telemetry.probe.nvml",
    "telemetry.probe.simulated",
    "telemetry.schema",
    "telemetry.table",
    "telemetry.csvio",
    "telemetry.synth",
    "telemetry.predict.features",
    "telemetry.predict.labels",
    "telemetry.predict.estimators",
    "telemetry.predict.alarms",
    "telemetry.predict.artifact",
    "telemetry.predict.training",
    "telemetry.predict.evaluate",
    "telemetry.cli",
]

ROOT = Path(__file__).resolve().parents[2]


def test_pure_modules_import_without_django_or_celery() -> None:
    code = (
        "import sys\n"
        f"for name in {PURE_MODULES!r}: __import__(name)\n"
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in {'django', 'celery', 'rest_framework'})\n"
        "print(','.join(bad))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""
