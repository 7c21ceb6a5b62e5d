"""The user-facing ``corral`` commands that talk to a portal: login, submit, jobs, show, logs, cancel, nodes.

Each command parses its arguments, makes one or two calls through :class:`cli.api.Client`, and renders the answer
(a rich table for people, ``--json`` for scripts). Every failure arrives as a :class:`~cli.errors.CliError`, which
:func:`_friendly` prints as one ``error: ...`` line on stderr with a non-zero exit code; no traceback reaches a user.
"""

from __future__ import annotations

import functools
import json
import os
import re
import shlex
import sys
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import PurePosixPath
from typing import Annotated, Any, ParamSpec, TypeVar

import typer
from rich.console import Console, RenderableType
from rich.table import Table
from rich.text import Text

from cli import config
from cli.api import Client, Gpu, Job, Node
from cli.errors import CliError

P = ParamSpec("P")
R = TypeVar("R")

#: States a job never leaves; ``logs -f`` stops once the job is in one and its log is drained. Kept as plain strings
#: (the wire format) so the client does not depend on the server's enum for what is a public API contract.
TERMINAL_STATES = frozenset({"succeeded", "failed", "cancelled"})

STATE_STYLES = {"pending": "yellow", "running": "cyan", "succeeded": "green", "failed": "red", "cancelled": "magenta"}

#: File suffixes that name the interesting part of a command, used to derive a default job name.
SCRIPT_SUFFIXES = frozenset({".py", ".sh", ".bash", ".jl", ".r", ".lua", ".pl", ".rb", ".ipynb"})

#: Page width for tables written to a pipe or file (see :func:`_emit`).
PIPED_WIDTH = 200

JsonFlag = Annotated[bool, typer.Option("--json", help="Print the portal's JSON instead of a table.")]


def register(app: typer.Typer) -> None:
    """Add the portal commands to the ``corral`` app (called by ``cli.main``)."""
    for fn in (login, logout, submit, jobs, show, logs, cancel, nodes):
        app.command(fn.__name__)(fn)


def _friendly(fn: Callable[P, R]) -> Callable[P, R]:
    """Print a :class:`CliError` as one stderr line and exit with its code; turn Ctrl-C into a quiet exit 130.

    Anything else is a bug in the client or a surprise from the server; it is still reported as one line unless
    ``CORRAL_DEBUG`` is set, because a user cannot act on a traceback but a developer chasing it can ask for one.
    """

    @functools.wraps(fn)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return fn(*args, **kwargs)
        except CliError as exc:
            typer.echo(f"error: {exc.message}", err=True)
            raise typer.Exit(exc.exit_code) from None
        except KeyboardInterrupt:
            raise typer.Exit(130) from None
        except (typer.Exit, typer.Abort):
            raise
        except Exception as exc:
            if os.environ.get("CORRAL_DEBUG"):
                raise
            typer.echo(f"error: unexpected {type(exc).__name__}: {exc} (set CORRAL_DEBUG=1 for a traceback)", err=True)
            raise typer.Exit(1) from None

    return wrapper


def _client() -> Client:
    settings = config.load()
    return Client(settings.url, settings.token)


def _emit(*renderables: RenderableType) -> None:
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


def _print_json(value: Any) -> None:
    typer.echo(json.dumps(value, indent=2, sort_keys=True))


# -- login / logout --------------------------------------------------------------------------------------------


@_friendly
def login(
    url: Annotated[
        str | None,
        typer.Option(help="Portal URL (default: $CORRAL_URL, else the saved URL, else http://127.0.0.1:8000)."),
    ] = None,
    username: Annotated[str | None, typer.Option("--username", "-u", help="Prompted for when absent.")] = None,
    password: Annotated[str | None, typer.Option(help="Prompted for (hidden) when absent.")] = None,
) -> None:
    """Log in to a portal and save its URL and an API token in the config file (mode 0600)."""
    current = config.load()
    base = config.normalize_url(url) if url else current.url
    if username is None:
        username = typer.prompt("Username", default=current.username or None)
    if password is None:
        password = typer.prompt("Password", hide_input=True)
    with Client(base) as client:
        token = client.obtain_token(username, password)
    path = config.save(config.Config(url=base, token=token, username=username))
    typer.echo(f"Logged in to {base} as {username} (token saved in {path}).")
    if os.environ.get("CORRAL_TOKEN"):
        typer.echo("note: CORRAL_TOKEN is set and takes precedence over the saved token.", err=True)


@_friendly
def logout() -> None:
    """Forget the saved token (the URL and username stay for the next login)."""
    saved = config.load_file()
    if saved.token is None:
        typer.echo("Not logged in.")
        return
    path = config.save(config.Config(url=saved.url, token=None, username=saved.username))
    typer.echo(f"Logged out of {saved.url} (token removed from {path}).")


# -- submit ----------------------------------------------------------------------------------------------------


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


