"""The group-to-tenant mapping rules, without a database. Ref: #18"""

from __future__ import annotations

import pytest

from portal.accounts.claims import RuleError, groups_claim, parse_group_rules, roles_from_groups

DEFAULT = "corral-{tenant}=member,corral-{tenant}-admin=admin"


def test_the_default_rules_map_member_and_admin_groups() -> None:
    rules = parse_group_rules(DEFAULT)
    assert roles_from_groups(["corral-lab", "corral-vision-admin", "staff", "corral-"], rules) == {
        "lab": "member",
        "vision": "admin",
        "vision-admin": "member",  # also a reading; the services keep only tenants that exist
    }


def test_the_highest_role_wins_whatever_the_order() -> None:
    rules = parse_group_rules(DEFAULT)
    assert roles_from_groups(["corral-lab-admin", "corral-lab"], rules)["lab"] == "admin"
    assert roles_from_groups(["corral-lab", "corral-lab-admin"], rules)["lab"] == "admin"


def test_patterns_are_literal_apart_from_the_placeholder() -> None:
    rules = parse_group_rules("/hpc/{tenant}/users=member, cn={tenant}.admins=admin")
    assert roles_from_groups(["/hpc/lab/users", "cn=nlp.admins", "cnXnlpXadmins", "/hpc/a/b/users"], rules) == {
        "lab": "member",
        "nlp": "admin",
    }


@pytest.mark.parametrize(
    ("spec", "words"),
    [
        ("corral-{tenant}", "write <group pattern>=<role>"),
        ("corral-{tenant}=owner", "the role must be one of member, admin"),
        ("corral=member", "exactly once"),
        ("{tenant}-{tenant}=member", "exactly once"),
    ],
)
def test_a_rule_that_cannot_be_used_is_named(spec: str, words: str) -> None:
    with pytest.raises(RuleError, match=words.replace("<", ".").replace(">", ".")):
        parse_group_rules(spec)


def test_an_empty_spec_maps_nothing() -> None:
    assert parse_group_rules(" , ") == ()


@pytest.mark.parametrize(
    ("value", "groups"),
    [
        (["a", "b", 3, ""], ["a", "b"]),
        ("a b,c", ["a", "b", "c"]),
        (None, []),
        ({"a": 1}, []),
    ],
)
def test_the_groups_claim_takes_lists_and_strings(value: object, groups: list[str]) -> None:
    assert groups_claim({"groups": value}, "groups") == groups
