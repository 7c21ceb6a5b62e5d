"""The what-if form offers every policy with and without the tenant layer and says which settings only ``+quota``
policies read; a run's table prints each time column in one unit, compares with the same baseline as ``corral
simulate``, and its charts use a time unit that suits the replay's length. Ref: #18 (item 9)."""

from __future__ import annotations

import re

import numpy as np
import pytest
from django.contrib.auth.models import AbstractBaseUser
from django.test import Client

from portal.whatif.forms import WhatIfForm
from portal.whatif.results import merge_figures, observed_row, policy_figures, table_rows
from portal.whatif.services import whatif_create, whatif_execute
from scheduling.core.policies import POLICIES, QUOTA_SUFFIX, resolve_policy
from scheduling.sim.metrics import measure
from scheduling.sim.report import Run
from scheduling.sim.simulator import Cluster, JobOutcome, SimResult, Timeline
from tests.fixtures import World
from tests.history import small_history


@pytest.fixture
def admin_client(client: Client, root: AbstractBaseUser) -> Client:
    client.force_login(root)
    return client


def _form(live_policy: str) -> WhatIfForm:
    return WhatIfForm(live_policy=live_policy, live_placement="count", cluster=None, quotas={})


def _record(policy: str, avg: float, **kw: object) -> dict[str, object]:
    return {"policy": policy, "avg_jct": avg, "median_jct": avg, "p95_jct": 2 * avg, "avg_queue": avg / 2,
            "utilization": 0.5, "preemptions": 0, "fairness": 0.9, "clairvoyant": False} | kw  # fmt: skip


# --- the form ------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("live", ["fifo", "tiresias-las", "fifo+quota"])
def test_every_policy_is_offered_with_and_without_the_tenant_layer_whatever_runs_live(live: str) -> None:
    choices = [value for value, _ in _form(live).fields["policies"].choices]  # type: ignore[attr-defined]
    assert choices == [*POLICIES, *(f"{name}{QUOTA_SUFFIX}" for name in POLICIES)]
    for name in choices:
        resolve_policy(name)  # each is a name the scheduling core knows


def test_with_fifo_live_fifo_quota_is_offered_unticked_and_labelled(admin_client: Client, settings) -> None:  # noqa: ANN001
    settings.CORRAL_POLICY = "fifo"
    page = admin_client.get("/whatif/").content.decode()
    assert re.search(r'<input type="checkbox" name="policies" value="fifo\+quota"', page)
    assert not re.search(r'value="fifo\+quota"[^>]*checked', page) and re.search(r'value="fifo"[^>]*checked', page)
    assert "tiresias-gittins+quota" in page and "srsf+quota (oracle" in page


def test_settings_read_only_by_quota_policies_are_grouped_and_say_so(admin_client: Client, settings) -> None:  # noqa: ANN001
    settings.CORRAL_POLICY = "fifo"
    page = admin_client.get("/whatif/").content.decode()
    # The +quota policies have their own group, which says what the tenant layer does.
    group = re.search(r'<fieldset class="choices" data-testid="whatif-quota-policies">(.*?)</fieldset>', page, re.S)
    assert group and 'value="fifo+quota"' in group.group(1) and 'value="fifo"' not in group.group(1)
    # The fair-share half-life and the guaranteed GPUs are marked as +quota-only, with a note saying so that the
    # page's script shows in their place while no +quota policy is ticked.
    fair_share = re.search(r"<div[^>]*data-quota-only[^>]*>(.*?)</div>", page, re.S)
    assert fair_share and 'name="fair_share_half_life_hours"' in fair_share.group(1)
    assert re.search(r"<th[^>]*data-quota-only[^>]*>Guaranteed GPUs", page)
    assert len(re.findall(r'<td[^>]*data-quota-only[^>]*><input type="number" name="quota_\w+_guaranteed_gpus"', page))
    note = re.search(r'<p[^>]*data-testid="whatif-quota-only-note"[^>]*>(.*?)</p>', page, re.S)
    assert note and "+quota" in note.group(1) and "fair-share half-life" in note.group(1)
    assert 'src="/static/whatif.js"' in page  # the toggle


# --- the table -----------------------------------------------------------------------------------------------------
def test_each_time_column_is_in_one_unit() -> None:
    records = [_record("fifo", 138.0), _record("srsf", 115.0)]  # was "2.3 min" above "115 s"
    fifo, srsf = table_rows(records, live_policy="fifo")
    assert (fifo.avg_jct, srsf.avg_jct) == ("2.30 min", "1.92 min")
    observed = {"jobs": 2, "avg_jct": 600.0, "median_jct": 30.0, "p95_jct": 100.0, "avg_queue": 20.0}
    rows = table_rows(records, live_policy="fifo", observed=observed)
    shown = observed_row(observed, records=records)
    assert shown is not None
    # What really happened shares the columns, and so their units: avg JCT up to 600 s reads in minutes.
    assert (rows[0].avg_jct, shown["avg_jct"]) == ("2.3 min", "10.0 min")
    assert all(cell.endswith(" min") for cell in (rows[1].avg_jct, rows[0].p95_jct, shown["median_jct"]))