@_friendly
def submit(
    command: Annotated[
        list[str], typer.Argument(metavar="COMMAND", help="The command to run, after `--`.", show_default=False)
    ],
    gpus: Annotated[int, typer.Option("--gpus", "-g", help="GPUs the job needs.")] = 1,
    name: Annotated[
        str | None, typer.Option("--name", "-n", help="Job name (default: derived from the command).")
    ] = None,
    tenant: Annotated[
        str | None, typer.Option("--tenant", "-t", help="Tenant slug; needed only if you belong to several.")
    ] = None,
    env: Annotated[
        list[str] | None, typer.Option("--env", "-e", help="KEY=VALUE for the job's environment; repeatable.")
    ] = None,
    as_json: JsonFlag = False,
) -> None:
    """Submit a job: corral submit --gpus 2 -- python train.py --epochs 10"""
    with _client() as client:
        job = client.submit_job(
            name=name or derive_name(command),
            command=command_string(command),
            gpus=gpus,
            tenant=tenant,
            env=parse_env(env or []),
        )
    if as_json:
        _print_json(job)
        return
    line = Text.assemble(f"Submitted job {job['id']} (", _state(job), ")")
    if job.get("reason"):
        line.append(f": {job['reason']}")
    _emit(line)


# -- jobs / show -----------------------------------------------------------------------------------------------


@_friendly
def jobs(
    state: Annotated[
        list[str] | None,
        typer.Option(
            "--state",
            "-s",
            help="pending, running, succeeded, failed or cancelled; repeat or comma-separate for several.",
        ),
    ] = None,
    tenant: Annotated[str | None, typer.Option("--tenant", "-t", help="Only this tenant's jobs.")] = None,
    user: Annotated[str | None, typer.Option("--user", "-u", help="Only this user's jobs.")] = None,
    mine: Annotated[bool, typer.Option("--mine", "-m", help="Only your own jobs.")] = False,
    limit: Annotated[int, typer.Option("--limit", "-l", min=1, help="Show at most this many jobs, newest first.")] = 50,
    as_json: JsonFlag = False,
) -> None:
    """List the jobs you can see: every job of your tenants (of all tenants for staff), newest first."""
    states = [s.strip() for value in state or [] for s in value.split(",") if s.strip()]
    with _client() as client:
        found = client.list_jobs(states=states, tenant=tenant, user=user, mine=mine, limit=limit)
    if as_json:
        _print_json(found)
        return
    if not found:
        typer.echo("No jobs.")
        return
    if len(found) == limit:
        typer.echo(f"(the newest {limit} jobs; --limit shows more)", err=True)  # stderr: stdout stays the table
    table = Table(box=None, header_style="bold", pad_edge=False)
    for column in ("ID", "NAME", "TENANT", "USER", "GPUS", "STATE", "SUBMITTED", "WHERE / WHY"):
        table.add_column(
            column, justify="right" if column in ("ID", "GPUS") else "left", no_wrap=column != "WHERE / WHY"
        )
    for job in found:
        table.add_row(
            str(job["id"]),
            Text(job.get("name") or ""),
            Text(job.get("tenant") or ""),
            Text(job.get("user") or ""),
            str(job.get("gpus", "")),
            _state(job),
            _when(job.get("submitted_at")),
            Text(_where_or_why(job)),
        )
    _emit(table)


@_friendly
def show(job_id: Annotated[int, typer.Argument(metavar="ID", help="Job id.")], as_json: JsonFlag = False) -> None:
    """Show one job: state, why it is waiting, where it runs, exit code, and its history."""
    with _client() as client:
        job = client.get_job(job_id)
        events = client.job_events(job_id)
    if as_json:
        _print_json({**job, "events": events})
        return
    grid = Table.grid(padding=(0, 2))
    grid.add_column(style="bold")
    grid.add_column()
    rows: list[tuple[str, str | Text]] = [
        ("Job", f"{job['id']}  {job.get('name', '')}"),
        ("State", _state(job, with_cancel=True)),
    ]
    if job.get("reason"):
        rows.append(("Reason", job["reason"]))
    rows += [
        ("Tenant / user", f"{job.get('tenant', '')} / {job.get('user', '')}"),
        ("GPUs", str(job.get("gpus", ""))),
        ("Command", job.get("command", "")),
    ]
    placement = _placement(job)
    if placement:
        rows.append(("Placement", placement))
    if job.get("attempt", 1) and job.get("attempt", 1) > 1:
        rows.append(("Attempt", str(job["attempt"])))
    if job.get("exit_code") is not None:
        rows.append(("Exit code", str(job["exit_code"])))
    for label, key in (("Submitted", "submitted_at"), ("Started", "started_at"), ("Finished", "finished_at")):
        if job.get(key):
            rows.append((label, _when(job.get(key))))
    if job.get("env"):
        rows.append(("Env", " ".join(f"{k}={v}" for k, v in sorted(job["env"].items()))))
    for label, value in rows:
        grid.add_row(label, value if isinstance(value, Text) else Text(value))
    if not events:
        _emit(grid)
        return
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
    _emit(grid, "", table)


