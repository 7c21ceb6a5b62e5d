"""The ground floor must import without Django or Celery: the node agent and the CLI run it with neither
configured. Every module of the telemetry library and of the scheduling package is imported in a fresh interpreter
(found by walking the packages, so a new module is checked without anyone listing it). The static side of the
same rule is an import contract (tests/test_architecture.py)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_pure_modules_import_without_django_or_celery() -> None:
    code = (
        "import importlib, pkgutil, sys\n"
        "import scheduling, telemetry\n"
        "for package in (scheduling, telemetry):\n"
        "    for mod in pkgutil.walk_packages(package.__path__, package.__name__ + '.'):\n"
        "        importlib.import_module(mod.name)\n"
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in {'django', 'celery', 'rest_framework', 'portal'})\n"
        "print(','.join(bad))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""