def test_the_ratio_compares_with_the_first_policy_when_the_live_one_was_not_replayed() -> None:
    records = [_record("srsf", 1800.0), _record("fifo", 3600.0)]
    assert [r.ratio for r in table_rows(records, live_policy="qssf")] == ["1.00x", "2.00x"]
    assert [r.ratio for r in table_rows(records, live_policy="fifo")] == ["0.50x", "1.00x"]


def test_a_run_page_names_the_baseline_and_keeps_units_per_column(
    admin_client: Client,
    root: AbstractBaseUser,
    world: World,
    settings,  # noqa: ANN001
) -> None:
    small_history(world.tenant, world.other_tenant, {"alice": world.alice, "bob": world.bob, "eve": world.eve})
    settings.CORRAL_POLICY = "qssf"  # not replayed: the first policy listed is the baseline
    run = whatif_create(
        user=root, policies=["srsf", "fifo"], placement="count", preemption_overhead="0", nodes=2, gpus_per_node=4
    )
    whatif_execute(run.pk)
    page = admin_client.get(f"/whatif/{run.pk}/").content.decode()
    table = page[page.index('data-testid="whatif-results"') : page.index("</table>", page.index("whatif-results"))]
    assert "<th>vs srsf</th>" in table and "vs qssf" not in table
    cells = [re.findall(r"<td>([^<]*)</td>", row) for row in re.findall(r"<tr[^>]*>(.*?)</tr>", table, re.S)[1:]]
    units = {cell.split()[-1] for row in cells for cell in row[:1]}  # the avg JCT column of every row
    assert len(units) == 1, cells


# --- the charts ----------------------------------------------------------------------------------------------------
def _replay(policy: str, seconds: float) -> SimResult:
    """A made-up replay lasting ``seconds``."""
    rng = np.random.default_rng(3)
    submit = np.sort(rng.uniform(0, seconds / 2, 50))
    outcomes = tuple(
        JobOutcome(f"j{i}", "t", "u", 1, s, s + 5, s + 5 + 30, 30, 30, 0) for i, s in enumerate(submit.tolist())
    )
    times = tuple(np.linspace(0, seconds, 40).tolist())
    return SimResult(policy, False, "count", Cluster(2, 4), outcomes, Timeline(times, (1,) * 40, (2,) * 40))


@pytest.mark.parametrize(
    ("length", "unit", "end"), [(20 * 60.0, "minutes", 20.0), (150 * 60.0, "hours", 2.5), (3 * 86_400.0, "days", 3.0)]
)
def test_the_time_axis_follows_the_length_of_the_replay(length: float, unit: str, end: float) -> None:
    # srsf's replay is shorter: 100 min of a 150 min one would read in minutes alone, yet shares the hours axis.
    runs = [Run(r, measure(r)) for r in (_replay("fifo", length), _replay("srsf", length * 2 / 3))]
    merged = merge_figures([policy_figures(r) for r in runs], live_policy="fifo")
    for waiting in merged[1:3]:  # jobs waiting and GPU utilization over time
        assert waiting["layout"]["xaxis"]["title"]["text"] == f"time since the first submission ({unit})"
        assert max(max(t["x"]) for t in waiting["data"]) == pytest.approx(end, rel=0.05)
        assert "meta" not in waiting["layout"]
    cdf = merged[0]
    assert cdf["layout"]["xaxis"]["title"]["text"] == "job completion time (seconds)"  # 35 s jobs
    assert max(max(t["x"]) for t in cdf["data"]) == pytest.approx(35.0)


def test_a_run_of_a_history_of_hours_has_its_charts_in_hours(root: AbstractBaseUser, world: World) -> None:
    small_history(world.tenant, world.other_tenant, {"alice": world.alice, "bob": world.bob, "eve": world.eve})
    run = whatif_create(
        user=root, policies=["fifo", "sjf"], placement="count", preemption_overhead="0", nodes=2, gpus_per_node=4
    )
    done = whatif_execute(run.pk)
    assert done is not None and done.state == "done", done and done.error
    figures = done.results["figures"]
    # small_history replays in some hours: not in days (ticks of 0.2) as before.
    assert [f["layout"]["xaxis"]["title"]["text"] for f in figures[:3]] == [
        "job completion time (hours)",
        "time since the first submission (hours)",
        "time since the first submission (hours)",
    ]
    assert figures[3]["layout"]["yaxis"]["title"]["text"] == "average JCT (hours)"
