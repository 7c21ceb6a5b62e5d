"""The user-facing ``corral`` commands that talk to a portal: login, submit, jobs, show, logs, cancel, nodes, tenants,
history.

Each command parses its arguments, makes one or two calls through :class:`cli.api.Client`, and renders the answer
with :mod:`cli.render` (a rich table for people, ``--json`` for scripts). Every failure arrives as a
:class:`~cli.errors.CliError`, which :func:`_friendly` prints as one ``error: ...`` line on stderr with a non-zero
exit code; no traceback reaches a user.
"""

from __future__ import annotations

import csv
import functools
import io
import os
import re
import shlex
import time
from collections.abc import Callable, Sequence
from pathlib import Path, PurePosixPath
from typing import Annotated, ParamSpec, TypeVar

import typer

from cli import config, render
from cli.api import TERMINAL_STATES, Client
from cli.durations import parse_duration
from cli.errors import CliError

P = ParamSpec("P")
R = TypeVar("R")

#: File suffixes that name the interesting part of a command, used to derive a default job name.
SCRIPT_SUFFIXES = frozenset({".py", ".sh", ".bash", ".jl", ".r", ".lua", ".pl", ".rb", ".ipynb"})

#: Seconds ``logs -f`` keeps retrying while the portal is unreachable or failing, before it gives up.
FOLLOW_PATIENCE = 30.0

JsonFlag = Annotated[bool, typer.Option("--json", help="Print the portal's JSON instead of a table.")]


def register(app: typer.Typer) -> None:
    """Add the portal commands to the ``corral`` app (called by ``cli.main``)."""
    for fn in (login, logout, submit, jobs, show, logs, cancel, nodes, tenants, history):
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
    try:
        saved = config.load_file()
    except CliError:
        # Logging in rewrites the file, so it is the natural way out of a broken one: do not refuse it.
        typer.echo(f"note: the config file {config.config_path()} is unreadable; it will be replaced", err=True)
        saved = config.Config()
    base = config.normalize_url(url or os.environ.get("CORRAL_URL") or saved.url)
    if username is None:
        username = typer.prompt("Username", default=saved.username or None)
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


def parse_time_limit(text: str | None) -> int | None:
    """``--time-limit`` in seconds: ``2h``, ``90m``, ``1d 12h`` or plain seconds (the grammar the web form takes)."""
    if text is None:
        return None
    try:
        seconds = parse_duration(text)
    except ValueError as exc:
        raise CliError(f"--time-limit: {exc}", exit_code=2) from None
    if seconds < 1:
        raise CliError(f"--time-limit must be at least 1 second, got {text!r}", exit_code=2)
    return seconds


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
    time_limit: Annotated[
        str | None,
        typer.Option(
            "--time-limit",
            metavar="DURATION",
            help="Stop the job (it fails) once it has run this long: 2h, 90m, 1d 12h or seconds. "
            "Short limits may also use GPUs that are cordoned because they are predicted to fail.",
        ),
    ] = None,
    as_json: JsonFlag = False,
) -> None:
    """Submit a job; its command goes after `--`.

    Example: corral submit --gpus 2 --time-limit 4h -e WANDB_MODE=offline -- python train.py --epochs 10
    """
    limit = parse_time_limit(time_limit)
    job_env = parse_env(env or [])
    with _client() as client:
        job = client.submit_job(
            name=name or derive_name(command),
            command=command_string(command),
            gpus=gpus,
            tenant=tenant,
            env=job_env,
            time_limit=limit,
        )
    if as_json:
        render.print_json(job)
        return
    render.emit(render.submitted_line(job))


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
        render.print_json(found)
        return
    if not found:
        typer.echo("No jobs.")
        return
    if len(found) == limit:
        typer.echo(f"(the newest {limit} jobs; --limit shows more)", err=True)  # stderr: stdout stays the table
    render.emit(render.jobs_table(found))


@_friendly
def show(job_id: Annotated[int, typer.Argument(metavar="ID", help="Job id.")], as_json: JsonFlag = False) -> None:
    """Show one job: state, why it is waiting, where it runs, exit code, and its history."""
    with _client() as client:
        job = client.get_job(job_id)
        events = client.job_events(job_id)
    if as_json:
        render.print_json({**job, "events": events})
        return
    render.emit(*render.job_detail(job, events))


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
        patient = functools.partial(_patiently, enabled=follow, interval=interval)
        offset = 0
        while True:
            chunk = patient(functools.partial(client.job_log, job_id, offset))
            if chunk.data:
                typer.echo(chunk.data, nl=False)  # raw bytes: a chunk may end inside a multi-byte character
            progressed, offset = chunk.next_offset > offset, chunk.next_offset
            if progressed:
                continue  # the server may cap a chunk; ask again at once until the log is drained
            if not follow:
                return
            job_state = chunk.job_state or patient(functools.partial(client.get_job, job_id))["state"]
            if job_state in TERMINAL_STATES:
                break
            time.sleep(interval)
        job = patient(functools.partial(client.get_job, job_id))
    ended = f"job {job_id} {job['state']}"
    if job.get("exit_code") is not None:
        ended += f" (exit code {job['exit_code']})"
    typer.echo(ended, err=True)  # stderr, so `corral logs -f 12 > out.txt` captures only the job's output


def _patiently(call: Callable[[], R], *, enabled: bool, interval: float) -> R:
    """Run ``call``; when ``enabled``, retry transient failures for up to :data:`FOLLOW_PATIENCE` seconds.

    Following a job can take hours, and a portal restart or one 5xx in that time should not end it; a one-shot
    command, on the other hand, reports the first failure at once.
    """
    deadline = time.monotonic() + FOLLOW_PATIENCE
    while True:
        try:
            return call()
        except CliError as exc:
            if not (enabled and exc.transient) or time.monotonic() >= deadline:
                raise
        time.sleep(interval)


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
        render.print_json(found)
        return
    if not found:
        typer.echo("No nodes.")
        return
    render.emit(render.nodes_table(found))


# -- tenants ---------------------------------------------------------------------------------------------------


@_friendly
def tenants(as_json: JsonFlag = False) -> None:
    """Your tenants: quota, GPUs held and borrowed, and their place in the fair-share order of borrowing."""
    with _client() as client:
        overview = client.tenant_overview()
    if as_json:
        render.print_json(overview)
        return
    if not overview["tenants"]:
        typer.echo("You belong to no tenant.")
        return
    render.emit(render.tenants_table(overview), render.fair_share_line(overview))


# -- history ---------------------------------------------------------------------------------------------------


@_friendly
def history(
    out: Annotated[
        Path | None, typer.Option("--out", "-o", help="Write the CSV here instead of to stdout.", dir_okay=False)
    ] = None,
    since: Annotated[str | None, typer.Option(help="First submission to include (date or ISO date-time).")] = None,
    until: Annotated[str | None, typer.Option(help="Only submissions before this (date or ISO date-time).")] = None,
) -> None:
    """Export the cluster's finished jobs as a trace (admins), to replay with `corral simulate --trace FILE`."""
    with _client() as client:
        data = client.history_trace(since, until)
    if out is None:
        typer.echo(data, nl=False)
        return
    try:
        out.write_bytes(data)
    except OSError as exc:
        raise CliError(f"cannot write {out}: {exc.strerror or exc}") from exc
    jobs = max(0, sum(1 for _ in csv.reader(io.StringIO(data.decode(errors="replace")))) - 1)  # names may hold newlines
    typer.echo(f"Wrote {jobs} finished job{'s' if jobs != 1 else ''} to {out}.", err=True)
