"""What ``corral submit`` makes of its arguments: the command line the node runs, a default job name, the job's
environment and its time limit. Pure parsing, no portal call, so each rule can be tested alone."""

from __future__ import annotations

import os
import re
import shlex
from collections.abc import Sequence
from pathlib import PurePosixPath

from cli.errors import CliError

#: File suffixes that name the interesting part of a command, used to derive a default job name.
SCRIPT_SUFFIXES = frozenset({".py", ".sh", ".bash", ".jl", ".r", ".lua", ".pl", ".rb", ".ipynb"})


def command_string(argv: Sequence[str]) -> str:
    """The command line the node will run.

    A single argument is sent verbatim so ``corral submit -- "python a.py && python b.py"`` keeps its shell syntax;
    several arguments are quoted with :func:`shlex.join` so ``-- python -c "print('a b')"`` survives the node's shell.
    """
    return argv[0] if len(argv) == 1 else shlex.join(argv)


def derive_name(argv: Sequence[str]) -> str:
    """A short default job name from the command: the script's stem, a ``-m`` module's last part, or the program.

    ``python train.py --lr 3e-4`` -> ``train``; ``python -m pkg.finetune`` -> ``finetune``; ``nvidia-smi`` ->
    ``nvidia-smi``. Good enough to tell jobs apart in ``corral jobs``; ``--name`` overrides it.
    """
    words = list(argv)
    if len(words) == 1:
        try:
            words = shlex.split(words[0])
        except ValueError:
            words = words[0].split()
    while words and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*=.*", words[0]):
        words = words[1:]  # leading VAR=value assignments are not the program
    if not words:
        return "job"
    name = PurePosixPath(words[0]).name
    for i, word in enumerate(words[1:], start=1):
        if word == "-m" and i + 1 < len(words):
            name = words[i + 1].rsplit(".", 1)[-1]
            break
        if not word.startswith("-") and PurePosixPath(word).suffix.lower() in SCRIPT_SUFFIXES:
            name = PurePosixPath(word).stem
            break
    return re.sub(r"[^A-Za-z0-9._-]+", "-", name).strip("-.")[:64] or "job"


def parse_env(pairs: Sequence[str]) -> dict[str, str]:
    """``KEY=VALUE`` pairs to a dict; a bare ``KEY`` copies the local value, as ``docker run -e KEY`` does."""
    env: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", key):
            raise CliError(f"--env expects KEY=VALUE with KEY a variable name, got {pair!r}", exit_code=2)
        if not sep:
            if key not in os.environ:
                raise CliError(f"--env {key}: not set in your environment; use --env {key}=VALUE", exit_code=2)
            value = os.environ[key]
        env[key] = value
    return env


def parse_time_limit(text: str | None) -> int | None:
    """``--time-limit`` in seconds: ``2h``, ``90m``, ``1d 12h`` or plain seconds (the grammar the web form takes)."""
    if text is None:
        return None
    # Imported here, not with the module: the commands load without the scheduling package (a laptop's `corral jobs`
    # starts fast; tests/cli/test_parsing.py holds it), and only a submit with a limit needs the one grammar.
    from scheduling.core.durations import parse_duration

    try:
        seconds = parse_duration(text)
    except ValueError as exc:
        raise CliError(f"--time-limit: {exc}", exit_code=2) from None
    if seconds < 1:
        raise CliError(f"--time-limit must be at least 1 second, got {text!r}", exit_code=2)
    return seconds


def parse_gpus(gpus: float, *, gpu_memory: str | None = None, workload_class: str | None = None) -> int | float:
    """``--gpus``: a whole number of GPUs, or a share of one GPU in (0, 1) such as 0.25 (issue #17), checked here so
    a typo is one line and exit code 2 before any request; the portal checks the rest (memory, shared GPUs)."""
    if gpus != gpus:  # nan; 0 and below go to the portal, whose 400 names the field (as before shares)
        raise CliError("--gpus must be a number: whole GPUs, or a share of one GPU like 0.25", exit_code=2)
    if gpus >= 1 and not float(gpus).is_integer():
        raise CliError(
            f"--gpus above 1 must be a whole number (a share is below 1, like 0.5), got {gpus:g}", exit_code=2
        )
    if gpus >= 1 and (gpu_memory is not None or workload_class is not None):
        raise CliError("--gpu-memory and --class are for a share of one GPU (--gpus below 1, like 0.25)", exit_code=2)
    if workload_class is not None and workload_class not in ("online", "offline"):
        raise CliError(f"--class must be online or offline, got {workload_class!r}", exit_code=2)
    return int(gpus) if gpus >= 1 or float(gpus).is_integer() else float(gpus)


def parse_latency_slo(text: str | None, *, gpus: float, workload_class: str | None) -> int | None:
    """``--latency-slo-ms``: an online share's p99 target, a whole number of milliseconds. What the command line
    alone can tell is checked here (a number, above 0, for ``--class online`` with a share), one line and exit code 2;
    the portal holds the rest of the rule (its upper bound) and answers a 400 naming ``latency_slo_ms``."""
    if text is None:
        return None
    try:
        value = int(text.strip())
    except ValueError:
        raise CliError(f"--latency-slo-ms must be a whole number of milliseconds, got {text!r}", exit_code=2) from None
    if value < 1:
        raise CliError(f"--latency-slo-ms must be at least 1 millisecond, got {value}", exit_code=2)
    if gpus >= 1 or workload_class != "online":
        raise CliError(
            "--latency-slo-ms is for an online share of one GPU (--gpus below 1 and --class online)", exit_code=2
        )
    return value
