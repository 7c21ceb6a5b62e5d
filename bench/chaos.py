"""Chaos benchmark: a real Corral stack runs a mix of jobs while its parts are killed, frozen and restarted; then
the stamps the jobs wrote say whether any job was lost, ran twice, shared a GPU or let its tenant exceed its cap.

    .venv/bin/python bench/chaos.py --jobs 40 --agents 4 --duration 90 --deadline 150 --fault-every 5 --seed 15
    .venv/bin/python bench/chaos.py --jobs 1000 --agents 8 --duration 1500 --deadline 900 --json-out bench/out/c.json
    git archive HEAD | tar -x -C /tmp/head && .venv/bin/python bench/chaos.py --code /tmp/head   # a commit's code

What runs (everything under one temporary directory, removed at the end unless ``--keep``; never ``var/`` nor
the developer's database): PostgreSQL and Redis started by ``scripts/test_servers.py``'s functions (PostgreSQL
with ``synchronous_commit=on``, so a crash loses nothing the portal confirmed), the portal as in production
(gunicorn, 2 workers x 8 threads, ``CORRAL_PRODUCTION=1``; not ``runserver``), a Celery worker, beat, and
``--agents`` ``corral-agent`` processes with ``--fake-gpus``, each with its own name and a token from
``manage.py node_token``. The clocks are shortened: heartbeat 1 s, node timeout 10 s, rounds every 2 s, kill
grace 3 s (``--heartbeat``, ``--node-timeout``, ``--kill-grace``). Three tenants get GPU caps (ORM set-up) that
add up to more than the cluster. Jobs are submitted over REST with each tenant user's token, evenly over
``--duration`` seconds, while ``bench/chaos_faults.py`` injects one fault at a time (mean gap ``--fault-every``).
After the chaos phase everything is running again and the portal gets ``--deadline`` seconds to settle (no job
pending or running); then every job is read back over REST and the stamps are analysed. ``--code DIR`` runs the
portal and agents of another tree (on ``PYTHONPATH``), so a commit can be measured while the checkout changes;
``--no-faults`` checks the harness itself (every count 0).

The job mix and the stamps: ``bench/chaos_driver.py`` (1-GPU, 2-GPU and gang jobs spanning two nodes; jobs that
succeed, fail, overrun a ``time_limit``, ignore SIGTERM, or are cancelled), ``bench/chaos_stamps.py`` (the file
format and the 1-second rule: overlaps are measured on sub-second stamp times, so a hand-over inside one second
is not an overlap and two processes proven alive in the same second are), and ``chaos_stack.DeathWatch``, which
notices within 0.1 s when a stamping process is gone (the upper bound for processes killed without a last stamp).

The report (one JSON object on stdout, also written to ``--json-out``):

- ``jobs``: jobs submitted (the portal gave an id). ``refused``: submits answered with a 4xx.
- ``lost``: submitted jobs that, at the deadline, (a) are gone (404) or could not be read, (b) are still pending
  or running, or (c) have a broken history: it does not begin with ``submitted``, its last state change does not
  lead to the job's state, it has fewer ``started`` events than the job's ``attempt``, or the stamps show an
  attempt that no ``started`` event accounts for. ``lost_jobs`` says which and why.
- ``double_run_seconds``: seconds during which two instances of one job (not ranks of the same attempt) were both
  proven alive by their stamps, per job, summed over jobs.
- ``gpu_overlap_seconds``: seconds during which two instances were proven alive on one (node, GPU), per GPU,
  summed over GPUs.
- ``over_cap_samples``: (tenant, whole second) samples in which the GPUs of the tenant's proven-alive instances
  exceed its cap.
- each of the three also ``…_possible``: the same with processes that died without a ``term``/``end`` stamp
  (SIGKILL) extended to when a watcher polling every 0.1 s saw them gone (at most 1.5 s), an upper bound.
- ``requeues``: ``requeued`` and ``preempted`` events. ``http_5xx_outside_db_outage``: 5xx answers to the driver
  whose request did not overlap a PostgreSQL outage window (signal sent to first ``pg_isready`` success).
- also: ``faults`` (per target and action, and each one), ``db_outages``, ``final_states``,
  ``outcome_mismatches`` (informational: e.g. an ``ok`` job that failed after its hardware retries ran out),
  ``ran_after_terminal`` (stamps later than the job's end + kill grace + 2 heartbeats + a round + 2 s),
  ``job_processes_left`` (job processes alive after settling), ``unexpected_exits`` (processes that died on
  their own and were restarted), ``incidents`` (timelines of the first double runs and overlaps), ``seed``,
  ``durations_s``, ``code`` (the commit and the modified files the run was taken on).

Exit status 0 when ``lost``, ``double_run_seconds``, ``gpu_overlap_seconds`` and ``over_cap_samples`` are all 0;
1 otherwise; 2 when the stack could not be set up or the harness itself failed; 130 on Ctrl-C or SIGTERM.
Teardown runs in every case.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import chaos_report  # noqa: E402  (siblings: bench/ is not a package)
from chaos_driver import Driver, make_jobs, make_tenants, note  # noqa: E402
from chaos_faults import Monkey  # noqa: E402
from chaos_stack import ROOT, DeathWatch, Stack, Timings  # noqa: E402
from chaos_stamps import analyse, read_stamps  # noqa: E402

NODES_UP_TIMEOUT = 60.0
#: After settling, how long to wait before reading the stamps and looking for left-over job processes.
QUIET_AFTER_SETTLE = 2.0


class Interrupted(Exception):
    """SIGTERM (or Ctrl-C): tear down and leave."""


def _interrupt(_signum: int, _frame: object) -> None:
    raise Interrupted


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=200, help="jobs to submit (default 200)")
    parser.add_argument("--agents", type=int, default=3, help="corral-agent processes (default 3)")
    parser.add_argument("--gpus-per-agent", type=int, default=4, help="fake GPUs per agent (default 4)")
    parser.add_argument("--duration", type=float, default=300.0, help="chaos phase in seconds (default 300)")
    parser.add_argument("--deadline", type=float, default=180.0, help="seconds to settle after it (default 180)")
    parser.add_argument("--fault-every", type=float, default=8.0, help="mean seconds between faults (default 8)")
    parser.add_argument("--no-faults", action="store_true", help="inject nothing (checks the harness itself)")
    parser.add_argument("--seed", type=int, default=None, help="random seed (default: drawn, and reported)")
    parser.add_argument("--heartbeat", type=float, default=1.0, help="CORRAL_HEARTBEAT_INTERVAL (default 1)")
    parser.add_argument("--node-timeout", type=float, default=10.0, help="CORRAL_NODE_TIMEOUT (default 10)")
    parser.add_argument("--kill-grace", type=float, default=3.0, help="CORRAL_KILL_GRACE and agents' --grace")
    parser.add_argument("--json-out", type=Path, default=None, help="also write the report here")
    parser.add_argument(
        "--code",
        type=Path,
        default=ROOT,
        help="run the portal and agents of this tree, e.g. a `git archive HEAD` export (default: this checkout)",
    )
    parser.add_argument("--keep", action="store_true", help="keep the run directory (logs, stamps) for debugging")
    args = parser.parse_args(argv)
    if args.jobs < 1 or args.agents < 1 or args.gpus_per_agent < 1 or args.duration <= 0 or args.deadline <= 0:
        parser.error("--jobs, --agents, --gpus-per-agent, --duration and --deadline must be positive")
    args.code = args.code.resolve()
    if not (args.code / "manage.py").exists():
        parser.error(f"--code {args.code}: no manage.py there")
    if args.seed is None:
        args.seed = random.SystemRandom().randrange(1_000_000)
    return args


def code_state(code: Path) -> dict[str, Any]:
    """Which code the stack ran: the tree, its commit and its modified files (none for an export)."""

    def git(*a: str) -> str:
        return subprocess.run(["git", *a], cwd=code, capture_output=True, text=True).stdout

    if not (code / ".git").exists():
        return {"tree": str(code), "commit": None, "modified": None}
    modified = [line[3:] for line in git("status", "--porcelain", "--untracked-files=no").splitlines()]
    return {"tree": str(code), "commit": git("rev-parse", "--short", "HEAD").strip(), "modified": modified}


def run(args: argparse.Namespace, run_dir: Path) -> int:
    rng = random.Random(args.seed)
    timings = Timings(args.heartbeat, args.node_timeout, max(1.0, 2 * args.heartbeat), args.kill_grace)
    stack = Stack(run_dir, timings, args.agents, args.gpus_per_agent, args.code)
    tenants = make_tenants(args.agents * args.gpus_per_agent, args.gpus_per_agent, rng)
    staff = ("chaos-staff", f"pw-{rng.getrandbits(64):x}")
    specs = make_jobs(args.jobs, tenants, args.gpus_per_agent, args.agents, args.duration, rng, args.node_timeout)
    started = time.time()
    monkey: Monkey | None = None
    driver: Driver | None = None
    try:
        try:
            note(f"run directory {run_dir}; seed {args.seed}")
            stack.start_services()
            setup = {"staff": staff, "tenants": [(t.slug, t.cap, t.username, t.password) for t in tenants]}
            stack.set_up_database(json.dumps(setup))
            stack.start_portal()
            stack.start_agents()
            stack.supervise()
            driver = Driver(stack.url, tenants, staff, specs, stack.stamps)
            driver.login()
            deadline = time.time() + NODES_UP_TIMEOUT
            while driver.nodes_up() != set(stack.agent_names):
                if time.time() > deadline:
                    raise RuntimeError(f"nodes up: {sorted(driver.nodes_up())} of {stack.agent_names}")
                time.sleep(0.5)
        except (RuntimeError, OSError, subprocess.SubprocessError, SystemExit) as exc:
            note(f"could not set up the stack: {exc}")
            return 2
        set_up = time.time()
        note(f"stack up in {set_up - started:.0f}s at {stack.url}; {len(specs)} jobs over {args.duration:.0f}s")
        t0 = set_up
        chaos_until = t0 + args.duration
        watch = DeathWatch(stack.stamps)
        watch.start()
        monkey = Monkey(stack, rng, until=chaos_until, mean_gap=args.fault_every)
        if not args.no_faults:
            monkey.start()
        assert driver is not None
        loads: list[float] = []
        progress = _progress(t0, driver, monkey, loads)
        driver.run(t0, chaos_until, progress)
        if not args.no_faults:
            monkey.finish()
        stack.all_up()
        chaos_end = time.time()
        note(f"chaos phase over after {chaos_end - t0:.0f}s, {len(monkey.faults)} faults; settling")
        settled = driver.settle(chaos_end + args.deadline, progress)
        settle_end = time.time()
        time.sleep(QUIET_AFTER_SETTLE + timings.kill_grace)
        left = stack.job_processes()
        watch.finish()
        collected = driver.collect()
        named = driver.all_named()
        instances = read_stamps(stack.stamps, watch.dead)
        tenant_of = {driver.ids[s.key]: s.tenant for s in specs if s.key in driver.ids}
        caps: dict[str, int | None] = {t.slug: t.cap for t in tenants}
        stamps = analyse(instances, tenant_of, caps)
        report = chaos_report.build(
            args=args, timings=timings, tenants=tenants, specs=specs, driver=driver, monkey=monkey, stack=stack,
            collected=collected, named=named, instances=instances, stamps=stamps, left=left,
            times={"started": started, "set_up": set_up, "t0": t0, "chaos_end": chaos_end, "settle_end": settle_end,
                   "settled": settled},
        )  # fmt: skip
        report["code"] = code_state(args.code)
        report["death_watch"] = {
            "processes": len(instances),
            "seen_gone": sum(i.died_by is not None for i in instances),
        }
        if loads:
            report["load_average_1m"] = {"min": min(loads), "mean": round(sum(loads) / len(loads), 2),
                                         "max": max(loads), "cpus": os.cpu_count()}  # fmt: skip
        report["run_dir"] = str(run_dir) if args.keep else None
        text = json.dumps(report, indent=1)
        print(text)
        if args.json_out:
            args.json_out.parent.mkdir(parents=True, exist_ok=True)
            args.json_out.write_text(text + "\n")
        return 0 if report["ok"] else 1
    finally:
        for signum in (signal.SIGINT, signal.SIGTERM):  # a second Ctrl-C must not cut the teardown short
            signal.signal(signum, signal.SIG_IGN)
        if monkey is not None and monkey.thread.is_alive():
            monkey.finish()
        if driver is not None:
            driver.api.close()
        note("tearing down")
        stack.teardown()


def load_average() -> float:
    try:
        return float(Path("/proc/loadavg").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return float("nan")


def _progress(t0: float, driver: Driver, monkey: Monkey, loads: list[float]) -> Any:
    last = [0.0]

    def show() -> None:
        now = time.time()
        if now - last[0] < 10.0:
            return
        last[0] = now
        loads.append(load_average())
        fault = monkey.faults[-1] if monkey.faults else None
        latest = f"; last fault {fault.target} {fault.action} at t={fault.at - t0:.0f}s" if fault else ""
        note(f"t={now - t0:.0f}s submitted {len(driver.ids)}/{len(driver.specs)}, active {len(driver.active)}, "
             f"{len(monkey.faults)} faults{latest}")  # fmt: skip

    return show


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    run_dir = Path(tempfile.mkdtemp(prefix="corral-chaos-"))
    run_dir.chmod(0o755)  # the unprivileged PostgreSQL user and the jobs' user must traverse it
    signal.signal(signal.SIGTERM, _interrupt)
    try:
        return run(args, run_dir)
    except (Interrupted, KeyboardInterrupt):
        note("interrupted")
        return 130
    except Exception:  # a bug of the harness, not a finding about the portal: say so by the status
        traceback.print_exc()
        return 2
    finally:
        if args.keep:
            note(f"kept {run_dir}")
        else:
            shutil.rmtree(run_dir, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
