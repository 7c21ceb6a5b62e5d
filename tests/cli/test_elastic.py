"""``corral submit --max-gpus``: an elastic job from the CLI, and how ``corral show`` gives its range. Ref: #19"""

from __future__ import annotations

import json
import re

from tests.cli.conftest import Invoke
from tests.cli.test_against_portal import FakeAgent, Portal, agent, logged_in, one_error_line, portal  # noqa: F401


def test_an_elastic_job_grows_into_the_idle_gpus_and_show_says_so(corral: Invoke, agent: FakeAgent) -> None:  # noqa: F811
    result = corral("submit", "--gpus", "1", "--max-gpus", "2", "--json", "--", "python", "train.py")
    assert result.exit_code == 0, result.output
    job_id = json.loads(result.stdout)["id"]
    order = agent.start(job_id)
    assert order["gpus"] == [0, 1] and order["env"]["CORRAL_GPUS"] == "2"
    detail = corral("show", str(job_id)).stdout
    assert re.search(r"GPUs\s+2 now \(elastic: 1 to 2\)", detail), detail


def test_max_gpus_below_gpus_is_the_portals_400_in_one_line(corral: Invoke, logged_in: Portal) -> None:  # noqa: F811
    result = corral("submit", "--gpus", "2", "--max-gpus", "1", "--", "python", "train.py")
    assert result.exit_code != 0
    assert one_error_line(result) == "error: max_gpus: must be at least gpus (2): gpus is the size it always gets"


def test_max_gpus_with_an_array_is_a_usage_error(corral: Invoke) -> None:
    result = corral("submit", "--max-gpus", "4", "--array", "0-3", "--", "python", "train.py")
    assert result.exit_code == 2
    assert one_error_line(result) == "error: --max-gpus needs a whole number of GPUs of at least 1, and no --array"
