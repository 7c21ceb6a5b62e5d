"""Running the site's power commands: the one boundary between Corral and the machines' power.

A command is the setting's words (split as a shell would, but run without one) followed by the node's name, as
Slurm runs its SuspendProgram and ResumeProgram. It runs in its own process group, so a timeout kills whatever
it started too (an ``ipmitool`` or ``ssh`` child would otherwise keep the pipe open and hang the caller). Exit 0
means done; anything else (a non-zero exit, a timeout, a command that cannot start) is a failure whose detail is
kept for the operator.
"""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
from dataclasses import dataclass

#: Characters of the command's output kept in the detail (the node row's column holds 255).
DETAIL_CHARS = 160


@dataclass(frozen=True)
class CommandResult:
    ok: bool
    detail: str


def _tail(output: bytes) -> str:
    text = " ".join(output.decode("utf-8", "replace").split())
    return text[-DETAIL_CHARS:]


def run_power_command(command: str, node_name: str, *, timeout: float) -> CommandResult:
    """Run ``command <node_name>`` and say how it went. Never raises for the command's own faults."""
    try:
        argv = [*shlex.split(command), node_name]
    except ValueError as exc:  # an unbalanced quote in the setting
        return CommandResult(False, f"cannot parse the command: {exc}")
    if len(argv) < 2:
        return CommandResult(False, "no command configured")
    try:
        process = subprocess.Popen(  # noqa: S603 - the site's own command, no shell, the node name as one argument
            argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    except OSError as exc:
        return CommandResult(False, f"{argv[0]}: {exc.strerror or exc}")
    try:
        output, _ = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        try:
            os.killpg(process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        output, _ = process.communicate()
        return CommandResult(False, f"timed out after {timeout:g} s {_tail(output)}".strip())
    if process.returncode != 0:
        return CommandResult(False, f"exit {process.returncode}: {_tail(output)}".strip().rstrip(":"))
    return CommandResult(True, _tail(output))
