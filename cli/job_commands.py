"""``corral submit``, ``jobs``, ``show``, ``logs`` and ``cancel``: a user's own jobs, from submission to the end.

Each command parses its arguments, makes one or two calls through :class:`cli.api.Client`, and renders the answer
with :mod:`cli.render` (a rich table for people, ``--json`` for scripts).
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from typing import Annotated, TypeVar

import typer

from cli import render
from cli.api import SETTLED_LOG_STATES, TERMINAL_STATES, Client, Job, LogChunk
from cli.command_base import JsonFlag, friendly, portal_client
from cli.errors import CliError
from cli.job_spec import command_string, derive_name, parse_env, parse_gpus, parse_latency_slo, parse_time_limit

R = TypeVar("R")

#: Seconds ``logs -f`` keeps retrying while the portal is unreachable or failing, before it gives up.
FOLLOW_PATIENCE = 30.0


@friendly
def submit(
    command: Annotated[
        list[str], typer.Argument(metavar="COMMAND", help="The command to run, after `--`.", show_default=False)
    ],
    gpus: Annotated[
        float,
        typer.Option(
            "--gpus", "-g", help="GPUs the job needs: whole GPUs, or a share of one GPU such as 0.25 (run under MPS)."
        ),
    ] = 1,
    max_gpus: Annotated[
        int | None,
        typer.Option(
            "--max-gpus",
            metavar="N",
            help="An elastic job: it always gets --gpus and may grow to N GPUs while GPUs are idle; a resize "
            "restarts it from its checkpoint (SIGUSR1 first) with $CORRAL_GPUS and WORLD_SIZE of the new size.",
        ),
    ] = None,
    gpu_memory: Annotated[
        str | None,
        typer.Option("--gpu-memory", metavar="SIZE", help="A share's GPU memory limit, like 16G (shares only)."),
    ] = None,
    workload_class: Annotated[
        str | None,
        typer.Option(
            "--class", metavar="CLASS", help="A share's class: online (protected) or offline (default; may be evicted)."
        ),
    ] = None,
    latency_slo_ms: Annotated[
        str | None,
        typer.Option(
            "--latency-slo-ms",
            metavar="MS",
            help="An online share's p99 latency target in milliseconds: above it the node evicts offline neighbours "
            "from its GPU (the job writes its latency to $CORRAL_LATENCY_FILE). Online shares only.",
        ),
    ] = None,
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
    array: Annotated[
        str | None,
        typer.Option(
            "--array",
            "-a",
            metavar="INDICES",
            help="Submit a job array: one task per index, Slurm's syntax (0-999, 1,3,5-9, 0-15:4); %N at the end "
            "runs at most N at once (0-999%50). Each task reads its index from $CORRAL_ARRAY_TASK_ID.",
        ),
    ] = None,
    as_json: JsonFlag = False,
) -> None:
    """Submit a job, or with --array a job array; the command goes after `--`.

    Example: corral submit --gpus 2 --time-limit 4h -e WANDB_MODE=offline -- python train.py --epochs 10

    Example: corral submit --gpus 2 --max-gpus 8 -- 'torchrun --nproc-per-node $CORRAL_NODE_GPUS train.py' (elastic)

    Example: corral submit --array 0-999%50 -- 'python sweep.py --trial $CORRAL_ARRAY_TASK_ID' (one quoted word, so
    the node's shell expands the variable)
    """
    limit = parse_time_limit(time_limit)
    asked = parse_gpus(gpus, gpu_memory=gpu_memory, workload_class=workload_class)
    latency_slo = parse_latency_slo(latency_slo_ms, gpus=gpus, workload_class=workload_class)
    job_env = parse_env(env or [])
    job_name, job_command = name or derive_name(command), command_string(command)
    if max_gpus is not None and (max_gpus < 1 or array is not None):
        raise CliError("--max-gpus needs a whole number of GPUs of at least 1, and no --array", exit_code=2)
    with portal_client() as client:
        if array is not None:  # the portal checks the spec: a bad one is a 400 naming `array`, shown as one line
            job_array = client.submit_array(
                array=array,
                name=job_name,
                command=job_command,
                gpus=asked,
                tenant=tenant,
                env=job_env,
                time_limit=limit,
            )
            if as_json:
                render.print_json(job_array)
            else:
                render.emit(render.submitted_array_line(job_array))
            return
        job = client.submit_job(
            name=job_name,
            command=job_command,
            gpus=asked,
            tenant=tenant,
            env=job_env,
            time_limit=limit,
            gpu_memory=gpu_memory,
            workload_class=workload_class,
            latency_slo_ms=latency_slo,
            max_gpus=max_gpus,
        )
    if as_json:
        render.print_json(job)
        return
    render.emit(render.submitted_line(job))


@friendly
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
    array: Annotated[
        int | None, typer.Option("--array", "-a", metavar="ID", help="Only the tasks of this job array.")
    ] = None,
    limit: Annotated[int, typer.Option("--limit", "-l", min=1, help="Show at most this many jobs, newest first.")] = 50,
    as_json: JsonFlag = False,
) -> None:
    """List the jobs you can see: every job of your tenants (of all tenants for staff), newest first."""
    states = [s.strip() for value in state or [] for s in value.split(",") if s.strip()]
    with portal_client() as client:
        found = client.list_jobs(states=states, tenant=tenant, user=user, mine=mine, array=array, limit=limit)
    if as_json:
        render.print_json(found)
        return
    if not found:
        typer.echo("No jobs.")
        return
    if len(found) == limit:
        typer.echo(f"(the newest {limit} jobs; --limit shows more)", err=True)  # stderr: stdout stays the table
    render.emit(render.jobs_table(found))


@friendly
def show(job_id: Annotated[int, typer.Argument(metavar="ID", help="Job id.")], as_json: JsonFlag = False) -> None:
    """Show one job: state, why it is waiting, where it runs, exit code, and its history."""
    with portal_client() as client:
        job = client.get_job(job_id)
        events = client.job_events(job_id)
    if as_json:
        render.print_json({**job, "events": events})
        return
    render.emit(*render.job_detail(job, events))


@friendly
def logs(
    job_id: Annotated[int, typer.Argument(metavar="ID", help="Job id.")],
    follow: Annotated[
        bool,
        typer.Option("--follow", "-f", help="Keep printing new output until the job ends and all of it has arrived."),
    ] = False,
    interval: Annotated[float, typer.Option(min=0.1, help="Seconds between polls with --follow.")] = 1.0,
    whole: Annotated[
        bool,
        typer.Option(
            "--all",
            "-a",
            help="Download the whole log in one streamed request (`corral logs --all 12 > job-12.log`).",
        ),
    ] = False,
) -> None:
    """Print a job's output (stdout and stderr together); with -f, follow it until the job has finished and its
    nodes have sent all of it; with --all, download all of it at once. Output a finished job printed last may still
    be on its way: then a note on stderr says so ("output still arriving")."""
    if whole and follow:
        raise CliError("--all downloads the log as it stands; use it or --follow, not both", exit_code=2)
    job: Job | None = None
    with portal_client() as client:
        patient = functools.partial(_patiently, enabled=follow, interval=interval)
        get_job = functools.partial(client.get_job, job_id)
        if whole:  # one download, written as it arrives (raw bytes); then the note below, as for a plain read
            chunk = client.job_log_download(job_id, lambda piece: typer.echo(piece, nl=False))
        else:
            chunk = _print_log(client, job_id, follow=follow, interval=interval, get_job=lambda: patient(get_job))
        if follow or chunk.log_state in ("arriving", "incomplete"):
            job = patient(get_job)
    # stderr, so `corral logs -f 12 > out.txt` captures only the job's output
    if follow and job is not None:
        ended = f"job {job_id} {job['state']}"
        if job.get("exit_code") is not None and job["state"] != "cancelled":  # a cancel's SIGTERM is no result
            ended += f" (exit code {job['exit_code']})"
        elif job["state"] == "failed" and job.get("finish_reason"):  # "time limit of 2h exceeded", a lost node
            ended += f": {job['finish_reason']}"
        typer.echo(ended, err=True)
    note = job.get("log_note", "") if job is not None else ""
    if note:
        still = job is not None and job.get("log_state") == "arriving"
        typer.echo(note + (f" `corral logs -f {job_id}` prints the rest as it lands." if still else ""), err=True)


def _print_log(client: Client, job_id: int, *, follow: bool, interval: float, get_job: Callable[[], Job]) -> LogChunk:
    """Print the log a piece at a time from its start; with ``follow``, go on until the job has finished and all of
    its output has arrived. Returns the last piece read (its headers say where the output stands)."""
    patient = functools.partial(_patiently, enabled=follow, interval=interval)
    offset = 0
    while True:
        chunk = patient(functools.partial(client.job_log, job_id, offset))
        if chunk.data:
            typer.echo(chunk.data, nl=False)  # raw bytes: a chunk may end inside a multi-byte character
        progressed, offset = chunk.next_offset > offset, chunk.next_offset
        if progressed:
            continue  # the server may cap a chunk; ask again at once until the log is drained
        if not follow or _settled(chunk, get_job):
            return chunk
        time.sleep(interval)


def _settled(chunk: LogChunk, get_job: Callable[[], Job]) -> bool:
    """Whether a follower that has read everything so far may stop: the job has finished and no more of its output
    is on its way (a portal that does not say so is asked for the job's state: finished means done)."""
    if chunk.log_state is not None:
        return chunk.log_state in SETTLED_LOG_STATES
    return (chunk.job_state or get_job()["state"]) in TERMINAL_STATES


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


@friendly
def cancel(
    job_ids: Annotated[
        list[int] | None,
        typer.Argument(metavar="ID...", help="Job ids (an array's task is a job).", show_default=False),
    ] = None,
    arrays: Annotated[
        list[int] | None,
        typer.Option("--array", "-a", metavar="ID", help="Cancel every task of this job array; repeatable."),
    ] = None,
) -> None:
    """Cancel jobs, or whole job arrays with --array. A pending job is cancelled at once; a running one is stopped
    by its node first."""
    targets = [("job", job_id) for job_id in job_ids or []] + [("array", array_id) for array_id in arrays or []]
    if not targets:
        raise CliError("name jobs to cancel (corral cancel 12 13) or an array (corral cancel --array 7)", exit_code=2)
    failed = 0
    with portal_client() as client:
        for kind, target in targets:
            try:
                line = _cancel_job(client, target) if kind == "job" else _cancel_array(client, target)
            except CliError as exc:
                if len(targets) == 1:
                    raise
                typer.echo(f"error: {exc.message}", err=True)
                failed += 1
                continue
            typer.echo(line)
    if failed:
        raise typer.Exit(1)


def _cancel_job(client: Client, job_id: int) -> str:
    job = client.cancel_job(job_id)
    if job["state"] == "cancelled":
        return f"Cancelled job {job_id}."
    return f"Cancel requested for job {job_id} ({job['state']}); its node is stopping it."


def _cancel_array(client: Client, array_id: int) -> str:
    array = client.cancel_array(array_id)
    running = array.get("counts", {}).get("running", 0)
    line = f"Cancelled array {array_id}: {render.array_counts(array)}"
    return line + (f"; its nodes are stopping the {running:,} running." if running else ".")