# -- logs / cancel ---------------------------------------------------------------------------------------------


@_friendly
def logs(
    job_id: Annotated[int, typer.Argument(metavar="ID", help="Job id.")],
    follow: Annotated[
        bool, typer.Option("--follow", "-f", help="Keep printing new output until the job ends.")
    ] = False,
    interval: Annotated[float, typer.Option(min=0.1, help="Seconds between polls with --follow.")] = 1.0,
) -> None:
    """Print a job's output (stdout and stderr together); with -f, follow it until the job finishes."""
    with _client() as client:
        offset = 0
        while True:
            chunk = client.job_log(job_id, offset)
            if chunk.data:
                typer.echo(chunk.data, nl=False)  # raw bytes: a chunk may end inside a multi-byte character
            progressed, offset = chunk.next_offset > offset, chunk.next_offset
            if progressed:
                continue  # the server may cap a chunk; ask again at once until the log is drained
            if not follow:
                return
            job_state = chunk.job_state or client.get_job(job_id)["state"]
            if job_state in TERMINAL_STATES:
                break
            time.sleep(interval)
        job = client.get_job(job_id)
    ended = f"job {job_id} {job['state']}"
    if job.get("exit_code") is not None:
        ended += f" (exit code {job['exit_code']})"
    typer.echo(ended, err=True)  # stderr, so `corral logs -f 12 > out.txt` captures only the job's output


@_friendly
def cancel(job_ids: Annotated[list[int], typer.Argument(metavar="ID...", help="Job ids.", show_default=False)]) -> None:
    """Cancel jobs. A pending job is cancelled at once; a running one is stopped by its node first."""
    failed = 0
    with _client() as client:
        for job_id in job_ids:
            try:
                job = client.cancel_job(job_id)
            except CliError as exc:
                if len(job_ids) == 1:
                    raise
                typer.echo(f"error: {exc.message}", err=True)
                failed += 1
                continue
            if job["state"] == "cancelled":
                typer.echo(f"Cancelled job {job_id}.")
            else:
                typer.echo(f"Cancel requested for job {job_id} ({job['state']}); its node is stopping it.")
    if failed:
        raise typer.Exit(1)


# -- nodes -----------------------------------------------------------------------------------------------------


@_friendly
def nodes(as_json: JsonFlag = False) -> None:
    """List nodes and the state of each GPU (free, busy with a job, or unhealthy)."""
    with _client() as client:
        found = client.list_nodes()
    if as_json:
        _print_json(found)
        return
    if not found:
        typer.echo("No nodes.")
        return
    table = Table(box=None, header_style="bold", pad_edge=False)
    for column in ("NODE", "STATE", "HEARTBEAT", "GPU", "MODEL", "MEMORY", "GPU STATE", "JOB"):
        table.add_column(column, justify="right" if column in ("GPU", "MEMORY", "JOB") else "left", no_wrap=True)
    for node in found:
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
    _emit(table)


# -- rendering helpers -----------------------------------------------------------------------------------------


def _state(job: Job, *, with_cancel: bool = False) -> Text:
    state = job.get("state", "?")
    text = Text(state, style=STATE_STYLES.get(state, ""))
    if with_cancel and job.get("cancel_requested") and state not in TERMINAL_STATES:
        text.append(" (cancel requested)", style="magenta")
    return text


def _placement(job: Job) -> str:
    where = ", ".join(job.get("nodes") or []) or job.get("node") or ""
    indices = job.get("gpu_indices") or []
    if not where:
        return ""
    return f"{where}  GPUs {', '.join(str(i) for i in indices)}" if indices else where


def _where_or_why(job: Job) -> str:
    """The column people scan ``corral jobs`` for: why it waits, where it runs, or how it ended."""
    state = job.get("state")
    if state == "pending":
        return job.get("reason") or ""
    if state == "running":
        return _placement(job)
    if job.get("exit_code") is not None:
        return f"exit {job['exit_code']}"
    return ""


def _node_state(node: Node) -> Text:
    state = node.get("state", "?")
    text = Text(state, style={"up": "green", "draining": "yellow", "down": "red"}.get(state, ""))
    if node.get("state_reason"):
        text.append(f" ({node['state_reason']})")
    return text


def _gpu_state(gpu: Gpu) -> Text:
    """``free``, ``allocated``, or the GPU's health when it is not healthy (with the fault, e.g. an XID)."""
    state = gpu.get("state") or gpu.get("health") or "?"
    styles = {"free": "green", "allocated": "cyan", "cordoned": "yellow"}
    text = Text(state, style=styles.get(state, "red"))
    if state not in ("free", "allocated") and gpu.get("health_detail"):
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
