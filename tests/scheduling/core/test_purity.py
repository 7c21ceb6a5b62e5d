"""The core must stay importable without Django or Celery: the simulator and benchmarks run it bare."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
FRAMEWORKS = ("django", "celery", "rest_framework", "kombu")


def test_core_imports_no_framework_in_a_fresh_interpreter():
    code = (
        "import json, sys\n"
        "import importlib, pkgutil, scheduling.core\n"
        "for mod in pkgutil.walk_packages(scheduling.core.__path__, 'scheduling.core.'):\n"
        "    importlib.import_module(mod.name)\n"
        f"bad = sorted(m for m in sys.modules if m.split('.')[0] in {FRAMEWORKS!r})\n"
        "print(json.dumps(bad))\n"
    )
    env_free = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO)}
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, env=env_free, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout) == []
