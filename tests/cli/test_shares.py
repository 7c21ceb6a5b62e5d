"""``corral submit --gpus 0.25`` and how ``corral show`` says which GPU a share shares. Ref: #17"""

from __future__ import annotations

import json
import re

import pytest

from portal.jobs.models import Job
from portal.nodes.models import Gpu
from tests.cli.conftest import Invoke
from tests.cli.test_against_portal import FakeAgent, Portal, agent, logged_in, one_error_line, portal  # noqa: F401

ONLY_SHARES = "a share of one GPU (--gpus below 1, like 0.25)"


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["--gpus", "1.5"], "error: --gpus above 1 must be a whole number (a share is below 1, like 0.5), got 1.5"),
        (["--gpus", "0.5", "--class", "x"], "error: --class must be online or offline, got 'x'"),
        (["--gpus", "2", "--gpu-memory", "1G"], f"error: --gpu-memory and --class are for {ONLY_SHARES}"),
    ],
)  # fmt: skip
def test_bad_share_input_is_one_line_and_a_usage_error(corral: Invoke, args: list[str], words: str) -> None:
    result = corral("submit", *args, "--", "python", "serve.py")
    assert result.exit_code == 2
    assert one_error_line(result) == words


@pytest.mark.parametrize(
    ("value", "words"),
    [
        ("0", "error: gpus: A job needs more than 0 GPUs: a whole number, or a fraction of one GPU like 0.25."),
        ("0.001", "error: gpus: A share is at least 0.01 of a GPU: MPS gives out compute in whole percent."),
        ("-0.5", "error: gpus: A job needs more than 0 GPUs: a whole number, or a fraction of one GPU like 0.25."),
    ],
)
def test_no_gpus_is_the_portals_400_in_one_line(corral: Invoke, logged_in: Portal, value: str, words: str) -> None:  # noqa: F811
    assert one_error_line(corral("submit", "--gpus", value, "--", "python", "serve.py")) == words


def test_submit_a_share_and_show_which_gpu_it_shares(corral: Invoke, agent: FakeAgent) -> None:  # noqa: F811
    refused = corral("submit", "--gpus", "0.25", "--", "python", "serve.py")
    assert "no GPU of this cluster accepts shares" in one_error_line(refused)
    Gpu.objects.filter(node__name="gpu-up", index=1).update(shared=True)
    too_big = corral("submit", "--gpus", "0.25", "--gpu-memory", "80G", "--", "python", "serve.py")
    assert one_error_line(too_big).startswith("error: gpu_memory: no shared GPU can give 80.0 GiB")
    result = corral(
        "submit", "--gpus", "0.25", "--gpu-memory", "8G", "--class", "online", "--json", "--", "python", "serve.py"
    )
    assert result.exit_code == 0, result.output
    job_id = json.loads(result.stdout)["id"]
    order = agent.start(job_id)
    assert order["gpus"] == [1] and order["share"]["compute_percent"] == 25
    detail = corral("show", str(job_id)).stdout
    assert re.search(r"GPUs\s+0.25 of one GPU \(online\)", detail), detail
    assert re.search(r"Shares\s+gpu-up GPU 1: 25% compute, 8.0 GiB memory, 0 other shares", detail), detail
    assert Job.objects.get(pk=job_id).gpu_fraction == 0.25
    listed = next(line for line in corral("jobs").stdout.splitlines() if line.strip().startswith(str(job_id)))
    assert " 0.25 " in listed and listed.rstrip().endswith("gpu-up  GPU 1 (shared)"), listed
