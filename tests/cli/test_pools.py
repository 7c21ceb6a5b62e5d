"""``corral pools``, ``pools lend`` and ``pools reclaim`` against the real portal; every refusal is one line and a
non-zero exit. Ref: #19"""

from __future__ import annotations

import json

import pytest

from portal.nodes.models import Gpu, Node, NodePower, NodeState
from tests.cli.conftest import Invoke
from tests.cli.test_against_portal import PASSWORD, Portal, logged_in, one_error_line, portal  # noqa: F401
from tests.factories import NodeFactory, UserFactory


@pytest.fixture
def as_root(corral: Invoke, portal: Portal) -> Portal:  # noqa: F811
    """Staff admin ``root`` logged in; pool ``inference`` of two up 2-GPU nodes, srv-1 and srv-2, none lent."""
    UserFactory(username="root", is_staff=True)
    for name in ("srv-1", "srv-2"):
        node = NodeFactory(name=name, state=NodeState.UP, pool="inference")
        for index in range(2):
            Gpu.objects.create(node=node, index=index, uuid=f"GPU-{name}-{index}", model="NVIDIA H100")
    result = corral("login", "--url", portal.url, "--username", "root", "--password", PASSWORD)
    assert result.exit_code == 0, result.output
    return portal


def test_lend_list_and_reclaim(corral: Invoke, as_root: Portal) -> None:
    lent = corral("pools", "lend", "inference", "srv-1", "srv-2")
    assert lent.exit_code == 0, lent.output
    assert lent.stdout.strip() == "Lent srv-1, srv-2; pool inference has 2 node(s) lent."
    again = corral("pools", "lend", "inference", "srv-2")
    assert again.stdout.strip() == "Lent no node (all were lent already); pool inference has 2 node(s) lent."
    listed = corral("pools")
    assert listed.exit_code == 0, listed.output
    row = next(line for line in listed.stdout.splitlines() if line.startswith("inference"))
    assert row.split()[:3] == ["inference", "2", "srv-1,"]
    answer = corral("pools", "reclaim", "inference", "--count", "1", "--deadline", "2m")
    assert answer.exit_code == 0, answer.output
    lines = answer.stdout.splitlines()
    assert lines[0].startswith("Reclaim ") and "giving back srv-1 by" in lines[0]  # both idle: the first lent
    assert lines[1] == "Back already: srv-1." and lines[-1] == "Cost: 0 GPU-seconds."
    assert Node.objects.get(name="srv-1").lent is False
    as_json = json.loads(corral("pools", "--json").stdout)
    assert as_json == [
        {"name": "inference", "nodes": ["srv-1", "srv-2"], "lent": ["srv-2"], "returning": [], "open_reclaims": []}
    ]


@pytest.mark.parametrize(
    ("args", "line"),
    [
        (["lend", "nope", "srv-1"], "error: no pool named 'nope': no node belongs to it"),
        (["lend", "inference", "gpu-01"], "error: nodes: gpu-01 is in pool 'training', not 'inference'"),
        (["lend", "training", "gpu-01"],
         "error: the 'training' pool is Corral's own: its nodes are never lent or reclaimed"),
        (["reclaim", "inference", "--count", "1", "--deadline", "60"],
         "error: count: pool 'inference' has 0 node(s) lent and not already being given back; cannot reclaim 1"),
        (["reclaim", "inference", "--count", "1", "--deadline", "-5"],
         "error: deadline_seconds: Ensure this value is greater than or equal to 0."),
        (["reclaim", "nope", "--count", "1", "--deadline", "60"],
         "error: no pool named 'nope': no node belongs to it"),
    ],
)  # fmt: skip
def test_refusals_are_one_line(corral: Invoke, as_root: Portal, args: list[str], line: str) -> None:
    assert one_error_line(corral("pools", *args)) == line
    assert not Node.objects.filter(lent=True).exists()


def test_bad_arguments_are_usage_errors(corral: Invoke, as_root: Portal) -> None:
    result = corral("pools", "lend", "a/b", "srv-1")
    assert result.exit_code == 2
    assert one_error_line(result) == "error: POOL must be a pool's name (letters, digits, - and _), got 'a/b'"
    result = corral("pools", "reclaim", "inference", "--count", "1", "--deadline", "soon")
    assert result.exit_code == 2 and one_error_line(result).startswith("error: --deadline: 'soon' is not a duration")


def test_only_staff_may_lend(corral: Invoke, portal: Portal) -> None:  # noqa: F811
    NodeFactory(name="srv-1", state=NodeState.UP, pool="inference")
    assert corral("login", "--url", portal.url, "--username", "alice", "--password", PASSWORD).exit_code == 0
    line = one_error_line(corral("pools", "lend", "inference", "srv-1"))
    assert line == "error: You do not have permission to perform this action."
    assert one_error_line(corral("pools")) == "error: You do not have permission to perform this action."


def test_corral_nodes_says_a_nodes_pool_loan_and_power(corral: Invoke, logged_in: Portal) -> None:  # noqa: F811
    Node.objects.filter(name="gpu-01").update(pool="inference", lent=True, power=NodePower.OFF)
    result = corral("nodes")
    assert result.exit_code == 0, result.output
    line = next(line for line in result.stdout.splitlines() if "gpu-01" in line)
    assert "powered down" in line and "[pool inference: lent]" in line, result.stdout
    (node,) = json.loads(corral("nodes", "--json").stdout)
    assert (node["pool"], node["lent"], node["returning"], node["power"]) == ("inference", True, False, "off")
