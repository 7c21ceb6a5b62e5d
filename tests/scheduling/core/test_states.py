"""The job state table: terminal states are left only through the one recorded reopening. Ref: #4"""

from __future__ import annotations

import pytest

from scheduling.core.states import (
    REOPENINGS,
    TERMINAL,
    TRANSITIONS,
    InvalidTransition,
    JobState,
    check_reopen,
    check_transition,
)


@pytest.mark.parametrize("state", sorted(TERMINAL))
@pytest.mark.parametrize("target", list(JobState))
def test_no_ordinary_transition_leaves_a_terminal_state(state: JobState, target: JobState) -> None:
    assert TRANSITIONS[state] == frozenset()
    with pytest.raises(InvalidTransition):
        check_transition(state, target)


def test_the_only_reopening_is_a_failed_job_back_to_pending() -> None:
    assert REOPENINGS == {JobState.FAILED: frozenset({JobState.PENDING})}
    assert check_reopen("failed", "pending") is JobState.PENDING
    for current in JobState:
        for target in JobState:
            if (current, target) != (JobState.FAILED, JobState.PENDING):
                with pytest.raises(InvalidTransition):
                    check_reopen(current, target)
