"""The installed ``corral`` script: usage mistakes are one ``error:`` line and exit 2, never a traceback."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

CORRAL = Path(sys.executable).with_name("corral")


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["submit", "--gpus", "abc", "--", "ls"], "Invalid value for '--gpus'"),
        (["bogus"], "No such command 'bogus'"),
        (["simulate", "--policy"], "requires an argument"),
    ],
)
def test_usage_errors_are_one_line(args: list[str], words: str, tmp_path: Path) -> None:
    result = subprocess.run(
        [str(CORRAL), *args],
        capture_output=True,
        text=True,
        env={"CORRAL_CONFIG": str(tmp_path / "c.json")},
        timeout=60,
    )
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and words in lines[0], result.stderr
    assert "Traceback" not in result.stderr


def test_bare_command_prints_help(tmp_path: Path) -> None:
    result = subprocess.run([str(CORRAL)], capture_output=True, text=True, timeout=60)
    assert "Usage: corral" in result.stdout and "simulate" in result.stdout and "Traceback" not in result.stderr
