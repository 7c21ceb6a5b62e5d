"""``GET /api/v1/tenants/``: the tenants page as numbers, with its visibility, its nulls and its login requirement."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import jsonschema
import pytest
from django.utils import timezone
from rest_framework.test import APIClient

from portal.tenants.models import Quota
from tests.factories import UserFactory
from tests.fixtures import World
from tests.portal.tenants.history import held

DAY = timedelta(days=1)
ROW_FIELDS = {
    "slug",
    "name",
    "guaranteed_gpus",
    "gpu_cap",
    "user_cap",
    "max_active_jobs",
    "gpus_held",
    "in_guarantee",
    "borrowed",
    "running_jobs",
    "pending_jobs",
    "usage_gpu_hours",
    "usage_share",
    "entitled_share",
    "ratio",
    "borrow_order",
    "tenant_count",
}
FAIR_SHARE_FIELDS = ("usage_gpu_hours", "usage_share", "entitled_share", "ratio", "borrow_order", "tenant_count")


@pytest.fixture
def contended(world: World, settings) -> None:  # noqa: ANN001
    """fifo+quota, a day's half-life; lab (2 guaranteed) runs 3 GPUs, other (2 guaranteed) used nothing."""
    settings.CORRAL_POLICY = "fifo+quota"
    settings.CORRAL_FAIR_SHARE_HALF_LIFE_HOURS = 24
    Quota.objects.filter(tenant=world.tenant).update(guaranteed_gpus=2, max_active_jobs=5)
    Quota.objects.filter(tenant=world.other_tenant).update(guaranteed_gpus=2)
    held(world.alice, 3, timezone.now() - DAY, None)


def json_schema(node: Any) -> Any:
    """OpenAPI 3.0's ``nullable: true`` as JSON Schema says it (plain jsonschema ignores ``nullable``)."""
    if isinstance(node, list):
        return [json_schema(item) for item in node]
    if not isinstance(node, dict):
        return node
    converted = {key: json_schema(value) for key, value in node.items() if key != "nullable"}
    return {"anyOf": [converted, {"type": "null"}]} if node.get("nullable") else converted


def conforms(body: dict[str, Any]) -> None:
    """The answer fits the 200 schema the API documents, nulls included."""
    client = APIClient()
    schema = client.get("/api/v1/schema/", HTTP_ACCEPT="application/vnd.oai.openapi+json").json()
    documented = schema["paths"]["/api/v1/tenants/"]["get"]["responses"]["200"]["content"]["application/json"]
    jsonschema.validate(body, json_schema({**documented["schema"], "components": schema["components"]}))


@pytest.mark.usefixtures("contended")
def test_a_member_gets_their_tenant_with_its_standing(api: APIClient) -> None:
    body = api.get("/api/v1/tenants/").json()
    assert (body["policy"], body["quota_layer"], body["half_life_hours"]) == ("fifo+quota", True, 24.0)
    (lab,) = body["tenants"]
    assert set(lab) == ROW_FIELDS
    assert (lab["slug"], lab["name"], lab["guaranteed_gpus"], lab["gpu_cap"]) == ("lab", "Lab", 2, 6)
    assert (lab["user_cap"], lab["max_active_jobs"]) == (None, 5)
    assert (lab["gpus_held"], lab["in_guarantee"], lab["borrowed"]) == (3, 2, 1)
    assert (lab["running_jobs"], lab["pending_jobs"]) == (1, 0)
    assert lab["usage_gpu_hours"] > 0 and lab["usage_share"] == pytest.approx(1.0)
    assert (lab["entitled_share"], lab["ratio"]) == (pytest.approx(0.5), pytest.approx(2.0))
    assert (lab["borrow_order"], lab["tenant_count"]) == (2, 2)  # placed among every tenant, not only its own
    conforms(body)


@pytest.mark.usefixtures("contended")
def test_staff_get_every_tenant(world: World) -> None:
    client = APIClient()
    client.force_authenticate(UserFactory(username="root", is_staff=True))
    body = client.get("/api/v1/tenants/").json()
    assert [t["slug"] for t in body["tenants"]] == ["lab", "other"]
    other = body["tenants"][1]
    assert (other["gpus_held"], other["usage_gpu_hours"], other["ratio"], other["borrow_order"]) == (0, 0.0, 0.0, 1)


@pytest.mark.usefixtures("contended")
def test_fair_share_off_and_no_quota_layer(api: APIClient, settings) -> None:  # noqa: ANN001
    settings.CORRAL_POLICY = "fifo"
    settings.CORRAL_FAIR_SHARE_HALF_LIFE_HOURS = 0
    body = api.get("/api/v1/tenants/").json()
    assert (body["policy"], body["quota_layer"], body["half_life_hours"]) == ("fifo", False, None)
    (lab,) = body["tenants"]
    assert [lab[f] for f in FAIR_SHARE_FIELDS] == [None] * len(FAIR_SHARE_FIELDS)
    assert (lab["gpus_held"], lab["borrowed"]) == (3, 1)
    conforms(body)


def test_a_tenant_without_guarantees_has_no_ratio(world: World, settings) -> None:  # noqa: ANN001
    settings.CORRAL_FAIR_SHARE_HALF_LIFE_HOURS = 24
    held(world.eve, 1, timezone.now() - DAY, None)
    client = APIClient()
    client.force_authenticate(world.eve)
    (other,) = client.get("/api/v1/tenants/").json()["tenants"]
    assert (other["guaranteed_gpus"], other["borrowed"], other["entitled_share"], other["ratio"]) == (0, 1, 0.0, None)


def test_a_user_without_tenants_gets_an_empty_list(world: World) -> None:
    client = APIClient()
    client.force_authenticate(UserFactory(username="loner"))
    assert client.get("/api/v1/tenants/").json()["tenants"] == []


def test_the_login_requirement(world: World) -> None:
    assert APIClient().get("/api/v1/tenants/").status_code == 401
    bad = APIClient()
    bad.credentials(HTTP_AUTHORIZATION="Token not-a-token")
    assert bad.get("/api/v1/tenants/").status_code == 401
