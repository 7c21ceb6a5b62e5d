"""What a job array's task is started with: the agent's start order (the heartbeat's answer) carries the
CORRAL_ARRAY_* variables, and no SLURM_* ones. Ref: #16"""

from __future__ import annotations

from portal.jobs.array_services import job_array_submit
from portal.jobs.models import Job, JobTask
from portal.jobs.services import job_submit
from portal.scheduler.services import scheduling_round
from tests.fixtures import World, agent_client


def _start_env(world: World, job: Job) -> dict[str, str]:
    """The environment in the start order the job's node gets over the real agent endpoint."""
    node = JobTask.objects.get(job=job, attempt=job.attempt).node
    beat = agent_client(world.tokens[node.name]).post("/api/v1/agent/heartbeat/", {"tasks": []}, format="json")
    assert beat.status_code == 200, beat.content
    (order,) = [o for o in beat.json()["start"] if o["job"] == job.pk]
    env: dict[str, str] = order["env"]
    return env


def test_a_task_gets_its_array_variables_and_no_slurm_ones(world: World) -> None:
    job_array = job_array_submit(user=world.eve, command="x", gpus=1, array="4-12:4", env={"SEED": "1"})
    scheduling_round()
    task = Job.objects.get(array=job_array, array_index=8)
    env = _start_env(world, task)
    assert {k: env[k] for k in env if k.startswith("CORRAL_ARRAY_")} == {
        "CORRAL_ARRAY_JOB_ID": str(job_array.pk),
        "CORRAL_ARRAY_TASK_ID": "8",
        "CORRAL_ARRAY_TASK_COUNT": "3",
        "CORRAL_ARRAY_TASK_MIN": "4",
        "CORRAL_ARRAY_TASK_MAX": "12",
    }
    assert env["SEED"] == "1" and env["CORRAL_JOB_ID"] == str(task.pk) and env["CUDA_VISIBLE_DEVICES"]
    assert not any(k.startswith("SLURM") for k in env)  # Lightning and friends would think they run under Slurm
    assert task.env == {"SEED": "1"}  # added at dispatch: the job keeps the environment its user wrote


def test_a_plain_job_gets_no_array_variables(world: World) -> None:
    job = job_submit(user=world.eve, command="x", gpus=1)
    scheduling_round()
    assert not any(k.startswith("CORRAL_ARRAY_") for k in _start_env(world, Job.objects.get(pk=job.pk)))
