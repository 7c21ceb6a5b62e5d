"""The power-command boundary: real scripts, run without a shell, with the node's name as the last argument."""

from __future__ import annotations

import time

from portal.energy.commands import run_power_command
from tests.portal.energy.conftest import Commands


def test_a_command_that_works_gets_the_node_name_last(commands: Commands) -> None:
    result = run_power_command(f"{commands.ok} --site 'rack 1'", "n7", timeout=5)
    assert result.ok
    assert commands.logged() == ["--site rack 1 n7"]
    assert result.detail == "done --site rack 1 n7"


def test_a_name_is_one_argument_never_shell_words(commands: Commands) -> None:
    result = run_power_command(commands.ok, "n1; touch pwned", timeout=5)
    assert result.ok and commands.logged() == ["n1; touch pwned"]


def test_a_failing_command_says_why(commands: Commands) -> None:
    result = run_power_command(commands.fail, "n2", timeout=5)
    assert not result.ok
    assert result.detail == "exit 1: BMC of n2 unreachable"


def test_a_command_past_its_timeout_is_killed_with_its_children(commands: Commands) -> None:
    started = time.monotonic()
    result = run_power_command(commands.slow, "n3", timeout=0.5)
    assert not result.ok and result.detail.startswith("timed out after 0.5 s")
    assert time.monotonic() - started < 5  # the sleeping child did not keep the pipe open


def test_a_missing_or_unparsable_command_is_a_failure_not_an_exception(commands: Commands) -> None:
    missing = run_power_command(commands.missing, "n4", timeout=5)
    assert not missing.ok and "No such file" in missing.detail
    assert not run_power_command("'unbalanced", "n4", timeout=5).ok


def test_one_command_without_the_other_is_a_warning_and_keeps_energy_saving_off(settings, commands: Commands) -> None:  # noqa: ANN001
    from portal.energy.apps import _power_commands_check
    from portal.energy.selectors import energy_enabled

    settings.CORRAL_POWER_OFF_COMMAND = commands.ok
    settings.CORRAL_POWER_ON_COMMAND = ""
    assert [m.id for m in _power_commands_check(None)] == ["energy.W001"]
    assert not energy_enabled()
    settings.CORRAL_POWER_ON_COMMAND = commands.ok
    assert _power_commands_check(None) == [] and energy_enabled()
