"""How the ``corral`` portal commands look: rich tables and lines built from the API's JSON, for people.

Kept apart from the commands so each command reads as "call the API, render the answer", and so what a user sees
can be changed in one place. Everything here takes plain API dicts and returns rich renderables; only
:func:`emit` and :func:`print_json` write.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

import typer
from rich.console import Console, RenderableType
from rich.table import Table
from rich.text import Text

from cli.api import TERMINAL_STATES, Gpu, Job, JobArray, JobEvent, Node, TenantOverview

STATE_STYLES = {"pending": "yellow", "running": "cyan", "succeeded": "green", "failed": "red", "cancelled": "magenta"}

#: Page width for tables written to a pipe or file (see :func:`emit`).
PIPED_WIDTH = 200


def emit(*renderables: RenderableType) -> None:
    """Print rich renderables on the current ``sys.stdout`` (looked up per call: typer's CliRunner swaps it).

    At a terminal, rich fits the tables to its width. Piped into ``grep`` or a file, rich's 80-column default would
    cut names and reasons with an ellipsis and pad every row with spaces, so the page is made wide and the padding
    stripped: each job stays one whole line. ``COLUMNS`` still wins when set.
    """
    piped = not sys.stdout.isatty() and "COLUMNS" not in os.environ
    console = Console(highlight=False, width=PIPED_WIDTH if piped else None)
    if console.is_terminal:
        console.print(*renderables)
        return
    with console.capture() as captured:
        console.print(*renderables)
    typer.echo("\n".join(line.rstrip() for line in captured.get().splitlines()))


def print_json(value: Any) -> None:
    """The API's own JSON for scripts (``--json``), sorted so diffs of two runs line up."""
    typer.echo(json.dumps(value, indent=2, sort_keys=True))


def submitted_line(job: Job) -> Text:
    """The answer to ``corral submit``: the id to use next, and why the job is not running yet if it is not."""
    line = Text.assemble(f"Submitted job {job['id']} (", _state(job), ")")
    if job.get("reason"):
        line.append(f": {job['reason']}")
    return line


#: The order an array's counts are printed in: what happens now first, then what is over.
COUNT_ORDER = ("running", "pending", "succeeded", "failed", "cancelled")


def array_counts(array: JobArray) -> str:
    """ "12 running · 38 pending · 950 succeeded": the states that have tasks."""
    counts = array.get("counts") or {}
    return " · ".join(f"{counts[s]:,} {s}" for s in COUNT_ORDER if counts.get(s)) or "no tasks"


def submitted_array_line(array: JobArray) -> Text:
    """The answer to ``corral submit --array``: the array's id, how many tasks it has, and the ids to use next."""
    count = array["task_count"]
    line = Text(f"Submitted array {array['id']}: {count:,} task{'s' if count != 1 else ''} ({array['spec']})")
    if array.get("limit"):
        line.append(f", at most {array['limit']} running at once")
    line.append(f". Tasks: corral jobs --array {array['id']}; cancel: corral cancel --array {array['id']}")
    return line


def jobs_table(jobs: Sequence[Job]) -> Table:
    """``corral jobs``: one line per job; the last column answers the question people ask of each state."""
    table = Table(box=None, header_style="bold", pad_edge=False)
    for column in ("ID", "NAME", "TENANT", "USER", "GPUS", "STATE", "SUBMITTED", "WHERE / WHY"):
        table.add_column(
            column, justify="right" if column in ("ID", "GPUS") else "left", no_wrap=column != "WHERE / WHY"
        )
    for job in jobs:
        table.add_row(
            str(job["id"]),
            Text(job.get("name") or ""),
            Text(job.get("tenant") or ""),
            Text(job.get("user") or ""),
            f"{job['gpu_fraction']:g}" if job.get("gpu_fraction") else str(job.get("gpus", "")),  # a share: 0.25
            _state(job),
            _when(job.get("submitted_at")),
            Text(_where_or_why(job)),
        )
    return table


def _gpus(job: Job) -> str:
    """``2``; for a share of one GPU (issue #17) ``0.25 of one GPU (online)``; for an elastic job (issue #19)
    ``6 now (elastic: 2 to 8)``."""
    fraction = job.get("gpu_fraction")
    if fraction:
        return f"{fraction:g} of one GPU ({job.get('workload_class') or 'offline'})"
    most = job.get("max_gpus")
    if most:  # elastic (issue #19): its range, and where it is in it
        return f"{job.get('size', job.get('gpus'))} now (elastic: {job.get('gpus')} to {most})"
    return str(job.get("gpus", ""))


def _share_words(share: dict[str, Any]) -> str:
    """Which GPU a running share shares, and with what: ``n2 GPU 1: 25% compute, 4.0 GiB memory, 2 other shares``."""
    memory = share.get("memory_bytes") or 0
    others = share.get("neighbours") or 0
    return (
        f"{share.get('node')} GPU {share.get('gpu_index')}: {share.get('compute_percent')}% compute, "
        f"{memory / (1 << 30):.1f} GiB memory, {others} other share{'' if others == 1 else 's'}"
    )


def job_detail(job: Job, events: Sequence[JobEvent]) -> list[RenderableType]:
    """``corral show``: the job's fields (only those that say something in its state), then its history."""
    grid = Table.grid(padding=(0, 2))
    grid.add_column(style="bold")
    grid.add_column()
    rows: list[tuple[str, str | Text]] = [
        ("Job", f"{job['id']}  {job.get('name', '')}"),
        ("State", _state(job, with_cancel=True)),
    ]
    if job.get("reason"):
        rows.append(("Reason", job["reason"]))
    estimate = job.get("start_estimate")
    if isinstance(estimate, dict) and estimate.get("text"):
        rows.append(("Expected start", str(estimate["text"])))
    rows += [
        ("Tenant / user", f"{job.get('tenant', '')} / {job.get('user', '')}"),
        ("GPUs", _gpus(job)),
        ("Command", job.get("command", "")),
    ]
    share = job.get("share")
    if isinstance(share, dict):  # a running share of one GPU (issue #17)
        rows.append(("Shares", _share_words(share)))
    array = job.get("array")
    if array is not None:
        rows.append(("Array", f"{array}, task {job.get('array_index')} (its tasks: corral jobs --array {array})"))
    limit = _time_limit(job)
    if limit:
        rows.append(("Time limit", limit))
    placement = _placement(job)
    if placement:
        rows.append(("Placement", placement))
    if job.get("attempt", 1) and job.get("attempt", 1) > 1:
        rows.append(("Attempt", str(job["attempt"])))
    if job.get("finish_reason") and job.get("state") in ("failed", "cancelled"):
        rows.append(("Why it ended", str(job["finish_reason"])))
    if job.get("exit_code") is not None and job.get("state") != "cancelled":  # a cancel's SIGTERM is no result
        rows.append(("Exit code", str(job["exit_code"])))
    if job.get("log_note"):
        rows.append(("Output", job.get("log_note", "")))  # "Output still arriving: ..." or "may be incomplete"
    for label, when in (
        ("Submitted", job.get("submitted_at")),
        ("Started", job.get("started_at")),
        ("Finished", job.get("finished_at")),
    ):
        if when:
            rows.append((label, _when(when)))
    if job.get("env"):
        rows.append(("Env", " ".join(f"{k}={v}" for k, v in sorted(job["env"].items()))))
    for label, value in rows:
        grid.add_row(label, value if isinstance(value, Text) else Text(value))
    if not events:
        return [grid]
    table = Table(title="Events", title_justify="left", box=None, header_style="bold", pad_edge=False)
    for column in ("AT", "EVENT", "CHANGE", "BY", "REASON"):
        table.add_column(column)
    for event in events:
        change = " -> ".join(s for s in (event.get("from_state"), event.get("to_state")) if s)
        table.add_row(
            _when(event.get("at")),
            Text(event.get("kind") or ""),
            change,
            Text(event.get("actor") or ""),
            Text(event.get("reason") or ""),
        )
    return [grid, "", table]


def nodes_table(nodes: Sequence[Node]) -> Table:
    """One row per GPU, grouped under its node: what an operator scans for is which GPUs are free, busy or sick."""
    table = Table(box=None, header_style="bold", pad_edge=False)
    for column in ("NODE", "STATE", "HEARTBEAT", "GPU", "MODEL", "MEMORY", "GPU STATE", "JOB"):
        table.add_column(column, justify="right" if column in ("GPU", "MEMORY", "JOB") else "left", no_wrap=True)
    for node in nodes:
        node_cells: list[str | Text] = [Text(node["name"]), _node_state(node), _ago(node.get("last_heartbeat"))]
        if not node.get("gpus"):
            table.add_row(*node_cells, "-", "", "", "", "")
        for gpu in node.get("gpus") or []:
            memory = gpu.get("memory_mb")
            table.add_row(
                *node_cells,
                str(gpu.get("index", "?")),
                Text(gpu.get("model") or ""),
                f"{memory / 1024:.0f} GiB" if memory else "",
                _gpu_state(gpu),
                str(gpu["job"]) if gpu.get("job") is not None else "",
            )
            node_cells = ["", "", ""]  # the node's columns on its first GPU row only, so nodes read as groups
    return table


def tenants_table(overview: TenantOverview) -> Table:
    """One row per tenant: its quota, what it holds and borrows now, and (fair share on) where it stands."""
    fair = overview["half_life_hours"] is not None
    table = Table(box=None, header_style="bold", pad_edge=False)
    columns = ["TENANT", "GUARANTEED", "CAP", "USER CAP", "HELD", "BORROWED", "RUNNING", "PENDING"]
    if fair:
        columns += ["USAGE (GPU-H)", "VS SHARE", "BORROWS"]
    for column in columns:
        table.add_column(column, justify="left" if column == "TENANT" else "right", no_wrap=True)
    for tenant in overview["tenants"]:
        cells = [
            tenant["slug"],
            str(tenant["guaranteed_gpus"]),
            _limit(tenant["gpu_cap"]),
            _limit(tenant["user_cap"]),
            f"{tenant['gpus_held']:g}",  # a share of a GPU counts as its fraction (issue #17): 2.25
            f"{tenant['borrowed']:g}",
            str(tenant["running_jobs"]),
            str(tenant["pending_jobs"]),
        ]
        if fair:
            ratio, order = tenant["ratio"], tenant["borrow_order"]
            cells += [
                f"{tenant['usage_gpu_hours'] or 0:,.1f}",
                "no share" if ratio is None else f"{ratio:.2f}x",
                "" if order is None else f"{order} of {tenant['tenant_count']}",
            ]
        table.add_row(*cells)
    return table


def fair_share_line(overview: TenantOverview) -> Text:
    """Under the table: whether guarantees and fair share are in effect under the live policy, and how."""
    policy, half_life = overview["policy"], overview["half_life_hours"]
    if not overview["quota_layer"]:
        return Text(
            f"The live policy {policy} has no +quota layer: guarantees, borrowing and fair share are not in effect.",
            style="yellow",
        )
    if half_life is None:
        return Text(f"Live policy {policy}; fair share is off: idle GPUs are lent in the policy's order.")
    return Text(
        f"Live policy {policy}; idle GPUs are lent first to the tenants that used the least of their share "
        f"(usage half-life {half_life:g} h)."
    )


def _limit(value: int | None) -> str:
    return "-" if value is None else str(value)


def _state(job: Job, *, with_cancel: bool = False) -> Text:
    state = job.get("state", "?")
    text = Text(state, style=STATE_STYLES.get(state, ""))
    if with_cancel and job.get("cancel_requested") and state not in TERMINAL_STATES:
        text.append(" (cancel requested)", style="magenta")
    return text


def _time_limit(job: Job, now: datetime | None = None) -> str:
    """``2h``, with what the running attempt has left (``2h (1h 13m 5s left)``); empty without a limit."""
    limit = job.get("time_limit")
    if not limit:
        return ""
    # Imported here, not with the module: the commands load without the scheduling package (a laptop's `corral jobs`
    # starts fast; tests/cli/test_parsing.py holds it), and only a job with a limit needs the one duration printer.
    from scheduling.core.durations import format_duration

    text = format_duration(limit)
    started = _parse_time(job.get("started_at"))
    if job.get("state") == "running" and started is not None:
        elapsed = ((now or datetime.now(tz=UTC)) - started).total_seconds()
        text += f" ({format_duration(max(0.0, limit - elapsed))} left)"
    return text


def _placement(job: Job) -> str:
    where = ", ".join(job.get("nodes") or []) or job.get("node") or ""
    indices = job.get("gpu_indices") or []
    if not where:
        return ""
    if not indices:
        return where
    if job.get("gpu_fraction"):  # a share of one GPU (issue #17): "GPUs 0" would read as the whole GPU
        return f"{where}  GPU {indices[0]} (shared)"
    return f"{where}  GPUs {', '.join(str(i) for i in indices)}"


def _where_or_why(job: Job) -> str:
    """The column people scan ``corral jobs`` for: why it waits, where it runs, or how it ended."""
    state = job.get("state")
    if state == "pending":
        return job.get("reason") or ""
    if state == "running":
        return _placement(job)
    if job.get("finish_reason"):  # the portal's words: "time limit of 20s exceeded", "cancelled by alice"
        return str(job["finish_reason"])
    if job.get("exit_code") is not None:  # a portal from before finish_reason
        return f"exit {job['exit_code']}"
    return ""


def _node_state(node: Node) -> Text:
    state = node.get("state", "?")
    text = Text(state, style={"up": "green", "draining": "yellow", "down": "red"}.get(state, ""))
    if node.get("state_reason"):
        text.append(f" ({node['state_reason']})")
    power = node.get("power", "on")
    if power != "on":  # energy saving (issue #19)
        text.append(" powered down" if power == "off" else f" {power}", style="yellow")
    pool = node.get("pool", "training")
    if pool != "training":  # a serving system's node (issue #19)
        loan = "returning" if node.get("returning") else "lent" if node.get("lent") else "not lent"
        text.append(f" [pool {pool}: {loan}]")
    return text


def _gpu_state(gpu: Gpu) -> Text:
    """``free``, ``free (shared)``, ``allocated``, ``shared (3 shares)``, or the GPU's health when it is not healthy
    (with the fault, e.g. an XID)."""
    state = gpu.get("state") or gpu.get("health") or "?"
    styles = {"free": "green", "allocated": "cyan", "shared": "cyan", "stopping": "yellow", "cordoned": "yellow"}
    text = Text(state, style=styles.get(state, "red"))
    if state == "shared":
        clients = gpu.get("clients", 0)
        text.append(f" ({clients} share{'' if clients == 1 else 's'})")
    elif state == "free" and gpu.get("shared"):
        text.append(" (shared)")  # it takes shares of a GPU only, never a whole-GPU job (issue #17)
    elif state not in ("free", "allocated") and gpu.get("health_detail"):
        text.append(f" ({gpu['health_detail']})")
    return text


def _parse_time(value: str | None) -> datetime | None:
    if not value:
        return None
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        return None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


def _when(value: str | None) -> str:
    """An API timestamp in the user's local time; unparseable values are shown as sent rather than hidden."""
    parsed = _parse_time(value)
    if parsed is None:
        return value or ""
    return parsed.astimezone().strftime("%Y-%m-%d %H:%M:%S")


def _ago(value: str | None) -> str:
    """A heartbeat as an age (``4s ago``): what an operator checks is how stale it is, not the wall time."""
    parsed = _parse_time(value)
    if parsed is None:
        return value or "never"
    seconds = max(0, int((datetime.now(tz=UTC) - parsed).total_seconds()))
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds // size}{unit} ago"
    return f"{seconds}s ago"
